package disruption

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
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
			d.releasedIdle(node, idle)
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
			for cause, want := range c.wantLost {
				if got := testutil.ToFloat64(m.JobsLost.WithLabelValues(cause)); got != want {
					t.Errorf("jobs lost (%s) = %v, want %v", cause, got, want)
				}
			}
			if n := testutil.CollectAndCount(m.DrainHold); n != 1 {
				t.Errorf("%d hold histograms, want 1", n)
			}
		})
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
