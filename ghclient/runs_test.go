package ghclient_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

func TestWorkflowRunAndJobs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	run := e.fake.AddRun("acme/app", "ci")
	for i := range 130 { // two pages
		if _, err := e.fake.AddJob(run, fmt.Sprintf("matrix-%d", i), fmt.Sprintf("runner-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.client.WorkflowRun(ctx, repo, run)
	if err != nil || got.Completed() || got.Attempt != 1 || got.Conclusion != "" {
		t.Fatalf("run in progress: %+v, %v", got, err)
	}
	if r, _ := e.fake.Run(run); got.Path != ".github/workflows/ci.yml" || !got.Started.Equal(r.RunStartedAt) {
		t.Errorf("run %+v: want path .github/workflows/ci.yml and start %s", got, r.RunStartedAt)
	}
	_ = e.fake.CompleteRun(run, ghfake.ConclusionFailure)
	if got, _ = e.client.WorkflowRun(ctx, repo, run); !got.Completed() || got.Conclusion != "failure" {
		t.Fatalf("completed run: %+v", got)
	}
	jobs, err := e.client.AttemptJobs(ctx, repo, run, 1)
	if err != nil || len(jobs) != 130 {
		t.Fatalf("jobs: %d, %v", len(jobs), err)
	}
	if j := jobs[129]; j.RunnerName != "runner-129" || j.Conclusion != "failure" || j.Attempt != 1 || j.ID == 0 {
		t.Errorf("last job: %+v", j)
	}
	if n := e.fake.CountMatching(ghfake.RequestMatch{Op: ghfake.OpListJobs}); n != 2 {
		t.Errorf("%d job list requests, want 2 pages", n)
	}

	if _, err := e.client.WorkflowRun(ctx, repo, run+9999); !errors.Is(err, ghclient.ErrNotFound) {
		t.Errorf("unknown run: %v, want ErrNotFound", err)
	}
	if _, err := e.client.WorkflowRun(ctx, org, run); err == nil {
		t.Error("a run of an organization scope: no error")
	}
}

func TestRerunJobAnswers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	run := e.fake.AddRun("acme/app", "ci")
	job, _ := e.fake.AddJob(run, "build", "r1")

	if err := e.client.RerunJob(ctx, repo, job); !errors.Is(err, ghclient.ErrRerunRefused) {
		t.Fatalf("re-run before the run completed: %v, want ErrRerunRefused", err)
	}
	_ = e.fake.CompleteRun(run, ghfake.ConclusionFailure)
	if err := e.client.RerunJob(ctx, repo, job+9999); !errors.Is(err, ghclient.ErrNotFound) {
		t.Fatalf("unknown job: %v, want ErrNotFound", err)
	}
	if err := e.client.RerunJob(ctx, repo, job); err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if r, _ := e.fake.Run(run); r.RunAttempt != 2 {
		t.Errorf("attempt %d after the re-run, want 2", r.RunAttempt)
	}
	// A secondary limit is a rate limit, not a refusal.
	e.fake.InjectFault(ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, RetryAfterSeconds: 30, Times: 1})
	var rl *ghclient.RateLimited
	if err := e.client.RerunFailedJobs(ctx, repo, run); !errors.As(err, &rl) || errors.Is(err, ghclient.ErrRerunRefused) {
		t.Errorf("limited re-run: %v, want *RateLimited", err)
	}
}

// The re-run path never waits for budget: at recheck priority a spent
// budget answers at once, without a request.
func TestRunsCallsAreRechecks(t *testing.T) {
	budgets, err := ghclient.NewBudgets(ghclient.BudgetConfig{PointsPerMinute: 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *ghclient.Config) { c.Budgets = budgets })
	run := e.fake.AddRun("acme/app", "ci")
	ctx := context.Background()
	var spent *ghclient.Spent
	for i := range 10 {
		_, err = e.client.WorkflowRun(ctx, repo, run)
		if errors.As(err, &spent) {
			if spent.Priority != ghclient.PriorityRecheck {
				t.Errorf("spent at %s priority", spent.Priority)
			}
			if n := e.fake.CountMatching(ghfake.RequestMatch{Op: ghfake.OpGetRun}); n != i || n > 5 {
				t.Errorf("%d requests sent before the budget said no, want %d and at most half of 10 points", n, i)
			}
			return
		}
	}
	t.Fatal("10 GETs fit a budget of 10 points at recheck priority (half of it)")
}

func TestCheckRerunRight(t *testing.T) {
	ctx := context.Background()
	t.Run("app installation", func(t *testing.T) {
		for level, want := range map[string]ghclient.RerunRight{"write": ghclient.RerunRightGranted, "read": ghclient.RerunRightMissing} {
			f := ghfake.New()
			f.AddApp(42, &testKey.PublicKey)
			inst := f.AddInstallation(42, "acme")
			f.SetInstallationPermissions(inst, map[string]string{"actions": level})
			c := appClient(t, f, inst)
			got, why, err := c.CheckRerunRight(ctx)
			if err != nil || got != want {
				t.Errorf("actions %s: %v %q %v, want %v", level, got, why, err, want)
			}
			if want == ghclient.RerunRightMissing && why == "" {
				t.Error("a missing right without a reason")
			}
		}
	})
	t.Run("classic token", func(t *testing.T) {
		for scopes, want := range map[string]ghclient.RerunRight{"repo": ghclient.RerunRightGranted, "admin:org": ghclient.RerunRightMissing} {
			e := newEnv(t)
			e.fake.SetTokenRights(ghfake.TokenRights{Scopes: []string{scopes}})
			if got, _, err := e.client.CheckRerunRight(ctx); got != want || err != nil {
				t.Errorf("scopes %s: %v %v, want %v", scopes, got, err, want)
			}
			if n := e.fake.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRateLimit}); n != 1 {
				t.Errorf("%d GETs of /rate_limit, want 1", n)
			}
		}
	})
	t.Run("fine-grained token", func(t *testing.T) {
		e := newEnv(t)
		run := e.fake.AddRun("acme/app", "ci")
		_, _ = e.client.WorkflowRun(ctx, repo, run)
		if got, _, _ := e.client.CheckRerunRight(ctx); got != ghclient.RerunRightUnknown {
			t.Errorf("%v, want unknown: nothing tells a fine-grained token's rights", got)
		}
	})
}

// appClient is a client of the App 42's installation inst on f.
func appClient(t *testing.T, f *ghfake.Fake, inst int64) *ghclient.Client {
	t.Helper()
	e := newEnvWith(t, f, func(c *ghclient.Config) {
		c.Token = ""
		c.App = &ghclient.AppCredentials{AppID: 42, InstallationID: inst, PrivateKeyPEM: testKeyPEM}
	})
	return e.client
}
