package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Never the reason a cluster is stuck: runner-guard refuses an eviction for a
// PodDisruptionBudget only when the API server would refuse it too, so a
// drain never retries a 429 the API server itself would not send.

// An idle runner pod that is not Ready, under a budget (minAvailable 1) with
// unhealthyPodEvictionPolicy AlwaysAllow that allows no disruption: the API
// server evicts it, so runner-guard admits it (the runner is unregistered)
// instead of refusing it with disruption-budget until the drain times out.
func TestStuckUnreadyRunnerUnderAlwaysAllowIsEvicted(t *testing.T) {
	requireLocalBudgets(t)
	s := newScenario(t, "stuck-unready")
	s.runnerPod("runner-unready", false, true)
	s.setReady("runner-unready", false)
	s.budget("runners", policyv1.AlwaysAllow, policyv1.PodDisruptionBudgetStatus{
		CurrentHealthy: 0, DesiredHealthy: 1, ExpectedPods: 1, DisruptionsAllowed: 0})

	// The API server's own answer first: a dry run (runner-guard looks the
	// runner up and lets it pass) is let go by the eviction subresource.
	if err := s.evict("runner-unready", true); err != nil {
		t.Fatalf("dry-run eviction: %v, want the API server to allow it", err)
	}
	s.requireAlive("runner-unready")

	attempts, err := s.evictPastPodWrites("runner-unready")
	if err != nil {
		t.Fatalf("eviction of an idle unready runner pod under AlwaysAllow: %v, want it admitted", err)
	}
	s.requireDeleting("runner-unready")
	if s.registered("runner-unready") {
		t.Error("runner still registered after its pod was evicted")
	}
	// One unregister; an eviction sent again may reach the other replica,
	// which asks GitHub once more and hears the runner is gone.
	removed, asked := 0, 0
	for _, r := range s.github() {
		if r.Method == http.MethodDelete {
			asked++
			if r.Status == http.StatusNoContent {
				removed++
			}
		}
	}
	if removed != 1 || asked > attempts {
		t.Errorf("%d unregisters in %d DELETEs for %d evictions, want 1 in at most %d", removed, asked, attempts, attempts)
	}
	s.waitForEvent("runner-unready", "RunnerUnregistered")
}

// A Ready idle runner pod under a budget that allows no disruption: the API
// server refuses the eviction (its dry run shows it), and runner-guard refuses
// it first with disruption-budget, a 429, without unregistering the runner.
func TestStuckBudgetAllowingNoneRefusesWithoutUnregistering(t *testing.T) {
	requireLocalBudgets(t)
	s := newScenario(t, "stuck-budget")
	s.runnerPod("runner-budget", false, true)
	s.budget("runners", policyv1.IfHealthyBudget, policyv1.PodDisruptionBudgetStatus{
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1, DisruptionsAllowed: 0})

	err := s.evict("runner-budget", true)
	if !apierrors.IsTooManyRequests(err) || strings.Contains(err.Error(), "[reason:") {
		t.Fatalf("dry-run eviction: %v, want the API server's own 429 for the budget", err)
	}
	err = s.evict("runner-budget", false)
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "[reason: disruption-budget]") {
		t.Fatalf("eviction under a budget allowing none: %v, want runner-guard's 429 disruption-budget", err)
	}
	s.requireAlive("runner-budget")
	if !s.registered("runner-budget") {
		t.Error("runner unregistered for an eviction the API server refuses")
	}
	if n := s.count("DELETE"); n != 0 {
		t.Errorf("%d unregisters, want none", n)
	}
}

// Busy runner pods evicted the moment they exist are refused as busy: an
// eviction always reads the live pod, never a cache that may not have seen it
// yet (the unit test TestEvictionReadsEveryPodLive covers each case).
func TestStuckFreshRunnerPodsAreGuarded(t *testing.T) {
	s := newScenario(t, "stuck-fresh")
	for i := range 5 {
		name := fmt.Sprint("runner-fresh-", i)
		s.runnerPod(name, true, true)
		err := s.evict(name, false)
		if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "runner busy") {
			t.Fatalf("eviction of %s right after its creation: %v, want a 429 runner busy", name, err)
		}
		s.requireAlive(name)
		if !s.registered(name) {
			t.Errorf("busy runner %s unregistered", name)
		}
	}
}

