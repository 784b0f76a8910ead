package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/runner-guard/runner-guard/test/process"
)

// evictAtOnce sends the evictions of pods all at once, as kubectl drain,
// Karpenter and the cluster autoscaler do, and returns the pods the API
// server evicted; every other answer must be a 429.
func (s *scenario) evictAtOnce(pods ...string) []string {
	s.t.Helper()
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for i, name := range pods {
		wg.Go(func() { errs[i] = s.evict(name, false) })
	}
	wg.Wait()
	var evicted []string
	for i, err := range errs {
		switch {
		case err == nil:
			evicted = append(evicted, pods[i])
		case !apierrors.IsTooManyRequests(err):
			s.t.Errorf("eviction of %s: %v, want it evicted or a 429", pods[i], err)
		}
	}
	return evicted
}

// Three idle, Ready runner pods under a budget that allows one disruption,
// evicted at once: the API server evicts one, and runner-guard unregisters
// that one only. The two pods the budget keeps keep their runners (and,
// for scale-set pods, their EphemeralRunners). Three replicas decide the
// evictions, one each, sharing the budget's reservations.
func TestConcurrentEvictionsUnderABudget(t *testing.T) {
	requireLocalBudgets(t)
	startReplicas(t, 3)
	status := policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 3, DesiredHealthy: 2, ExpectedPods: 3, DisruptionsAllowed: 1}
	names := []string{"runner-a", "runner-b", "runner-c"}

	t.Run("legacy", func(t *testing.T) {
		s := newScenario(t, "evict-budget")
		for _, name := range names {
			s.runnerPod(name, false, true)
		}
		s.budget("runners", policyv1.IfHealthyBudget, status)
		evicted := s.evictAtOnce(names...)
		if len(evicted) != 1 {
			t.Fatalf("the API server evicted %v, want one pod", evicted)
		}
		for _, name := range names {
			if name == evicted[0] {
				s.requireDeleting(name)
				continue
			}
			s.requireAlive(name)
			if !s.registered(name) {
				t.Errorf("runner %s unregistered, but the budget kept its pod", name)
			}
		}
		if n := s.count("DELETE"); n != 1 {
			t.Errorf("%d unregisters for one eviction the budget allowed, want 1", n)
		}
	})

	t.Run("scale set", func(t *testing.T) {
		s := newScaleSet(t, "evict-budget-set")
		url := "https://github.com/" + s.scope.Name
		runners := map[string]scaleSetRunner{}
		for _, name := range names {
			runners[name] = s.runner(name, url, s.scope, false, nil)
		}
		s.budgetSelecting("runners", map[string]string{"actions-ephemeral-runner": "True"}, policyv1.IfHealthyBudget, status)
		evicted := s.evictAtOnce(names...)
		if len(evicted) != 1 {
			t.Fatalf("the API server evicted %v, want one pod", evicted)
		}
		s.waitRetired(evicted[0])
		for _, name := range names {
			if name == evicted[0] {
				continue
			}
			s.requireAlive(name)
			if !runners[name].registered() {
				t.Errorf("runner %s unregistered, but the budget kept its pod", name)
			}
			if s.retired(name) {
				t.Errorf("EphemeralRunner %s retired, but the budget kept its pod", name)
			}
		}
		if n := s.count("DELETE"); n != 1 {
			t.Errorf("%d unregisters for one eviction the budget allowed, want 1", n)
		}
	})
}

// postReview posts an AdmissionReview straight to the webhook's port, as
// anything on the pod network could, with the API server's client
// certificate when the harness has one (the port is then as open as one
// without --client-ca-file).
func postReview(s *scenario, body []byte) (bool, error) {
	s.t.Helper()
	ca, err := env.WebhookCA()
	if err != nil {
		return false, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return false, fmt.Errorf("webhook CA: no certificate")
	}
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert, err := env.APIServerClientCertificate(); err == nil {
		cfg.Certificates = []tls.Certificate{cert}
	}
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer c.CloseIdleConnections()
	resp, err := process.Send(s.ctx, c, env.WebhookURL(), body)
	if err != nil {
		return false, err
	}
	return resp.Allowed, nil
}

// A forged eviction review (no API server behind it, nothing evicting the
// pod) names an idle scale-set runner's pod. It carries no UID, so
// runner-guard cannot tell it from a real one and unregisters the runner:
// the risk DESIGN's threat model names. Nothing else follows: the pod is
// never seen going, so its EphemeralRunner is not retired (ARC would then
// delete the pod in that team's namespace).
func TestForgedEvictionReviewLeavesTheEphemeralRunner(t *testing.T) {
	s := newScaleSet(t, "forged-eviction")
	r := s.runner("runner-forged", "https://github.com/"+s.scope.Name, s.scope, false, nil)
	body, err := process.EvictionReviewJSON(process.Review{Pod: s.pod(r.name)})
	if err != nil {
		t.Fatal(err)
	}
	allowed, err := postReview(s.scenario, body)
	if err != nil {
		t.Fatalf("post the forged review: %v", err)
	}
	if !allowed {
		t.Skip("the webhook refused the forged review; nothing to retire")
	}
	// The Retirer of the code before this change deleted the EphemeralRunner
	// within milliseconds; it now watches the pod, which stays.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s.retired(r.name) {
			t.Fatalf("EphemeralRunner %s retired after a forged eviction review, with its pod alive", r.name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.requireAlive(r.name)
}
