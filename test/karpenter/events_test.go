package karpenter

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

const eventsSecret = "karpenter-webhook-secret"

// With runner-guard's events endpoint on and its defaults otherwise
// (--hint-from-listing off), ARC legacy runners: GitHub's in_progress
// delivery puts the job on the busy runner's pod, and with it
// karpenter.sh/do-not-disrupt, with no request to GitHub; so Karpenter never
// chooses that node and consolidates the node of two idle legacy runners,
// each unregistered on GitHub before its pod goes. Once GitHub delivers the
// job's completed, the hint goes and stays gone (the listing the idle
// node's drain took while the job ran still shows the runner busy), and
// Karpenter takes the busy runner's node too. Without events nothing on a
// legacy pod says it is busy, and Karpenter chooses its node first
// (issue 32): requireChosenFirst fails at once.
//
// Three nodes held by fillers, laid out as TestHintsKeepBusyRunnerNode: the
// busy runner on the first, two idle runners on the second, a pod annotated
// by its user on the third.
func TestEventsKeepBusyLegacyRunnerNode(t *testing.T) {
	s := newScenario(t, "events", NodePoolSpec{})
	s.eventsOn()
	fillers, nodes := s.launch(3)
	busyNode, idleNode, anchorNode := nodes[0], nodes[1], nodes[2]
	s.pod("anchor", anchorNode, map[string]string{DoNotDisrupt: "true"})
	busy := s.legacyRunner("busy", busyNode)
	idle := []LegacyRunner{s.legacyRunner("idle-a", idleNode), s.legacyRunner("idle-b", idleNode)}

	// The job starts: GitHub delivers in_progress, and the pod carries its
	// job and the hint before Karpenter has a reason to look.
	before := len(cluster.GitHub.Requests())
	cluster.GitHub.SetBusy(busy.Scope, busy.Name, true)
	job := s.waitJob(busy.Name)
	if err := cluster.WaitAnnotation(s.ctx, s.name, busy.Name, DoNotDisrupt, "true", time.Minute); err != nil {
		t.Fatal(err)
	}
	if reqs := s.githubRequests(before); len(reqs) != 0 {
		t.Errorf("the job and the hint of a delivery cost GitHub requests: %v", reqs)
	}
	t.Logf("pod %s carries %s from GitHub's delivery", busy.Name, job)
	s.scaleDown(fillers...)

	s.requireChosenFirst(idleNode, busyNode)
	s.requireIdleNodeTaken(idleNode, busyNode, anchorNode, busy, idle)

	// The job ends: GitHub delivers completed, the job and the hint go, and
	// Karpenter (nudged: it does not look again on an annotation change)
	// takes the node; runner-guard unregisters the runner first.
	jobEnd := time.Now()
	cluster.GitHub.SetBusy(busy.Scope, busy.Name, false)
	s.waitJobRunning(busy.Name, false)
	if err := cluster.WaitAnnotation(s.ctx, s.name, busy.Name, DoNotDisrupt, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Nudge(s.ctx, s.name, busyNode); err != nil {
		t.Fatal(err)
	}
	r := s.requireConsolidated(busyNode, busy.Name)
	s.requireReleased(busy)
	t.Logf("node %s consolidated %.1f s after the job's completed", busyNode, r.Gone.Sub(jobEnd).Seconds())
	s.requireKept(anchorNode, "anchor")
	for _, d := range cluster.Fake().Deliveries() {
		if d.Status != http.StatusOK {
			t.Errorf("delivery %+v answered %d, want 200", d, d.Status)
		}
	}
}

// eventsOn restarts runner-guard with its events endpoint and has the fake
// GitHub deliver signed workflow_job events there; both are undone when the
// test ends (deliveries stop first).
func (s *scenario) eventsOn() {
	s.t.Helper()
	if cluster.Fake() == nil {
		s.t.Fatal("events need the in-process fake GitHub: it delivers to a port of this host")
	}
	args, base, err := process.EventsEndpoint(s.t.TempDir(), eventsSecret)
	if err != nil {
		s.t.Fatal(err)
	}
	s.webhookFlags(args...)
	cluster.Fake().DeliverEvents(ghfake.Events{URL: base + events.Path, Secret: eventsSecret})
	s.t.Cleanup(func() { cluster.Fake().DeliverEvents(ghfake.Events{}) })
}

// requireChosenFirst waits until Karpenter taints node DisruptedTaint, and
// fails as soon as it has tainted notNode instead (or as well).
func (s *scenario) requireChosenFirst(node, notNode string) {
	s.t.Helper()
	var wrong NodeRecord
	err := process.Poll(s.ctx, "Karpenter chooses node "+node, 3*time.Minute, func(context.Context) error {
		if wrong = s.nodes.Record(notNode); !wrong.Tainted.IsZero() {
			return nil
		}
		if s.nodes.Record(node).Tainted.IsZero() {
			return errNotYet
		}
		return nil
	})
	switch {
	case !wrong.Tainted.IsZero():
		s.t.Fatalf("Karpenter chose node %s (tainted at %s), want only %s", notNode, wrong.Tainted.Format(time.RFC3339Nano), node)
	case err != nil:
		s.t.Fatal(err)
	}
}

// waitJob waits until the pod carries a job annotation that verifies with
// the events secret, and returns the job.
func (s *scenario) waitJob(pod string) jobannotation.Job {
	s.t.Helper()
	return s.waitJobRunning(pod, true)
}

// waitJobRunning waits until the pod's verified job record holds a job in
// progress (running) or no longer does (its completed is recorded), and
// returns the job it holds.
func (s *scenario) waitJobRunning(pod string, running bool) jobannotation.Job {
	s.t.Helper()
	var job jobannotation.Job
	err := process.Poll(s.ctx, fmt.Sprintf("job in progress on pod %s: %v", pod, running), time.Minute, func(ctx context.Context) error {
		p, err := cluster.Client.CoreV1().Pods(s.name).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var ok bool
		if job, ok = fixture.JobKeys(s.t, eventsSecret).JobFromPod(p); ok != running {
			return fmt.Errorf("%w: annotations %v", errNotYet, p.Annotations)
		}
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return job
}

// githubRequests lists the fake GitHub's requests naming the scenario's
// organization, from the index-th request on.
func (s *scenario) githubRequests(index int) []string {
	var out []string
	for _, r := range cluster.GitHub.Requests()[index:] {
		if r.Scope != nil && strings.EqualFold(r.Scope.Name, s.scope.Name) {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}
