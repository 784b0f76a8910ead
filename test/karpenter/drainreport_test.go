package karpenter

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/test/process"
	"github.com/runner-guard/runner-guard/webhook"
)

// A drain report for a node Karpenter removed. With the hints and budgets
// off, Karpenter chooses the node of a busy runner (its EphemeralRunner
// carries the job fields) and an idle one: runner-guard's drain releases
// the idle runner and waits for the job, whose pod's evictions are refused.
// The job ends (the runner exits), Karpenter removes the node, and
// runner-guard writes one Event on the gone Node, counts only: the hold,
// the idle runners it released, one job waited for, none lost; and one
// Event on the busy runner's pod, in its namespace, naming the job.
//
// Two nodes held by fillers: both runners on the first, a pod annotated by
// its user on the second, which pins Karpenter's choice to the first.
func TestDrainReportForNodeKarpenterRemoved(t *testing.T) {
	s := newScenario(t, "report", NodePoolSpec{})
	fillers, node, uid, anchorNode, busy := s.busyRunnerNode(1904)
	idle := s.runner("idle", node, false)
	refused, err := cluster.RefusedPOSTs(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.scaleDown(fillers...)

	s.waitPodEvent(busy.Name, disruption.EventDrainWaitsForJob)
	waiting := time.Now()
	if err := cluster.WaitPodGone(s.ctx, s.name, idle.Name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	// The job holds the node while Karpenter asks again (two refusals: it
	// retries, it did not lose one request).
	if err := cluster.WaitRefusedPOSTs(s.ctx, refused+2, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	jobEnd := time.Now()
	if err := cluster.EndJob(s.ctx, busy); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitNodeGone(s.ctx, node, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	if r := s.nodes.Record(node); r.Tainted.IsZero() {
		t.Errorf("node %s went without the %s taint", node, DisruptedTaint)
	}
	s.requireKept(anchorNode, "anchor")

	report := s.requireDrainReport(node, uid)
	t.Logf("drain report of node %s: %s", node, report.Note)
	// The idle runner is counted when the drain released it; Karpenter's own
	// eviction, which runner-guard's webhook admits, may have been first.
	releasedByDrain := len(s.podEvents(idle.Name, disruption.EventRunnerReleased))
	if report.Released != releasedByDrain || report.Waited != 1 || report.Lost != 0 {
		t.Errorf("drain report counts %d released, %d waited for, %d lost; want %d released (the drain's %s Events), 1 waited for, 0 lost",
			report.Released, report.Waited, report.Lost, releasedByDrain, disruption.EventRunnerReleased)
	}
	// The drain waited from before we saw it wait until after the job
	// ended; it cannot have waited longer than the whole scenario.
	if least, most := jobEnd.Sub(waiting)-time.Second, gone.Sub(start)+time.Second; report.Hold < least || report.Hold > most {
		t.Errorf("drain report: jobs held node %s for %s; want between %s and %s", node, report.Hold, least.Round(time.Second), most.Round(time.Second))
	}

	s.requireHeldByJob(busy.Name, node, corev1.EventTypeNormal, "until it ended")
	if len(s.podEvents(idle.Name, disruption.EventDrainHeldByJob)) > 0 {
		t.Errorf("idle runner %s has a %s Event: it held no job", idle.Name, disruption.EventDrainHeldByJob)
	}
}

// busyRunnerNode is the start of a drain-report scenario, with the hints,
// deletion cost and budgets off (Karpenter may choose a busy runner's
// node): two nodes held by fillers, a busy runner of job id on the first
// and a pod annotated by its user on the second, which pins Karpenter's
// choice to the first. It returns the fillers, the first node and its UID,
// the second node and the busy runner.
func (s *scenario) busyRunnerNode(id int64) (fillers []string, node string, uid types.UID, anchorNode string, busy ScaleSetRunner) {
	s.t.Helper()
	s.webhookFlags("--hint-do-not-disrupt=false", "--hint-safe-to-evict=false", "--hint-deletion-cost=false", "--disruption-budgets=false")
	fillers, nodes := s.launch(2)
	node, anchorNode = nodes[0], nodes[1]
	uid, err := cluster.NodeUID(s.ctx, node)
	if err != nil {
		s.t.Fatal(err)
	}
	s.pod("anchor", anchorNode, map[string]string{DoNotDisrupt: "true"})
	return fillers, node, uid, anchorNode, s.jobRunner("busy", node, id)
}

// requireHeldByJob fails unless the pod has exactly one DrainHeldByJob
// Event, of type eventType, naming its job (WithJob's) and node, and
// saying how the hold ended.
func (s *scenario) requireHeldByJob(pod, node, eventType, ended string) {
	s.t.Helper()
	held := s.podEvents(pod, disruption.EventDrainHeldByJob)
	switch {
	case len(held) != 1:
		s.t.Errorf("runner %s: %d %s Events, want one: %v", pod, len(held), disruption.EventDrainHeldByJob, notes(held))
	case held[0].Type != eventType || !strings.Contains(held[0].Note, `job "build" of acme/app`) ||
		!strings.Contains(held[0].Note, "held node "+node) || !strings.Contains(held[0].Note, ended):
		s.t.Errorf("runner %s: %s Event %s %q; want a %s one naming the job and node %s, and %q",
			pod, disruption.EventDrainHeldByJob, held[0].Type, held[0].Note, eventType, node, ended)
	}
}

// waitPodEvent waits until runner-guard has written an Event with reason
// about the pod, and returns it.
func (s *scenario) waitPodEvent(pod, reason string) eventsv1.Event {
	s.t.Helper()
	var evs []eventsv1.Event
	if err := process.Poll(s.ctx, reason+" Event on pod "+pod, 2*time.Minute, func(ctx context.Context) error {
		var err error
		if evs, err = cluster.EventsAbout(ctx, s.name, "Pod", pod, reason); err != nil {
			return err
		}
		if len(evs) == 0 {
			return errNotYet
		}
		return nil
	}); err != nil {
		s.t.Fatal(err)
	}
	return evs[0]
}

// podEvents lists the Events with reason about the pod.
func (s *scenario) podEvents(pod, reason string) []eventsv1.Event {
	s.t.Helper()
	evs, err := cluster.EventsAbout(s.ctx, s.name, "Pod", pod, reason)
	if err != nil {
		s.t.Fatal(err)
	}
	return evs
}

// requireDrainReport waits for runner-guard's drain report on the node of
// uid and fails if it names this scenario's namespace: a Node's Events are
// readable by whoever reads namespace default.
func (s *scenario) requireDrainReport(node string, uid types.UID) DrainReport {
	s.t.Helper()
	report, err := cluster.WaitDrainReport(s.ctx, node, uid, time.Minute)
	if err != nil {
		s.t.Fatal(err)
	}
	// The node's name holds its NodePool's, which is the namespace's here.
	if rest := strings.ReplaceAll(report.Note, node, "<node>"); strings.Contains(rest, s.name) || strings.Contains(rest, "acme/app") {
		s.t.Errorf("drain report of node %s names namespace %s or a job: %s", node, s.name, report.Note)
	}
	if !strings.Contains(report.Note, "left the cluster") {
		s.t.Errorf("drain report of node %s does not say it left the cluster: %s", node, report.Note)
	}
	return report
}

// A job lost to a forced delete: while Karpenter drains the busy runner's
// node, its user marks the pod runner-guard.io/force-delete, and
// runner-guard lets Karpenter's next eviction go with the job still
// running. The drain report on the gone Node counts the job waited for and
// lost; the job's own Event, in its namespace, says it was lost.
//
// The pod's runner takes a few seconds to stop, as under a kubelet (KWOK's
// delay before it deletes a terminating pod, held by a finalizer: the
// harness's pods have no grace period of their own). A pod removed at once
// is never seen terminating, and the drain then counts its job as ended,
// not lost: the report cannot yet tell a forced removal from a job's end.
func TestDrainReportCountsJobLostToForcedDelete(t *testing.T) {
	s := newScenario(t, "lost", NodePoolSpec{})
	fillers, node, uid, anchorNode, busy := s.busyRunnerNode(1905)
	stopping := []byte(`{"metadata":{"finalizers":["test.runner-guard.io/stopping"],"annotations":{"pod-delete.stage.kwok.x-k8s.io/delay":"5s"}}}`)
	if _, err := cluster.Client.CoreV1().Pods(s.name).Patch(s.ctx, busy.Name, types.MergePatchType, stopping, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	refused, err := cluster.RefusedPOSTs(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.scaleDown(fillers...)

	s.waitPodEvent(busy.Name, disruption.EventDrainWaitsForJob)
	if err := cluster.WaitRefusedPOSTs(s.ctx, refused+1, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := cluster.SetAnnotation(s.ctx, s.name, busy.Name, webhook.DefaultForceAnnotation, "true", false); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitNodeGone(s.ctx, node, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	s.requireKept(anchorNode, "anchor")

	report := s.requireDrainReport(node, uid)
	t.Logf("drain report of node %s: %s", node, report.Note)
	if report.Released != 0 || report.Waited != 1 || report.Lost != 1 || report.Hold <= 0 {
		t.Errorf("drain report counts %d released, %d waited for, %d lost, held %s; want 0 released, 1 waited for, 1 lost, held a while",
			report.Released, report.Waited, report.Lost, report.Hold)
	}
	s.requireHeldByJob(busy.Name, node, corev1.EventTypeWarning, "was lost with its pod")
}
