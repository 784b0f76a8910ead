package webhook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
)

// scriptedGitHub answers every unregister with outcome and err, and every
// look-up idle (or, slow, only when its context ends), counting the calls.
type scriptedGitHub struct {
	noListing
	outcome               ghclient.Outcome
	err                   error
	slow                  bool
	unregisters, statuses int
}

func (g *scriptedGitHub) Unregister(context.Context, ghclient.Runner) (ghclient.Outcome, error) {
	g.unregisters++
	return g.outcome, g.err
}

func (g *scriptedGitHub) Status(ctx context.Context, _ ghclient.Runner) (ghclient.RunnerStatus, error) {
	g.statuses++
	if g.slow {
		<-ctx.Done()
		return ghclient.RunnerStatus{}, fmt.Errorf("list runners: %w", ctx.Err())
	}
	return ghclient.RunnerStatus{State: ghclient.StateIdle}, nil
}

// settleHarness decides DELETEs of one legacy runner pod against gh.
func settleHarness(t *testing.T, gh GitHub, cfg Config) (*decider, *fakeclock.Clock, func(dryRun bool) Decision) {
	t.Helper()
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	clock := fakeclock.New(time.Now())
	d := newDecider(cfg, gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), clock.Now)
	return d, clock, func(dryRun bool) Decision {
		dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "runner-1", Pod: pod.DeepCopy(), DryRun: dryRun})
		return dec
	}
}

// settle records a look-up only when GitHub answered it in time: one cut
// off by the GitHub timeout says nothing of the runner.
func TestRecordLookUpAnsweredInTime(t *testing.T) {
	for name, slow := range map[string]bool{"answered": false, "cut off": true} {
		t.Run(name, func(t *testing.T) {
			gh := &scriptedGitHub{slow: slow}
			cfg := DefaultConfig()
			cfg.GitHubTimeout.Duration = 10 * time.Millisecond
			_, _, dryRun := settleHarness(t, gh, cfg)
			dryRun(true)
			dryRun(true)
			want := 1
			if slow {
				want = 2
			}
			if gh.statuses != want {
				t.Errorf("%d look-ups for two dry runs, want %d", gh.statuses, want)
			}
		})
	}
}

// An unregister GitHub failed backs the pod's next decision off; one the
// budget held (nothing was sent) does not.
func TestRecordFailureOnlyWhenSent(t *testing.T) {
	spent := fmt.Errorf("remove runner: %w", &ghclient.Spent{Credential: "token:x", RetryAfter: 12 * time.Second})
	for name, tc := range map[string]struct {
		err  error
		want int
	}{
		"GitHub failed": {err: errors.New("502 bad gateway"), want: 1},
		"budget held":   {err: spent, want: 2},
	} {
		t.Run(name, func(t *testing.T) {
			gh := &scriptedGitHub{err: tc.err}
			_, _, del := settleHarness(t, gh, DefaultConfig())
			del(false)
			second := del(false)
			if gh.unregisters != tc.want {
				t.Errorf("%d unregisters for two deletes, want %d: %s", gh.unregisters, tc.want, second.Message)
			}
		})
	}
}

// A "busy" is trusted for longer while it lasts, and the refusal names the
// wait settle records (capped by the listing's renewal); a runner GitHub
// removed lets the deletion's repeat go unasked.
func TestRecordBusyAndRemoved(t *testing.T) {
	gh := &scriptedGitHub{outcome: ghclient.Busy}
	d, clock, del := settleHarness(t, gh, DefaultConfig())
	key := targetKey(Target{Scope: fixture.Org("acme"), Name: "runner-1"})
	for i, want := range []struct {
		says    string
		trusted time.Duration
	}{{"10s", DefaultBusyRetryAfter}, {"15s", 2 * DefaultBusyRetryAfter}} {
		dec := del(false)
		if dec.Reason != ReasonRunnerBusy || !strings.Contains(dec.Message, "asks GitHub again in "+want.says) {
			t.Fatalf("busy %d: %s: %s; want runner-busy, retry in %s", i+1, dec.Reason, dec.Message, want.says)
		}
		if m := d.busy.recall(key); !m.Known || m.Wait != want.trusted {
			t.Fatalf("busy %d: remembered %+v, trusted for %s", i+1, m, want.trusted)
		}
		clock.Advance(want.trusted)
	}
	gh.outcome = ghclient.Removed
	if dec := del(false); dec.Reason != ReasonUnregistered {
		t.Fatalf("after the job: %s: %s", dec.Reason, dec.Message)
	}
	if dec := del(false); dec.Reason != ReasonRecentlyAdmitted || gh.unregisters != 3 {
		t.Errorf("repeat: %s after %d unregisters, want recently-admitted after 3", dec.Reason, gh.unregisters)
	}
	if m := d.busy.recall(key); m.Known {
		t.Errorf("a removed runner still remembered busy: %+v", m)
	}
}
