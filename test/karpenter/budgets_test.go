package karpenter

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Job budgets alone (no do-not-disrupt, no safe-to-evict), with runner-guard
// stopped once the budget is in place: Karpenter never chooses the busy
// runner's node, because the pod's budget allows no disruption, and
// consolidates the node of the plain pod beside it. The API server, not
// runner-guard, holds the job.
func TestBudgetsKeepBusyRunnerNodeWithWebhookStopped(t *testing.T) {
	s := newScenario(t, "budgets", NodePoolSpec{})
	s.webhookFlags("--hint-do-not-disrupt=false", "--hint-safe-to-evict=false", "--hint-deletion-cost=false")
	fillers, nodes := s.launch(3)
	busyNode, plainNode, anchorNode := nodes[0], nodes[1], nodes[2]
	s.pod("anchor", anchorNode, map[string]string{DoNotDisrupt: "true"})
	s.pod("plain", plainNode, nil)
	busy := s.jobRunner("busy", busyNode, 1901)
	uid, err := cluster.PodUID(s.ctx, s.name, busy.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitJobBudget(s.ctx, s.name, string(uid), time.Minute); err != nil {
		t.Fatal(err)
	}
	// As the chart installs it with policy.evictionsFailurePolicy: Ignore
	// (its default is Fail): runner-guard's outage holds no eviction, and
	// the budget alone holds the busy runner.
	setEvictionsPolicy(t, admissionregistrationv1.Ignore)
	if err := cluster.StopWebhook(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cluster.StartWebhook(ctx); err != nil {
			t.Errorf("cleanup: start the webhook again: %v", err)
		}
		setEvictionsPolicy(t, admissionregistrationv1.Fail)
	})
	s.scaleDown(fillers...)

	s.requireConsolidated(plainNode, "plain")
	s.requireKept(busyNode, busy.Name)
	s.requireKept(anchorNode, "anchor")
	if !cluster.Registered(busy) {
		t.Errorf("busy runner %s was unregistered while its job runs", busy.Name)
	}
}

// Deletion cost alone (no do-not-disrupt, safe-to-evict or budgets):
// between the node of a busy runner and the node of two idle ones, both
// consolidatable, Karpenter takes the idle runners' node first.
func TestDeletionCostPrefersIdleRunnersNode(t *testing.T) {
	s := newScenario(t, "cost", NodePoolSpec{})
	s.webhookFlags("--hint-do-not-disrupt=false", "--hint-safe-to-evict=false", "--disruption-budgets=false")
	fillers, nodes := s.launch(3)
	busyNode, idleNode, anchorNode := nodes[0], nodes[1], nodes[2]
	s.pod("anchor", anchorNode, map[string]string{DoNotDisrupt: "true"})
	busy := s.jobRunner("busy", busyNode, 1902)
	idle := []ScaleSetRunner{s.runner("idle-a", idleNode, false), s.runner("idle-b", idleNode, false)}
	s.waitDeletionCosts(busy, idle...)
	s.scaleDown(fillers...)

	first := s.requireConsolidated(idleNode, idle[0].Name)
	held := s.nodes.Record(busyNode)
	if !held.Tainted.IsZero() && held.Tainted.Before(first.Tainted) {
		t.Errorf("Karpenter chose the busy runner's node %s (at %s) before the idle runners' node %s (at %s)",
			busyNode, held.Tainted, idleNode, first.Tainted)
	}
}

// setEvictionsPolicy sets the failurePolicy of the evictions entry of the
// harness's webhook configuration.
func setEvictionsPolicy(t *testing.T, p admissionregistrationv1.FailurePolicyType) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	vwcs := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	vwc, err := vwcs.Get(ctx, "runner-guard", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("webhook configuration: %v", err)
	}
	found := false
	for i := range vwc.Webhooks {
		if vwc.Webhooks[i].Name == "evictions.runner-guard.io" {
			vwc.Webhooks[i].FailurePolicy = &p
			found = true
		}
	}
	if !found {
		t.Fatal("webhook configuration runner-guard has no evictions entry")
	}
	if _, err := vwcs.Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set the evictions entry to %s: %v", p, err)
	}
}
