package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/webhook"
)

// drainLabel marks the pods a scenario's kubectl drain selects, so it moves
// only its own runners.
const drainLabel = "runner-guard-node/drain"

// kubectl drain with every runner-guard replica gone: the busy runner's job
// budget (the PodDisruptionBudget, minAvailable 1, runner-guard keeps while
// its runner holds a job) makes the API server itself refuse its eviction,
// and the idle runner's eviction goes through, since the evictions entry
// is set to failurePolicy Ignore (policy.evictionsFailurePolicy; the chart's
// default is Fail whatever the budgets, which refuses the idle runner's
// eviction too: TestNodeDrainChartDefaultsGuardDownRefusesLegacyEvictions).
// The legacy runners' job state comes from GitHub's listing
// (disruption.hintsFromListing, on by default), the one source of it for
// legacy runners without workflow_job deliveries.
func TestNodeDrainScaledToZeroKeepsBusyRunnerByItsBudget(t *testing.T) {
	s := newScenario(t, "budgets")
	s.withRunnerGuardValues("policy:\n  evictionsFailurePolicy: Ignore\ndisruption:\n  budgets: true\n  hintsFromListing: true\n")
	s.logRunnerGuardOnFailure()
	if p := s.failurePolicies()["evictions.runner-guard.io"]; p != "Ignore" {
		t.Fatalf("evictions entry at failurePolicy %q with policy.evictionsFailurePolicy Ignore, want Ignore", p)
	}

	s.startRunners("runner-busy", "runner-idle")
	s.startJob("runner-busy")
	busy, idle := s.pod("runner-busy"), s.pod("runner-idle")
	s.waitJobBudget(busy, 60*time.Second)
	if n := len(s.budgetsSelecting(idle)); n != 0 {
		t.Fatalf("%d budgets select the idle runner's pod, want 0", n)
	}
	for _, name := range []string{"runner-busy", "runner-idle"} {
		s.kubectl("-n", s.ns, "label", "pod", name, drainLabel+"=budgets")
	}

	// Cleanups run last first: uncordon, scale back up, restore the values.
	s.scaleRunnerGuardToZero()
	s.uncordonAfterTest()

	start := time.Now()
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	out, err := cluster.Kubectl(ctx, "drain", NodeName, "--pod-selector="+drainLabel+"=budgets",
		// --force: the runner pods have no controller (ARC's are owned by
		// its custom resources, which drain does not know).
		"--force", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=45s")
	t.Logf("drain ended after %s: %v\n%s", time.Since(start).Round(time.Second), err, lines(out, "evict", "drained", "error", "budget"))
	if err == nil {
		t.Fatalf("drain completed: the busy runner's pod was let go\n%s", out)
	}
	if !strings.Contains(out, "disruption budget") {
		t.Errorf("drain output does not say the busy runner's eviction was refused by its disruption budget:\n%s", out)
	}

	s.eventually("the idle runner's pod evicted and gone", 60*time.Second, func() error {
		if p := s.pod("runner-idle"); p != nil {
			return fmt.Errorf("idle runner's pod still there: %s", s.podSummary("runner-idle"))
		}
		return nil
	})
	p := s.pod("runner-busy")
	if p == nil || p.DeletionTimestamp != nil || p.UID != busy.UID || !s.containerRunning("runner-busy") || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("busy runner's pod disturbed by the drain: %s", s.podSummary("runner-busy"))
	}
	if l := s.logs("runner-busy"); strings.Contains(l, "job cancelled") || strings.Contains(l, "exiting") {
		t.Fatalf("the busy runner was stopped during its job: %s", l)
	}
	if !s.registered("runner-busy") {
		t.Fatal("busy runner unregistered")
	}
}

// budgetsSelecting are the PodDisruptionBudgets of the scenario's namespace
// whose selector matches pod's labels.
func (s *scenario) budgetsSelecting(pod *corev1.Pod) []policyv1.PodDisruptionBudget {
	s.t.Helper()
	list, err := cluster.Client.PolicyV1().PodDisruptionBudgets(s.ns).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatalf("list budgets: %v", err)
	}
	fresh, err := cluster.Client.CoreV1().Pods(s.ns).Get(s.ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("get pod %s: %v", pod.Name, err)
	}
	var out []policyv1.PodDisruptionBudget
	for _, b := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(fresh.Labels)) {
			out = append(out, b)
		}
	}
	return out
}

// waitJobBudget waits until runner-guard keeps the pod's job budget (only
// that pod selected, minAvailable 1, owned by the pod, labelled
// runner-guard's) and the disruption controller counts it: one healthy pod,
// no disruption allowed.
func (s *scenario) waitJobBudget(pod *corev1.Pod, within time.Duration) {
	s.t.Helper()
	s.eventually("the job budget of "+pod.Name+" in force", within, func() error {
		bs := s.budgetsSelecting(pod)
		if len(bs) != 1 {
			return fmt.Errorf("%d budgets select the pod", len(bs))
		}
		b := bs[0]
		switch {
		case b.Labels[disruption.LabelManagedBy] != "runner-guard" || b.Labels[webhook.LabelJobBudget] != string(pod.UID):
			return fmt.Errorf("budget %s is not runner-guard's job budget of the pod: labels %v", b.Name, b.Labels)
		case b.Spec.MinAvailable == nil || b.Spec.MinAvailable.IntValue() != 1:
			return fmt.Errorf("budget %s minAvailable %v, want 1", b.Name, b.Spec.MinAvailable)
		case len(b.OwnerReferences) != 1 || b.OwnerReferences[0].UID != pod.UID:
			return fmt.Errorf("budget %s owned by %v, want the pod", b.Name, b.OwnerReferences)
		case b.Status.ObservedGeneration < b.Generation || b.Status.CurrentHealthy != 1 || b.Status.DisruptionsAllowed != 0:
			return fmt.Errorf("budget %s not counted yet: %+v", b.Name, b.Status)
		}
		return nil
	})
}