// evict asks once for the pod's eviction (client-go would retry a 429 by
// itself), in the Eviction's deleteOptions a dry run when dryRun.
func (s *scenario) evict(name string, dryRun bool) error {
	s.t.Helper()
	ev := &policyv1.Eviction{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}}
	if dryRun {
		ev.DeleteOptions = &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	}
	return env.Client.CoreV1().RESTClient().Post().Namespace(s.ns).Resource("pods").Name(name).
		SubResource("eviction").Body(ev).MaxRetries(0).Do(s.ctx).Error()
}

// evictPastPodWrites evicts name, again (a few times) after the API server's
// 429 "still being processed": it deletes an unready pod under the
// resourceVersion it read, so a write to the pod meanwhile (runner-guard's
// hints patch a pod whose status just changed) fails the deletion, and an
// evictor retries. runner-guard's own refusals are not retried.
func (s *scenario) evictPastPodWrites(name string) (attempts int, err error) {
	s.t.Helper()
	for attempt := 1; ; attempt++ {
		err := s.evict(name, false)
		if err == nil || attempt == 5 || !podWrittenMeanwhile(err) {
			return attempt, err
		}
		s.t.Logf("eviction %d of %s: %v (the pod was written meanwhile); again", attempt, name, err)
	}
}

// podWrittenMeanwhile reports the API server's 429 for an eviction whose
// pod changed between its read and its deletion.
func podWrittenMeanwhile(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsTooManyRequests(err) || strings.Contains(err.Error(), "admission webhook") {
		return false
	}
	details := status.Status().Details
	if details == nil {
		return false
	}
	for _, c := range details.Causes {
		if strings.Contains(c.Message, "is still being processed") {
			return true
		}
	}
	return false
}

// setReady reports the pod's Ready condition, as a kubelet whose readiness
// probe fails (or passes) would.
func (s *scenario) setReady(name string, ready bool) {
	s.t.Helper()
	pod := s.pod(name)
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			pod.Status.Conditions[i].Status = status
			pod.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	if _, err := env.Client.CoreV1().Pods(s.ns).UpdateStatus(s.ctx, pod, metav1.UpdateOptions{}); err != nil {
		s.t.Fatalf("set pod %s Ready %v: %v", name, ready, err)
	}
}

// requireLocalBudgets skips on an external cluster: the test writes budget
// statuses and pod readiness itself, which a real cluster's disruption
// controller and kubelet own and overwrite.
func requireLocalBudgets(t *testing.T) {
	t.Helper()
	if !env.Local() {
		t.Skip("budget scenarios play the disruption controller and the kubelet: they need the local harness")
	}
}

// budget creates a PodDisruptionBudget (minAvailable 1) selecting the
// scenario's runner pods with the unhealthy pod eviction policy and, played
// for the disruption controller the harness does not run, the status given
// (observedGeneration is set to the budget's generation).
func (s *scenario) budget(name string, policy policyv1.UnhealthyPodEvictionPolicyType, status policyv1.PodDisruptionBudgetStatus) {
	s.t.Helper()
	s.budgetSelecting(name, map[string]string{"runner-deployment-name": "e2e"}, policy, status)
}

// budgetSelecting is budget for the pods matching labels.
func (s *scenario) budgetSelecting(name string, labels map[string]string, policy policyv1.UnhealthyPodEvictionPolicyType, status policyv1.PodDisruptionBudgetStatus) {
	s.t.Helper()
	minAvailable := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable:               &minAvailable,
			Selector:                   &metav1.LabelSelector{MatchLabels: labels},
			UnhealthyPodEvictionPolicy: &policy,
		},
	}
	created, err := env.Client.PolicyV1().PodDisruptionBudgets(s.ns).Create(s.ctx, pdb, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatalf("create PodDisruptionBudget %s: %v", name, err)
	}
	s.setBudgetStatus(created, status)
}

// setBudgetStatus plays the disruption controller: pdb's status becomes
// status, observed at its generation.
func (s *scenario) setBudgetStatus(pdb *policyv1.PodDisruptionBudget, status policyv1.PodDisruptionBudgetStatus) {
	s.t.Helper()
	pdb.Status = status
	pdb.Status.ObservedGeneration = pdb.Generation
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(s.ns).UpdateStatus(s.ctx, pdb, metav1.UpdateOptions{}); err != nil {
		s.t.Fatalf("set the status of PodDisruptionBudget %s: %v", pdb.Name, err)
	}
}
