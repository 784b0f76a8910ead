package karpenter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/test/process"
)

// Balanced consolidation (the NodePool's disruption.consolidationPolicy
// "Balanced", Karpenter v1.14+) with runner-guard's deletion cost alone (no
// do-not-disrupt, safe-to-evict or budgets): Karpenter takes the idle
// runners' node first, and declines the busy runner's node while its job
// runs; once the job ends, the node is Karpenter's to take.
//
// How Karpenter v1.15 reads the cost (sigs.k8s.io/karpenter
// pkg/utils/disruption/disruption.go): a pod's eviction cost is
// 1 + pod-deletion-cost/2^27, clamped to [-10, 10], and a node's
// disruption cost is 1 + the sum of its pods' positive costs. The idle
// runners (-1e9: -6.45 each) cost nothing, so their node is empty to
// Karpenter (Candidate.IsEmpty), which removes it as it removes empty
// nodes. The busy runner (+1e9: 8.45) makes its node cost 9.45. Balanced
// approves a move only when (savings / pool cost) / (disruption / pool
// disruption) >= 1/2 (pkg/controllers/disruption/balanced.go): with four
// nodes of one price, at most 1/4 / (9.45/14.45) = 0.38, and with three,
// once the idle runners' node is gone, at most 1/3 / (9.45/13.45) = 0.47,
// both refused. (Karpenter counts an anchor's node at 1 rather than 2
// after its NodeClaim changes, which lowers the scores further: v1.15's
// state.Cluster.newStateFromNodeClaim does not carry the pods' costs over.)
// Without the costs (every pod 1) the busy runner's node, cost 2 against
// the idle runners' 3, would be the better buy and come first.
//
// Four nodes held by fillers: the busy runner on the first, two idle
// runners on the second, a pod annotated by its user on each of the others
// (it keeps its node, which leaves room to move to, and counts in the
// pool's totals).
func TestBalancedConsolidationPrefersIdleRunnersNode(t *testing.T) {
	s := newScenario(t, "balanced", NodePoolSpec{ConsolidationPolicy: "Balanced"})
	s.webhookFlags("--hint-do-not-disrupt=false", "--hint-safe-to-evict=false", "--disruption-budgets=false")
	fillers, nodes := s.launch(4)
	busyNode, idleNode := nodes[0], nodes[1]
	idleUID, err := cluster.NodeUID(s.ctx, idleNode)
	if err != nil {
		t.Fatal(err)
	}
	dnd := map[string]string{DoNotDisrupt: "true"}
	s.pod("anchor-a", nodes[2], dnd)
	s.pod("anchor-b", nodes[3], dnd)
	busy := s.jobRunner("busy", busyNode, 1903)
	idle := []ScaleSetRunner{s.runner("idle-a", idleNode, false), s.runner("idle-b", idleNode, false)}
	s.waitDeletionCosts(busy, idle...)
	start := time.Now()
	s.scaleDown(fillers...)

	if first := s.firstChosen(busyNode, idleNode); first != idleNode {
		t.Fatalf("Karpenter chose the busy runner's node %s first, not the idle runners' node %s", busyNode, idleNode)
	}
	r := s.requireConsolidated(idleNode, idle[0].Name)
	for _, ir := range idle {
		s.requireReleased(ir)
	}
	t.Logf("idle runners' node %s consolidated %s after the scale-down", idleNode, r.Gone.Sub(start).Round(time.Second))
	report := s.requireDrainReport(idleNode, idleUID)
	t.Logf("drain report of node %s: %s", idleNode, report.Note)
	if report.Waited != 0 || report.Lost != 0 || report.Hold != 0 || report.Released > len(idle) {
		t.Errorf("drain report of the idle runners' node: %+v; want at most %d released, no job waited for or lost, held 0s", report, len(idle))
	}

	s.requireDeclined(busyNode)
	s.requireKept(busyNode, busy.Name)
	s.requireKept(nodes[2], "anchor-a")
	s.requireKept(nodes[3], "anchor-b")
	if !cluster.Registered(busy) {
		t.Errorf("busy runner %s was unregistered on GitHub while its job runs", busy.Name)
	}

	// The job ends: runner-guard drops the cost (the runner can hold no job
	// now), and Karpenter (nudged: it does not look again on an annotation
	// change) takes the node, moving the pod beside an anchor.
	cluster.GitHub.SetBusy(busy.Scope, busy.Name, false)
	if err := cluster.SetEphemeralRunnerPhase(s.ctx, busy, "Succeeded"); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitAnnotation(s.ctx, s.name, busy.Name, disruption.AnnotationDeletionCost, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Nudge(s.ctx, s.name, busyNode); err != nil {
		t.Fatal(err)
	}
	s.requireConsolidated(busyNode, busy.Name)
}

// waitDeletionCosts waits until runner-guard has given the busy runner's
// pod the busy deletion cost and each idle runner's pod the idle one.
func (s *scenario) waitDeletionCosts(busy ScaleSetRunner, idle ...ScaleSetRunner) {
	s.t.Helper()
	if err := cluster.WaitAnnotation(s.ctx, s.name, busy.Name, disruption.AnnotationDeletionCost, disruption.DeletionCost.Value, time.Minute); err != nil {
		s.t.Fatal(err)
	}
	for _, r := range idle {
		if err := cluster.WaitAnnotation(s.ctx, s.name, r.Name, disruption.AnnotationDeletionCost, disruption.DeletionCost.Idle, time.Minute); err != nil {
			s.t.Fatal(err)
		}
	}
}

// firstChosen waits until Karpenter has tainted one of nodes and returns it.
func (s *scenario) firstChosen(nodes ...string) string {
	s.t.Helper()
	var first string
	if err := process.Poll(s.ctx, fmt.Sprintf("one of nodes %v tainted %s", nodes, DisruptedTaint), 3*time.Minute, func(context.Context) error {
		var at time.Time
		for _, n := range nodes {
			if r := s.nodes.Record(n); !r.Tainted.IsZero() && (at.IsZero() || r.Tainted.Before(at)) {
				first, at = n, r.Tainted
			}
		}
		if first == "" {
			return errNotYet
		}
		return nil
	}); err != nil {
		s.t.Fatal(err)
	}
	return first
}

// Karpenter's metrics of its disruption loop (pkg/controllers/disruption/metrics.go).
const (
	eligibleNodesMetric    = "karpenter_voluntary_disruption_eligible_nodes"
	evaluationsMetric      = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count"
	reasonUnderutilized    = "underutilized"
	singleNodeConsolidated = "single"
)

// requireDeclined waits until Karpenter has twice finished a single-node
// consolidation pass while node was its one node eligible for it (no other
// node of the cluster is), and fails if Karpenter chose the node meanwhile:
// it looked at the node and declined it. A pass that chooses a node taints
// it before it ends.
func (s *scenario) requireDeclined(node string) {
	s.t.Helper()
	var passes float64
	if err := process.Poll(s.ctx, "Karpenter finds node "+node+" eligible for consolidation", 2*time.Minute, func(ctx context.Context) error {
		text, err := cluster.KarpenterMetrics(ctx)
		if err != nil {
			return err
		}
		eligible, _ := MetricSum(text, eligibleNodesMetric, map[string]string{"reason": reasonUnderutilized})
		if eligible != 1 {
			return fmt.Errorf("%w: %v eligible nodes", errNotYet, eligible)
		}
		passes, _ = MetricSum(text, evaluationsMetric, map[string]string{"reason": reasonUnderutilized, "consolidation_type": singleNodeConsolidated})
		return nil
	}); err != nil {
		s.t.Fatal(err)
	}
	if err := process.Poll(s.ctx, "two more single-node consolidation passes of Karpenter", 2*time.Minute, func(ctx context.Context) error {
		got, err := cluster.KarpenterMetric(ctx, evaluationsMetric, map[string]string{"reason": reasonUnderutilized, "consolidation_type": singleNodeConsolidated})
		if err != nil {
			return err
		}
		if got < passes+2 {
			return fmt.Errorf("%w: %v passes", errNotYet, got-passes)
		}
		return nil
	}); err != nil {
		s.t.Fatal(err)
	}
	if r := s.nodes.Record(node); !r.Tainted.IsZero() {
		s.t.Errorf("Karpenter chose node %s (tainted at %s)", node, r.Tainted)
	}
}
