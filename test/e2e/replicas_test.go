package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/webhook"
)

// Issue 37, item 1: replicas behind one address, as the chart installs
// them, and idle Ready runners under a budget evicted all at once, the
// reviews spread over both. The API server evicts as many pods as the
// budget allows, and runner-guard unregisters those runners only: the
// replicas share their reservations in the budget's Lease. Before, each
// replica let through what its own ledger allowed, and the pods the budget
// kept were left with no runner.
func TestReplicasShareABudget(t *testing.T) {
	requireLocalBudgets(t)
	// Three, one more than the suite runs, so the reservations are shared
	// by more than a pair.
	replicas := startReplicas(t, 3)
	tests := map[string]struct{ pods, allowed int }{
		"3 evictions, budget 1":  {pods: 3, allowed: 1},
		"20 evictions, budget 5": {pods: 20, allowed: 5},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// A namespace of its own per run (-count).
			s := newScenario(t, fmt.Sprintf("replicas-%d-%d-%d", tc.pods, tc.allowed, time.Now().UnixNano()%1e6))
			var names []string
			for i := range tc.pods {
				names = append(names, fmt.Sprintf("runner-%d", i))
				s.runnerPod(names[i], false, true)
			}
			s.budget("runners", policyv1.IfHealthyBudget, policyv1.PodDisruptionBudgetStatus{CurrentHealthy: int32(tc.pods),
				DesiredHealthy: int32(tc.pods - tc.allowed), ExpectedPods: int32(tc.pods), DisruptionsAllowed: int32(tc.allowed)})
			before := replicas.Served()
			evicted := s.evictAtOnce(names...)
			after := replicas.Served()
			for i := range after {
				if after[i] == before[i] {
					t.Errorf("replica %d decided none of the evictions (%v → %v): the test must spread them", i, before, after)
				}
			}
			if len(evicted) != tc.allowed {
				t.Errorf("the API server evicted %v, want %d pods", evicted, tc.allowed)
			}
			gone := map[string]bool{}
			for _, name := range evicted {
				gone[name] = true
			}
			for _, name := range names {
				if gone[name] {
					continue
				}
				s.requireAlive(name)
				if !s.registered(name) {
					t.Errorf("runner %s unregistered, but the budget kept its pod", name)
				}
			}
			if n := s.count("DELETE"); n != tc.allowed {
				t.Errorf("%d unregisters for %d evictions the budget allowed", n, tc.allowed)
			}
			lease, err := env.Client.CoordinationV1().Leases(s.ns).Get(s.ctx, webhook.ReservationLeaseName("runners"), metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the budget's Lease: %v", err)
			}
			var held struct {
				Reservations []struct{ Replica, Pod string } `json:"reservations"`
			}
			if err := json.Unmarshal([]byte(lease.Annotations[webhook.ReservationsAnnotation]), &held); err != nil {
				t.Fatalf("the budget's Lease holds %q: %v", lease.Annotations[webhook.ReservationsAnnotation], err)
			}
			if len(held.Reservations) != tc.allowed {
				t.Errorf("the Lease holds %d reservations, want %d: %+v", len(held.Reservations), tc.allowed, held.Reservations)
			}
		})
	}
}

// startReplicas runs n webhook replicas in place of the environment's own
// until t ends.
func startReplicas(t *testing.T, n int) *framework.Replicas {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	replicas, err := env.StartReplicas(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := replicas.Stop(ctx); err != nil {
			t.Errorf("start the environment's own replicas again: %v", err)
		}
	})
	return replicas
}
