package disruption

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

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
	r := NewRetirer(runners, m, logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	key := types.NamespacedName{Namespace: "ci", Name: "r-1"}
	r.Add(arc.Runner{Kind: arc.Kind, EphemeralRunner: key, UID: "uid-1"})
	r.Add(arc.Runner{Kind: arc.LegacyKind, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "legacy"}})
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
