package disruption

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func drainEvents(rec *events.FakeRecorder) []string {
	var out []string
	for len(rec.Events) > 0 {
		out = append(out, <-rec.Events)
	}
	return out
}

// A drain's report: one Event on the Node with counts only, one per held
// job in its namespace, the hold observed, lost jobs counted by cause.
func TestDrainReport(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}
	g := &guardStub{}
	idle, done, deleted := runnerPod("r-idle", "n1"), runnerPod("done", "n1"), runnerPod("deleted", "n1")
	other := runnerPod("other", "n1")
	other.Namespace = "team-b"

	cases := map[string]struct {
		gone       bool
		wantNode   string
		wantLost   map[string]float64
		wantEvents int // per-job Events
	}{
		"uncordoned": {
			wantNode: "node n1 is drained no more after a drain of 10m0s: runner jobs held it for 10m0s; 1 idle runners released; 3 jobs waited for; 1 jobs lost; 1 still running",
			wantLost: map[string]float64{LostDeleted: 1}, wantEvents: 3,
		},
		"node gone": {
			gone:     true,
			wantNode: "node n1 left the cluster after a drain of 10m0s: runner jobs held it for 10m0s; 1 idle runners released; 3 jobs waited for; 2 jobs lost",
			wantLost: map[string]float64{LostDeleted: 1, LostNodeGone: 1}, wantEvents: 3,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			now = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
			rec, m := events.NewFakeRecorder(20), NewMetrics()
			d := newDrainReports(clock, rec, m)
			d.draining(node)
			if !d.releasedIdle(node, idle) || d.releasedIdle(node, idle) {
				t.Fatal("releasedIdle: want the first release of a pod new, the second (a pass on a stale cache) not")
			}
			d.waitsFor(node, done, "job build")
			d.waitsFor(node, deleted, "job test")
			d.waitsFor(node, other, "job lint")
			d.waitsFor(node, done, "job build") // said again: one job
			now = now.Add(5 * time.Minute)
			// done completed; deleted is being deleted while its runner runs.
			completed, deleting := done.DeepCopy(), deleted.DeepCopy()
			completed.Status.Phase = corev1.PodSucceeded
			deleting.DeletionTimestamp = &metav1.Time{Time: now}
			d.observe(node, []corev1.Pod{*completed, *deleting, *other}, g)
			if !d.tracking("n1") {
				t.Fatal("not tracking a draining node")
			}
			now = now.Add(5 * time.Minute)
			d.finish("n1", c.gone)
			if d.tracking("n1") {
				t.Error("still tracking a finished drain")
			}
			evs := drainEvents(rec)
			var nodeEvents, jobEvents []string
			for _, e := range evs {
				switch {
				case strings.Contains(e, EventDrainReport):
					nodeEvents = append(nodeEvents, e)
				case strings.Contains(e, EventDrainHeldByJob):
					jobEvents = append(jobEvents, e)
				}
			}
			if len(nodeEvents) != 1 || !strings.HasSuffix(nodeEvents[0], c.wantNode) {
				t.Errorf("node Events %q, want one ending %q", nodeEvents, c.wantNode)
			}
			for _, e := range nodeEvents {
				for _, name := range []string{"team-b", "job build", "r-idle", "deleted"} {
					if strings.Contains(e, name) {
						t.Errorf("the Node's report names %q: %s", name, e)
					}
				}
			}
			if len(jobEvents) != c.wantEvents {
				t.Errorf("job Events %q, want %d", jobEvents, c.wantEvents)
			}
			// The Event counts them; the metric is the re-run controller's,
			// once GitHub confirms the loss.
			lost := 0.0
			for _, want := range c.wantLost {
				lost += want
			}
			if n := testutil.CollectAndCount(m.JobsLost); n != 0 {
				t.Errorf("the drain report counted %d series of jobs lost; the re-run controller counts them", n)
			}
			if want := fmt.Sprintf("; %v jobs lost", lost); !strings.Contains(nodeEvents[0], want) {
				t.Errorf("the Node's report %q does not say %q", nodeEvents[0], want)
			}
			if n := testutil.CollectAndCount(m.DrainHold); n != 1 {
				t.Errorf("%d hold histograms, want 1", n)
			}
		})
	}
}

