package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/webhook"
)

// jobBudgets lists runner-guard's job budgets of the scenario's namespace
// selecting the pod of uid.
func (s *scenario) jobBudgets(podUID string) []policyv1.PodDisruptionBudget {
	s.t.Helper()
	list, err := env.Client.PolicyV1().PodDisruptionBudgets(s.ns).List(s.ctx, metav1.ListOptions{LabelSelector: webhook.LabelJobBudget + "=" + podUID})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []policyv1.PodDisruptionBudget
	for i := range list.Items {
		if webhook.IsJobBudget(&list.Items[i]) {
			out = append(out, list.Items[i])
		}
	}
	return out
}

// evictionsFailurePolicy sets the evictions entry's failurePolicy and
// returns the one it had.
func evictionsFailurePolicy(ctx context.Context, t *testing.T, p admissionregistrationv1.FailurePolicyType) admissionregistrationv1.FailurePolicyType {
	t.Helper()
	vwcs, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, vwc := range vwcs.Items {
		for i, wh := range vwc.Webhooks {
			if len(wh.Rules) == 0 || len(wh.Rules[0].Resources) == 0 || wh.Rules[0].Resources[0] != "pods/eviction" {
				continue
			}
			was := *wh.FailurePolicy
			vwc.Webhooks[i].FailurePolicy = &p
			if _, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, &vwc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			return was
		}
	}
	t.Fatal("no evictions entry in any ValidatingWebhookConfiguration")
	return ""
}

// Job budgets on the real API server: a busy runner's pod gets exactly one budget and an
// idle one's none; with runner-guard stopped and evictions Ignore, the API
// server itself refuses evicting the busy runner and lets the idle one go;
// the budget goes with the job; another budget on a pod is left alone.
func TestJobBudgetsHoldBusyRunnersWithRunnerGuardDown(t *testing.T) {
	s, scope, url := newOrgScaleSet(t, "budgets")
	busy := s.runner("jb-busy", url, scope, true, nil)
	idle := s.runner("jb-idle", url, scope, false, nil)
	later := s.runner("jb-later", url, scope, true, nil)
	theirs := s.runner("jb-theirs", url, scope, true, nil)
	if _, stderr, err := s.kubectl("label", "pod", theirs.name, "team-budget=yes"); err != nil {
		t.Fatalf("kubectl label: %v: %s", err, stderr)
	}
	one := intstr.FromInt32(1)
	userPDB := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "team-budget", Namespace: s.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team-budget": "yes"}}}}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(s.ns).Create(s.ctx, userPDB, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uid := func(name string) string { return string(s.pod(name).UID) }

	s.setJob(busy.name, 301, "build")
	s.setJob(theirs.name, 302, "deploy")
	var budget policyv1.PodDisruptionBudget
	s.eventually("one job budget for the busy runner", 30*time.Second, func() error {
		b := s.jobBudgets(uid(busy.name))
		if len(b) != 1 {
			return fmt.Errorf("%d job budgets, want 1", len(b))
		}
		budget = b[0]
		return nil
	})
	if budget.Spec.MinAvailable == nil || budget.Spec.MinAvailable.IntValue() != 1 || budget.Spec.MinAvailable.Type != intstr.Int {
		t.Errorf("job budget minAvailable %v, want the integer 1 (no scale subresource needed)", budget.Spec.MinAvailable)
	}
	// The harness's kube-controller-manager runs no disruption controller
	// (other scenarios write budget statuses themselves): write what it
	// computes for one Ready pod and minAvailable 1.
	s.setBudgetStatus(&budget, policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1})
	if p := s.pod(busy.name); p.Labels[webhook.LabelJobBudget] != string(p.UID) {
		t.Errorf("busy pod labels %v, want %s=%s", p.Labels, webhook.LabelJobBudget, p.UID)
	}
	for _, r := range []scaleSetRunner{idle, later} {
		if b := s.jobBudgets(uid(r.name)); len(b) != 0 {
			t.Errorf("idle runner %s has %d job budgets, want 0", r.name, len(b))
		}
	}
	// Another budget selects the busy pod jb-theirs: none of runner-guard's,
	// an Event instead, and the user's budget untouched.
	s.waitForEvent(theirs.name, disruption.EventJobBudgetSkipped)
	if b := s.jobBudgets(uid(theirs.name)); len(b) != 0 {
		t.Errorf("a pod another budget selects has %d job budgets, want 0", len(b))
	}
	if got, err := env.Client.PolicyV1().PodDisruptionBudgets(s.ns).Get(s.ctx, "team-budget", metav1.GetOptions{}); err != nil || got.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("the user's budget: %v, %v", got, err)
	}

	// runner-guard down, evictions Ignore: the API server alone decides.
	was := evictionsFailurePolicy(s.ctx, t, admissionregistrationv1.Ignore)
	if err := env.StopWebhook(); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if stopped {
			if err := env.StartWebhook(ctx); err != nil {
				t.Errorf("start the webhook again: %v", err)
			}
		}
		evictionsFailurePolicy(ctx, t, was)
	})
	before := len(s.github())
	err := s.evict(busy.name, false)
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "disruption budget") {
		t.Errorf("evicting the busy runner with runner-guard down: %v; want the API server's 429 for its disruption budget", err)
	}
	if err := s.evict(idle.name, false); err != nil {
		t.Errorf("evicting the idle runner with runner-guard down: %v; want it evicted", err)
	}
	if reqs := s.github()[before:]; len(reqs) != 0 {
		t.Errorf("runner-guard down, yet GitHub was asked:%s", describe(reqs))
	}
	if p := s.pod(busy.name); p == nil || p.DeletionTimestamp != nil {
		t.Errorf("the busy runner's pod is going: %v", p)
	}

	// Back up: the budget follows the job.
	if err := env.StartWebhook(s.ctx); err != nil {
		t.Fatal(err)
	}
	stopped = false
	s.setJob(later.name, 303, "test")
	s.eventually("a job budget once the job starts", 30*time.Second, func() error {
		if n := len(s.jobBudgets(uid(later.name))); n != 1 {
			return fmt.Errorf("%d job budgets, want 1", n)
		}
		return nil
	})
	s.setPhase(busy.name, "Succeeded")
	s.eventually("the job budget gone with the job", 30*time.Second, func() error {
		if n := len(s.jobBudgets(uid(busy.name))); n != 0 {
			return fmt.Errorf("%d job budgets, want 0", n)
		}
		if p := s.pod(busy.name); p != nil && p.Labels[webhook.LabelJobBudget] != "" {
			return fmt.Errorf("pod still labelled %v", p.Labels)
		}
		return nil
	})
}
