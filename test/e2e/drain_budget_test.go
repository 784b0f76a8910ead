package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
)

// denyEvictions registers a second validating webhook that refuses every
// eviction in the scenario's namespace (another team's policy) while
// refusing is true, and removes it when the test ends.
func (s *scaleSet) denyEvictions(refusing *atomic.Bool) {
	s.t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		if refusing.Load() {
			resp.Allowed = false
			resp.Result = &metav1.Status{Code: http.StatusForbidden, Message: "evictions are frozen here by deny.example.com"}
		}
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(review)
	})
	srv, err := framework.StartTLSServer(h)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = srv.Close() })
	name := "e2e-deny-evictions-" + s.ns
	none := admissionregistrationv1.SideEffectClassNone
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "deny.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(srv.URL), CABundle: srv.CAPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": s.ns}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}
	if _, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(s.ctx, vwc, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

// kubectl cordon of a node with three idle runners under a budget that
// allows one disruption, in a namespace where another webhook refuses
// evictions: the drain unregisters one runner, keeps its pod (never
// deleting it past that policy) and says why on the pod; the other two stay
// registered. Once the policy lets evictions through, the released pod is
// evicted and the budget, now spent, keeps the other two registered.
func TestDrainUnderABudgetWithAWebhookDenyingEvictions(t *testing.T) {
	requireLocalBudgets(t)
	s := newScaleSetOnNode(t, "drain-deny")
	url := "https://github.com/" + s.scope.Name
	runners := []scaleSetRunner{s.runner("idle-1", url, s.scope, false, nil), s.runner("idle-2", url, s.scope, false, nil), s.runner("idle-3", url, s.scope, false, nil)}
	s.budgetSelecting("runners", map[string]string{"actions-ephemeral-runner": "True"}, policyv1.IfHealthyBudget,
		policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 3, DesiredHealthy: 2, ExpectedPods: 3, DisruptionsAllowed: 1})
	var refusing atomic.Bool
	refusing.Store(true)
	s.denyEvictions(&refusing)

	if _, stderr, err := env.Kubectl(s.ctx, "cordon", s.node); err != nil {
		t.Fatalf("kubectl cordon: %v: %s", err, stderr)
	}
	var released scaleSetRunner
	s.eventually("one runner released and its refused eviction said on its pod", 30*time.Second, func() error {
		for _, r := range runners {
			if !r.registered() {
				released = r
			}
		}
		if released.name == "" {
			return fmt.Errorf("no runner unregistered yet")
		}
		if evs := s.drainEvents(released.name); !strings.Contains(evs, disruption.EventEvictionRefused) || !strings.Contains(evs, "deny.example.com") {
			return fmt.Errorf("pod %s events lack the refused eviction:\n%s", released.name, evs)
		}
		return nil
	})
	for _, r := range runners {
		s.requireAlive(r.name)
		if r.name != released.name && !r.registered() {
			t.Errorf("runner %s unregistered while evictions are refused in its namespace", r.name)
		}
	}

	refusing.Store(false)
	s.eventually("the released runner's pod evicted once the policy allows it", 60*time.Second, func() error {
		return s.deletionAdmitted(released.name)
	})
	s.requireDeleting(released.name)
	for _, r := range runners {
		if r.name != released.name && !r.registered() {
			t.Errorf("runner %s unregistered, but the budget, spent, keeps its pod", r.name)
		}
	}
}