// A held job's pod the cache saw deleted is judged by its last state,
// whether or not a pass of the drain saw it gone first: lost when its runner
// still ran (a forced delete), ended when it had finished. One whose last
// state never came counts as ended, as before.
func TestDrainReportJudgesAPodByItsLastState(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}
	g := &guardStub{}
	forced, finished, unseen := runnerPod("forced", "n1"), runnerPod("finished", "n1"), runnerPod("unseen", "n1")
	rec := events.NewFakeRecorder(20)
	d := newDrainReports(func() time.Time { return now }, rec, NewMetrics())
	d.draining(node)
	for _, p := range []*corev1.Pod{forced, finished, unseen} {
		d.waitsFor(node, p, "job "+p.Name)
	}
	// A pass sees every pod gone before their last states come.
	d.observe(node, nil, g)
	last := forced.DeepCopy()
	last.DeletionTimestamp = &metav1.Time{Time: now}
	d.gone(last, g) // its runner still ran
	last = finished.DeepCopy()
	last.Status.Phase = corev1.PodSucceeded
	d.gone(last, g)
	d.gone(runnerPod("not-held", "n1"), g)
	d.finish("n1", true)
	var lost, ended []string
	for _, e := range drainEvents(rec) {
		switch {
		case strings.Contains(e, "was lost with its pod"):
			lost = append(lost, e)
		case strings.Contains(e, "until it ended"):
			ended = append(ended, e)
		case strings.Contains(e, EventDrainReport) && !strings.HasSuffix(e, "3 jobs waited for; 1 jobs lost"):
			t.Errorf("node report %q, want 3 waited for and 1 lost", e)
		}
	}
	if len(lost) != 1 || !strings.Contains(lost[0], "job forced") {
		t.Errorf("lost Events %q, want the forced pod's job only", lost)
	}
	if len(ended) != 2 || strings.Contains(strings.Join(ended, " "), "job forced") {
		t.Errorf("ended Events %q, want the finished and the unseen pods' jobs", ended)
	}
}

// A drain of a node without runner pods says nothing; finishing twice says once.
func TestDrainReportQuietWithoutRunners(t *testing.T) {
	rec := events.NewFakeRecorder(5)
	d := newDrainReports(time.Now, rec, nil)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	d.draining(node)
	d.observe(node, nil, &guardStub{})
	d.finish("n1", true)
	d.finish("n1", true)
	if evs := drainEvents(rec); len(evs) != 0 {
		t.Errorf("events %q, want none", evs)
	}
	var none *drainReports
	none.finish("n1", false) // a reconciler without reports records nothing
}

// Through the drain reconciler: a node whose MaintenancePlanned condition is
// True (not cordoned) has its idle runner released at once and its busy one
// when the job ends; once the condition goes, the Node gets its report.
func TestMaintenancePlannedDrainIsReported(t *testing.T) {
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: ConditionMaintenancePlanned, Status: corev1.ConditionTrue}}}}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(node, runnerPod("idle", "n1"), runnerPod("busy", "n1")).
		WithIndex(&corev1.Pod{}, podNodeNameIndex, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).Build()
	gh := &githubStub{busy: map[string]bool{"busy": true}, deletes: map[string]int{}}
	rec := events.NewFakeRecorder(50)
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	m := NewMetrics()
	r := &drainReconciler{cached: c, live: c, evictor: clientEvictor{c}, guard: &guardStub{}, github: gh, events: rec, said: newOnce(), log: logr.Discard(),
		backoff: newBackoff(time.Second, 15*time.Second, clock), now: clock, reports: newDrainReports(clock, rec, m)}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ci", Name: "idle"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("idle runner's pod on a node with maintenance planned: %v, want evicted", err)
	}
	now = now.Add(90 * time.Second)
	gh.busy["busy"] = false
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, req.NamespacedName, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions[0].Status = corev1.ConditionFalse
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	now = now.Add(10 * time.Second)
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(drainEvents(rec), "\n")
	want := "node n1 is drained no more after a drain of 1m40s: runner jobs held it for 1m30s; 2 idle runners released; 1 jobs waited for; 0 jobs lost"
	if !strings.Contains(all, EventDrainReport) || !strings.Contains(all, want) {
		t.Errorf("events lack the report %q:\n%s", want, all)
	}
	if !strings.Contains(all, EventDrainHeldByJob) || !strings.Contains(all, "held node n1 for 1m30s, until it ended") {
		t.Errorf("events lack the held job's:\n%s", all)
	}
	if r.reports.tracking("n1") {
		t.Error("the drain is still tracked after its report")
	}
}
