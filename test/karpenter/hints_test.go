package karpenter

import (
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/disruption"
)

// With runner-guard's hints on (the default flags), scale-set style:
// Karpenter never chooses the node of a runner whose EphemeralRunner carries
// job fields, because runner-guard keeps karpenter.sh/do-not-disrupt "true"
// on its pod; it consolidates a node holding only idle runners (no job
// fields, idle on GitHub), each unregistered on GitHub before its pod goes;
// and once the job ends the hint goes and the node is Karpenter's to take.
// The node-seconds the busy runner holds a chosen-but-blocked node: 0
// (TestBusyRunnerHoldsChosenNode measures them with the hints off).
//
// Three nodes held by fillers: the busy runner on the first, two idle
// runners on the second, a pod annotated by its user on the third (it keeps
// that node, so there is room to move to when the busy node's turn comes).
func TestHintsKeepBusyRunnerNode(t *testing.T) {
	s := newScenario(t, "hints", NodePoolSpec{})
	fillers, nodes := s.launch(3)
	busyNode, idleNode, anchorNode := nodes[0], nodes[1], nodes[2]
	s.pod("anchor", anchorNode, map[string]string{DoNotDisrupt: "true"})
	busy := s.jobRunner("busy", busyNode, 1801)
	idle := []ScaleSetRunner{s.runner("idle-a", idleNode, false), s.runner("idle-b", idleNode, false)}
	// The hint is on the pod before Karpenter has a reason to look.
	if err := cluster.WaitAnnotation(s.ctx, s.name, busy.Name, DoNotDisrupt, "true", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, r := range idle {
		// Only the idle runner's low deletion cost, which makes its node the cheaper one.
		if err := cluster.WaitAnnotation(s.ctx, s.name, r.Name, disruption.AnnotationOwned, "deletion-cost", time.Minute); err != nil {
			t.Errorf("idle runner without job fields: %v", err)
		}
	}
	s.scaleDown(fillers...)

	s.requireIdleNodeTaken(idleNode, busyNode, anchorNode, busy, idle)

	// The job ends: GitHub shows the runner idle and ARC marks its
	// EphemeralRunner Succeeded. The hint goes, and Karpenter (nudged: it
	// does not look again on an annotation change) takes the node, moving
	// the pod beside the anchor.
	cluster.GitHub.SetBusy(busy.Scope, busy.Name, false)
	if err := cluster.SetEphemeralRunnerPhase(s.ctx, busy, "Succeeded"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitAnnotation(s.ctx, s.name, busy.Name, DoNotDisrupt, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Nudge(s.ctx, s.name, busyNode); err != nil {
		t.Fatal(err)
	}
	s.requireConsolidated(busyNode, busy.Name)
	s.requireKept(anchorNode, "anchor")
}

// heldSeconds is how long a node was tainted DisruptedTaint before it went
// (until now while it remains): 0 when it never was.
func heldSeconds(r NodeRecord) float64 {
	switch {
	case r.Tainted.IsZero():
		return 0
	case r.Gone.IsZero():
		return time.Since(r.Tainted).Seconds()
	}
	return r.Gone.Sub(r.Tainted).Seconds()
}
