package disruption

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// flakyRetirer fails the first failures deletes, then succeeds.
type flakyRetirer struct {
	mu       sync.Mutex
	failures int
	got      []arc.Runner
}

func (f *flakyRetirer) Retire(_ context.Context, run *arc.Runner) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, *run)
	if f.failures > 0 {
		f.failures--
		return errors.New("the API server is away")
	}
	return nil
}

func (f *flakyRetirer) calls() []arc.Runner {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]arc.Runner(nil), f.got...)
}

func TestRetirerRetriesAndCounts(t *testing.T) {
	runners := &flakyRetirer{failures: 1}
	m := webhook.NewMetrics()
	r := NewRetirer(runners, nil, m, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	key := types.NamespacedName{Namespace: "ci", Name: "r-1"}
	r.Add(arc.Runner{Kind: arc.Kind, EphemeralRunner: key, UID: "uid-1"}, "pod-uid-1")
	r.Add(arc.Runner{Kind: arc.LegacyKind, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "legacy"}}, "pod-uid-2")
	deadline := time.Now().Add(10 * time.Second)
	for len(runners.calls()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	calls := runners.calls()
	if len(calls) != 2 {
		t.Fatalf("Retire called %d times, want 2 (a failure, then the retry)", len(calls))
	}
	for _, c := range calls {
		if c.EphemeralRunner != key || c.UID != "uid-1" || c.Kind != arc.Kind {
			t.Errorf("retired %+v, want EphemeralRunner %s with its UID (never the legacy Runner)", c, key)
		}
	}
	if ok, bad := testutil.ToFloat64(m.Retired.WithLabelValues("ok")), testutil.ToFloat64(m.Retired.WithLabelValues("error")); ok != 1 || bad != 1 {
		t.Errorf("retired_total ok=%v error=%v, want 1 and 1", ok, bad)
	}
	if r.NeedLeaderElection() {
		t.Error("the Retirer must run on every replica")
	}
}

// An EphemeralRunner is retired only once the decision's pod is seen going:
// terminating, gone, or replaced by a pod of another UID. A pod that stays
// (its eviction refused after the unregister, or a forged review) keeps it.
func TestRetirerWaitsForThePod(t *testing.T) {
	now := metav1.Now()
	pod := func(uid types.UID, terminating bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "r-1", UID: uid}}
		if terminating {
			p.DeletionTimestamp, p.Finalizers = &now, []string{"example.com/hold"}
		}
		return p
	}
	tests := map[string]struct {
		pod        *corev1.Pod
		wantRetire bool
	}{
		"pod gone":               {nil, true},
		"pod terminating":        {pod("pod-uid", true), true},
		"another pod, same name": {pod("newer-uid", false), true},
		"pod stays":              {pod("pod-uid", false), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder()
			if tc.pod != nil {
				b = b.WithObjects(tc.pod)
			}
			runners := &flakyRetirer{}
			r := NewRetirer(runners, b.Build(), nil, logr.Discard())
			r.look, r.watch = 5*time.Millisecond, 100*time.Millisecond
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Start(ctx) }()
			r.Add(arc.Runner{Kind: arc.Kind, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "r-1"}, UID: "er-uid"}, "pod-uid")
			// Done when it retired, or when it forgot the item after the watch.
			deadline := time.Now().Add(5 * time.Second)
			for len(runners.calls()) == 0 && r.Len() > 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := len(runners.calls()) == 1; got != tc.wantRetire {
				t.Errorf("retired %v, want %v", got, tc.wantRetire)
			}
		})
	}
}
