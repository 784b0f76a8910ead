package process_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

const mib = 1 << 20

// TestLoad sends 1,000 concurrent admission requests (mixed runner and
// non-runner pods, fake GitHub answering after 20 ms) to the real binary:
// no transport error, every answer right, and the process's memory returns
// near its baseline afterwards.
func TestLoad(t *testing.T) {
	// The fake GitHub runs in this test process, which may be built with -race
	// and share 2 cores with other packages' tests: give GitHub the longest
	// deadlines runner-guard allows (the API server's at most 30 s) so the
	// fake's slowness is not a denial.
	// It is about load and memory, not GitHub's limits (see below): the
	// request budget is off too.
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("githubBudget: {unlimited: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := start(t, "--github-timeout=10s", "--webhook-timeout=30s", "--config="+cfg)
	scope := fixture.Org("load")
	bodies, want, err := process.LoadMix(e.github, e.proc.Files.API, scope, 1000)
	if err != nil {
		t.Fatal(err)
	}
	e.github.SetLatency(20 * time.Millisecond)
	// 1,000 decisions at once spend about 2,600 secondary points in seconds
	// (600 lists by name, 400 DELETEs at 5) with far more than 100 requests in
	// flight: well past GitHub's secondary limit. This test is about load and
	// memory, not GitHub's limits: the fake does not enforce them.
	e.github.SetSecondaryLimit(ghfake.SecondaryLimit{Off: true})

	base, _, err := e.proc.RSS()
	if err != nil {
		t.Fatal(err)
	}
	client := e.proc.Client // keep-alive pool of 64; the rest dial fresh connections
	var (
		wg       sync.WaitGroup
		failures atomic.Int64
		errMu    sync.Mutex
		errs     []string
	)
	gate := make(chan struct{})
	for i, b := range bodies {
		wg.Go(func() {
			<-gate
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			resp, err := process.Send(ctx, client, e.proc.WebhookURL, b)
			var msg string
			switch {
			case err != nil:
				msg = fmt.Sprintf("request %d: %v", i, err)
			case resp.Allowed != want[i]:
				msg = fmt.Sprintf("request %d: allowed=%v, want %v: %s", i, resp.Allowed, want[i], resp.Result.Message)
			default:
				return
			}
			failures.Add(1)
			errMu.Lock()
			if len(errs) < 10 {
				errs = append(errs, msg)
			}
			errMu.Unlock()
		})
	}
	began := time.Now()
	close(gate)
	wg.Wait()
	took := time.Since(began)
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed or were answered wrong; first: %q", n, len(bodies), errs)
	}
	rss, peak, err := e.proc.RSS()
	if err != nil {
		t.Fatal(err)
	}
	client.CloseIdleConnections()
	t.Logf("1,000 concurrent requests answered in %s; RSS baseline %.1f MiB, right after %.1f MiB, peak %.1f MiB",
		took.Round(time.Millisecond), float64(base)/mib, float64(rss)/mib, float64(peak)/mib)

	// Memory comes back near the baseline once the Go runtime has collected
	// the load's garbage and returned it to the OS. An idle process collects
	// only every 2 minutes, so the window carries a trickle of ordinary traffic
	// (a webhook in a cluster keeps getting reviews), which paces the GC.
	limit := base + 64*mib
	trickle, err := process.DeleteReviewJSON(process.Review{Pod: fixture.MakePod("apps", "trickle").Running().Obj()})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for rss > limit && time.Now().Before(deadline) {
		for range 100 {
			if _, err := process.Send(context.Background(), client, e.proc.WebhookURL, trickle); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond)
		if rss, _, err = e.proc.RSS(); err != nil {
			t.Fatal(err)
		}
	}
	client.CloseIdleConnections()
	t.Logf("RSS after the GC window: %.1f MiB (limit baseline+64 MiB = %.1f MiB)", float64(rss)/mib, float64(limit)/mib)
	if rss > limit {
		if testing.Verbose() {
			t.Logf("process output:\n%s", tail(e.proc.Log(), 6000))
		}
		t.Errorf("RSS %.1f MiB did not come back under baseline+64 MiB (%.1f MiB)", float64(rss)/mib, float64(limit)/mib)
	}
}
