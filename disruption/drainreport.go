package disruption

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
)

// Events of a drain's report.
const (
	// EventDrainReport, on the Node when its drain ends: counts only.
	EventDrainReport = "DrainReport"
	// EventDrainHeldByJob, on a runner's pod in its own namespace: the job
	// that held a draining node, and for how long.
	EventDrainHeldByJob = "DrainHeldByJob"
)

// drainReports keeps, per draining node, what its drain waited for, and
// says it when the node leaves or is drained no more. They live on the
// leader only: a drain that outlives a leader change is reported from the
// new leader's first look at it.
type drainReports struct {
	now     func() time.Time
	events  events.EventRecorder
	metrics *Metrics

	mu    sync.Mutex
	nodes map[string]*drainReport
}

// newDrainReports returns the reports; a nil *drainReports records nothing.
func newDrainReports(now func() time.Time, rec events.EventRecorder, m *Metrics) *drainReports {
	return &drainReports{now: now, events: rec, metrics: m, nodes: map[string]*drainReport{}}
}

// drainReport is one node's drain.
type drainReport struct {
	// node is the Node's reference, for the Event once it is gone.
	node  *corev1.Node
	start time.Time
	// runners: the drain saw a runner pod on the node; a drain of a node
	// without runners is not reported.
	runners  bool
	released map[types.UID]bool
	held     map[types.UID]*heldJob
	// holdEnd is when the last held job ended.
	holdEnd time.Time
	lost    int
}

// heldJob is a job the drain waited for.
type heldJob struct {
	pod   *corev1.Pod // its reference only
	job   string
	since time.Time
	over  bool
	// missing: a pass of the drain saw the pod gone before its last state
	// came (gone); finish then counts the job ended.
	missing bool
}

// draining notes that node is draining now (its start, the first time).
func (d *drainReports) draining(node *corev1.Node) *drainReport {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.get(node)
}

// get is draining under d.mu.
func (d *drainReports) get(node *corev1.Node) *drainReport {
	rep, ok := d.nodes[node.Name]
	if !ok {
		ref := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID}}
		rep = &drainReport{node: ref, start: d.now(), released: map[types.UID]bool{}, held: map[types.UID]*heldJob{}}
		d.nodes[node.Name] = rep
	}
	return rep
}

// tracking reports whether a drain of the node is being recorded.
func (d *drainReports) tracking(node string) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.nodes[node]
	return ok
}

// releasedIdle records that the drain released the pod's idle runner; a
// job it held before is over. It reports whether the pod was not counted yet
// (always true without reports): a pass that listed the pod before the
// cache saw its eviction releases it again.
func (d *drainReports) releasedIdle(node *corev1.Node, pod *corev1.Pod) (first bool) {
	first = true
	d.metRunner(node, func(rep *drainReport) {
		first = !rep.released[pod.UID]
		rep.released[pod.UID] = true
		if h := rep.held[pod.UID]; h != nil && !h.over {
			d.ended(rep, h, "")
		}
	})
	return first
}

// waitsFor records that the drain waits for the pod's job.
func (d *drainReports) waitsFor(node *corev1.Node, pod *corev1.Pod, job string) {
	d.metRunner(node, func(rep *drainReport) {
		if h := rep.held[pod.UID]; h != nil && !h.over {
			return
		}
		ref := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}
		rep.held[pod.UID] = &heldJob{pod: ref, job: job, since: d.now()}
	})
}

// metRunner records that the node's drain met a runner, then lets record
// write the rest to its report, under the lock; nothing without reports.
func (d *drainReports) metRunner(node *corev1.Node, record func(rep *drainReport)) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rep := d.get(node)
	rep.runners = true
	record(rep)
}

