package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// pointsPerRollingMinute is the most GitHub secondary-limit points (GET 1,
// other methods 5) any 60 s of reqs spent.
func pointsPerRollingMinute(reqs []ghfake.Request) int {
	cost := func(r ghfake.Request) int {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return 1
		}
		return 5
	}
	peak := 0
	for i := range reqs {
		sum := 0
		for j := i; j < len(reqs) && reqs[j].Time.Sub(reqs[i].Time) < time.Minute; j++ {
			sum += cost(reqs[j])
		}
		peak = max(peak, sum)
	}
	return peak
}

// A drain of 100 busy runners, every pod's eviction retried every 5 s for 2
// minutes as kubectl drain retries, against a fake GitHub that enforces its
// secondary limit: runner-guard's requests for the scope stay inside its
// budget (450 points in any rolling minute, half of GitHub's 900), GitHub
// never limits it, no busy pod goes, and an idle runner's eviction in the
// middle of the storm is admitted at its first attempt.
func TestDrainStormStaysInsideGitHubsLimits(t *testing.T) {
	if !env.Local() {
		// 100 evictions every 5 s need the local harness's client; the
		// external suite's is throttled client-side to 5 requests a second.
		t.Skip("the storm needs the local harness (an unthrottled client and the in-process fake's request log)")
	}
	s := newScenario(t, "storm")
	const busyRunners, rounds = 100, 24 // 24 rounds of 5 s: 2 minutes
	names := make([]string, busyRunners)
	for i := range names {
		names[i] = fmt.Sprintf("busy-%03d", i)
		s.runnerPod(names[i], true, true)
	}
	before := len(env.GitHub.Requests())
	ctx, cancel := context.WithTimeout(s.ctx, 4*time.Minute)
	defer cancel()

	var idleTook time.Duration
	for round := range rounds {
		next := time.Now().Add(5 * time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, len(names))
		sem := make(chan struct{}, 20)
		for _, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				err := s.evict(name, false)
				switch {
				case err == nil:
					errs <- fmt.Errorf("round %d: busy runner %s's eviction was admitted", round, name)
				case !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "runner busy"):
					errs <- fmt.Errorf("round %d: eviction of %s: %v; want 429 runner busy", round, name, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			t.FailNow()
		}
		if round == rounds/2 {
			s.runnerPod("idle-mid-storm", false, true)
			start := time.Now()
			if err := s.evict("idle-mid-storm", false); err != nil {
				t.Fatalf("the idle runner's eviction in the middle of the storm was refused: %v", err)
			}
			idleTook = time.Since(start)
			if s.registered("idle-mid-storm") {
				t.Fatal("the idle runner's pod was evicted but its runner is still registered")
			}
		}
		select {
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}

	reqs := requestsFor(env.GitHub.Requests()[before:], scopePath(s.scope))
	peak := pointsPerRollingMinute(reqs)
	limited := 0
	for _, r := range reqs {
		if r.Status == http.StatusForbidden || r.Status == http.StatusTooManyRequests {
			limited++
		}
	}
	t.Logf("%d busy runners, %d evictions each: %d GitHub requests for the scope (%d DELETEs), peak %d points in a rolling minute; the idle runner's eviction took %s",
		busyRunners, rounds, len(reqs), countMethod(reqs, http.MethodDelete), peak, idleTook)
	if peak > 450 {
		t.Errorf("%d points in a rolling minute, over the budget's 450", peak)
	}
	if limited > 0 {
		t.Errorf("GitHub refused %d requests with a rate limit", limited)
	}
	for _, u := range env.GitHub.SecondaryUsage() {
		if u.SentWhileLimited > 0 {
			t.Errorf("credential %s sent %d requests while GitHub limited it", u.Credential, u.SentWhileLimited)
		}
	}
	for _, name := range names {
		s.requireAlive(name)
	}
}

func countMethod(reqs []ghfake.Request, method string) int {
	n := 0
	for _, r := range reqs {
		if r.Method == method {
			n++
		}
	}
	return n
}

// A scale-set runner whose EphemeralRunner records a job (ARC's listener
// writes status.jobId and jobRequestId when the job starts) is refused with
// no GitHub request, and the refusal names the job. One whose fields are
// empty is decided by the DELETE, since empty fields prove nothing.
func TestScaleSetJobFieldsRefuseWithoutGitHub(t *testing.T) {
	s := newScaleSet(t, "ss-jobs")
	scope := s.scope
	url := "https://github.com/" + scope.Name
	withJob := s.runner("with-job", url, scope, true, func(w *fixture.EphemeralRunnerWrapper) {
		w.JobID("job-77").Field(int64(9001), "status", "jobRequestId").
			Field(scope.Name+"/app", "status", "jobRepositoryName").Field(int64(4242), "status", "workflowRunId").
			Field("build (ubuntu)", "status", "jobDisplayName")
	})
	noJob := s.runner("no-job", url, scope, true, nil)

	reqs, err := s.deletePod(withJob.name, scope)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "runner busy") || !strings.Contains(err.Error(), "runner-job-running") {
		t.Fatalf("delete of the pod whose EphemeralRunner records a job: %v; want Forbidden, runner busy, runner-job-running", err)
	}
	if !strings.Contains(err.Error(), scope.Name+"/app") {
		t.Errorf("the refusal does not name the job's repository: %v", err)
	}
	if len(reqs) != 0 {
		t.Errorf("GitHub was asked %d times: %s", len(reqs), describe(reqs))
	}
	if err := s.evict(withJob.name, false); !apierrors.IsTooManyRequests(err) {
		t.Errorf("eviction: %v; want 429", err)
	}
	s.requireAlive(withJob.name)

	reqs, err = s.deletePod(noJob.name, scope)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "[reason: runner-busy]") {
		t.Fatalf("delete of the pod with empty job fields: %v; want the DELETE's runner-busy", err)
	}
	requireOneRequest(t, "runner with empty job fields", reqs, "", noJob, 422)
	s.requireAlive(noJob.name)
}
