package karpenter

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/test/process"
)

// DrainReport is what runner-guard's DrainReport Event on a Node says once
// the node has left: counts only.
type DrainReport struct {
	Note string
	// Hold is how long runner jobs held the node (rounded to a second).
	Hold                   time.Duration
	Released, Waited, Lost int
}

// drainReportCounts matches the counts of a DrainReport Event's note
// (disruption/drainreport.go).
var drainReportCounts = regexp.MustCompile(`runner jobs held it for (\S+); (\d+) idle runners released; (\d+) jobs waited for; (\d+) jobs lost`)

// ParseDrainReport reads the counts of a DrainReport Event's note.
func ParseDrainReport(note string) (DrainReport, error) {
	m := drainReportCounts.FindStringSubmatch(note)
	if m == nil {
		return DrainReport{}, fmt.Errorf("drain report %q: no counts", note)
	}
	r := DrainReport{Note: note}
	var err error
	if r.Hold, err = time.ParseDuration(m[1]); err != nil {
		return DrainReport{}, fmt.Errorf("drain report %q: hold: %w", note, err)
	}
	for i, n := range []*int{&r.Released, &r.Waited, &r.Lost} {
		if *n, err = strconv.Atoi(m[i+2]); err != nil {
			return DrainReport{}, fmt.Errorf("drain report %q: %w", note, err)
		}
	}
	return r, nil
}

// EventsAbout lists the events.k8s.io Events in ns about the object of kind
// and name with reason. An Event about a Node, a cluster-scoped object that
// may be gone by then, lives in namespace default and names the Node in
// regarding.
func (c *Cluster) EventsAbout(ctx context.Context, ns, kind, name, reason string) ([]eventsv1.Event, error) {
	list, err := c.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("events in %s: %w", ns, err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out, nil
}

// WaitDrainReport waits until runner-guard has written the DrainReport
// Event on the Node of uid, and returns it; more than one is an error (one
// Event per drain).
func (c *Cluster) WaitDrainReport(ctx context.Context, node string, uid types.UID, timeout time.Duration) (DrainReport, error) {
	var evs []eventsv1.Event
	err := process.Poll(ctx, "drain report on node "+node, timeout, func(ctx context.Context) error {
		var err error
		if evs, err = c.EventsAbout(ctx, metav1.NamespaceDefault, "Node", node, disruption.EventDrainReport); err != nil {
			return err
		}
		if len(evs) == 0 {
			return errNotYet
		}
		return nil
	})
	switch {
	case err != nil:
		return DrainReport{}, err
	case len(evs) > 1:
		return DrainReport{}, fmt.Errorf("%d %s Events on node %s, want one: %v", len(evs), disruption.EventDrainReport, node, notes(evs))
	case evs[0].Regarding.UID != uid:
		return DrainReport{}, fmt.Errorf("%s Event names node %s of UID %s, want %s", disruption.EventDrainReport, node, evs[0].Regarding.UID, uid)
	}
	return ParseDrainReport(evs[0].Note)
}

// NodeUID is the Node's UID, to tell its Events from a later node's of the same name.
func (c *Cluster) NodeUID(ctx context.Context, node string) (types.UID, error) {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return n.UID, nil
}

func notes(evs []eventsv1.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type + " " + e.Note
	}
	return out
}