// observe looks at the node's runner pods after a pass of its drain: a held
// job whose pod completed, or left, is over; one whose pod is being deleted
// while its runner still runs is lost.
func (d *drainReports) observe(node *corev1.Node, pods []corev1.Pod, g Guard) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rep := d.get(node)
	present := map[types.UID]*corev1.Pod{}
	for i := range pods {
		if _, ok := g.RunnerContainer(&pods[i]); ok {
			rep.runners = true
			present[pods[i].UID] = &pods[i]
		}
	}
	for uid, h := range rep.held {
		if h.over {
			continue
		}
		pod, ok := present[uid]
		switch {
		case !ok:
			// Gone before its last state came: gone says how it ended.
			h.missing = true
		case pod.DeletionTimestamp != nil && g.RunnerRunning(pod):
			d.ended(rep, h, LostDeleted)
		case podDone(g, pod):
			d.ended(rep, h, "")
		}
	}
}

// gone closes the held job of a pod the controllers' cache saw deleted,
// from the pod's last state: lost with its pod when its runner still ran
// (a forced delete, a pod with no grace period), else ended.
func (d *drainReports) gone(pod *corev1.Pod, g Guard) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, rep := range d.nodes {
		if h := rep.held[pod.UID]; h != nil && !h.over {
			cause := ""
			if g.RunnerRunning(pod) {
				cause = LostDeleted
			}
			d.ended(rep, h, cause)
		}
	}
}

// ended closes a held job: lost when cause is set. Under d.mu.
func (d *drainReports) ended(rep *drainReport, h *heldJob, cause string) {
	h.over = true
	now := d.now()
	if now.After(rep.holdEnd) {
		rep.holdEnd = now
	}
	held := now.Sub(h.since).Round(time.Second)
	if cause != "" {
		// Counted in runner_guard_jobs_lost_total by the re-run controller,
		// once GitHub says the job did not succeed: counted here too, it
		// would be counted twice.
		rep.lost++
		d.events.Eventf(h.pod, nil, corev1.EventTypeWarning, EventDrainHeldByJob, "Drain",
			"%s held node %s for %s, then was lost with its pod (%s)", h.job, rep.node.Name, held, cause)
		return
	}
	d.events.Eventf(h.pod, nil, corev1.EventTypeNormal, EventDrainHeldByJob, "Drain",
		"%s held node %s for %s, until it ended", h.job, rep.node.Name, held)
}

// finish ends the node's drain (gone: the node left; else it is drained no
// more) and reports it: the Node's Event, with counts only, and the hold's
// observation. Jobs still held when the node left are lost.
func (d *drainReports) finish(node string, gone bool) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rep, ok := d.nodes[node]
	if !ok {
		return
	}
	delete(d.nodes, node)
	cause, still := LostNodeGone, 0
	for _, h := range rep.held {
		switch {
		case h.over:
		case h.missing:
			// Its pod's last state never came: gone unseen while running
			// would have been a delete the drain saw.
			d.ended(rep, h, "")
		case gone:
			d.ended(rep, h, cause)
		default:
			still++
			h.over, rep.holdEnd = true, d.now()
			d.events.Eventf(h.pod, nil, corev1.EventTypeNormal, EventDrainHeldByJob, "Drain",
				"%s held node %s for %s; the node is drained no more, and the job still runs", h.job, node, d.now().Sub(h.since).Round(time.Second))
		}
	}
	if !rep.runners {
		return
	}
	hold := time.Duration(0)
	if len(rep.held) > 0 {
		hold = rep.holdEnd.Sub(rep.start)
	}
	if d.metrics != nil {
		d.metrics.DrainHold.Observe(hold.Seconds())
	}
	how := "is drained no more"
	if gone {
		how = "left the cluster"
	}
	msg := fmt.Sprintf("node %s %s after a drain of %s: runner jobs held it for %s; %d idle runners released; %d jobs waited for; %d jobs lost",
		node, how, d.now().Sub(rep.start).Round(time.Second), hold.Round(time.Second), len(rep.released), len(rep.held), rep.lost)
	if !gone && still > 0 {
		msg += fmt.Sprintf("; %d still running", still)
	}
	d.events.Eventf(rep.node, nil, corev1.EventTypeNormal, EventDrainReport, "Drain", "%s", msg)
}
