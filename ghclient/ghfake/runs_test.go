package ghfake_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

type jobsBody struct {
	TotalCount int                  `json:"total_count"`
	Jobs       []ghfake.WorkflowJob `json:"jobs"`
}

func decodeJSON[T any](t *testing.T, a answer) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(a.body), &v); err != nil {
		t.Fatalf("answer %d %q: %v", a.status, a.body, err)
	}
	return v
}

// lostJobRun is a run of acme/app with a build job on runner-a, a test job
// needing it on runner-b, and a lint job on runner-c.
func lostJobRun(t *testing.T, f *ghfake.Fake) (run, build, test, lint int64) {
	t.Helper()
	run = f.AddRun("acme/app", "ci")
	var err error
	if build, err = f.AddJob(run, "build", "runner-a"); err != nil {
		t.Fatal(err)
	}
	test, _ = f.AddJob(run, "test", "runner-b", "build")
	lint, _ = f.AddJob(run, "lint", "runner-c")
	return run, build, test, lint
}

func TestWorkflowRunAndJobs(t *testing.T) {
	f, srv := serve(t)
	run, build, _, _ := lostJobRun(t, f)
	base := fmt.Sprintf("%s/repos/acme/app/actions/runs/%d", srv.URL, run)

	a := do(t, http.MethodGet, base, nil)
	got := decodeJSON[map[string]any](t, a)
	if a.status != 200 || got["status"] != "in_progress" || got["conclusion"] != nil || got["run_attempt"] != float64(1) {
		t.Fatalf("run in progress: %d %s", a.status, a.body)
	}
	if err := f.FinishJob(build, ghfake.ConclusionFailure); err != nil {
		t.Fatal(err)
	}
	if err := f.CompleteRun(run, ghfake.ConclusionFailure); err != nil {
		t.Fatal(err)
	}
	got = decodeJSON[map[string]any](t, do(t, http.MethodGet, base, nil))
	if got["status"] != "completed" || got["conclusion"] != "failure" {
		t.Fatalf("completed run: %v", got)
	}
	jobs := decodeJSON[jobsBody](t, do(t, http.MethodGet, base+"/jobs", nil))
	if jobs.TotalCount != 3 || len(jobs.Jobs) != 3 {
		t.Fatalf("jobs: %+v", jobs)
	}
	j := jobs.Jobs[0]
	if j.ID != build || j.RunID != run || j.RunAttempt != 1 || j.Status != "completed" || *j.Conclusion != "failure" || *j.RunnerName != "runner-a" {
		t.Errorf("build job: %+v", j)
	}
	// Jobs still running when the run completed end with the run's conclusion.
	if c := *jobs.Jobs[1].Conclusion; c != "failure" {
		t.Errorf("test job's conclusion %q, want failure", c)
	}

	tests := map[string]struct {
		path string
		want int
	}{
		"unknown run":              {path: fmt.Sprintf("/repos/acme/app/actions/runs/%d", run+1000), want: 404},
		"run of another repo":      {path: fmt.Sprintf("/repos/acme/other/actions/runs/%d", run), want: 404},
		"attempt 1's jobs":         {path: fmt.Sprintf("/repos/acme/app/actions/runs/%d/attempts/1/jobs", run), want: 200},
		"attempt not there yet":    {path: fmt.Sprintf("/repos/acme/app/actions/runs/%d/attempts/2/jobs", run), want: 404},
		"bad filter":               {path: fmt.Sprintf("/repos/acme/app/actions/runs/%d/jobs?filter=some", run), want: 422},
		"rerun is POST, not GET":   {path: fmt.Sprintf("/repos/acme/app/actions/jobs/%d/rerun", build), want: 404},
		"attempt that is not a no": {path: fmt.Sprintf("/repos/acme/app/actions/runs/%d/attempts/x/jobs", run), want: 404},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if a := do(t, http.MethodGet, srv.URL+tc.path, nil); a.status != tc.want {
				t.Errorf("status %d, want %d: %s", a.status, tc.want, a.body)
			}
		})
	}
}

func TestRerunJob(t *testing.T) {
	f, srv := serve(t)
	run, build, _, _ := lostJobRun(t, f)
	rerun := func(job int64) answer {
		return do(t, http.MethodPost, fmt.Sprintf("%s/repos/acme/app/actions/jobs/%d/rerun", srv.URL, job), nil)
	}

	if a := rerun(build); a.status != 403 {
		t.Fatalf("re-run while the run is in progress: %d %s, want 403", a.status, a.body)
	}
	if a := rerun(build + 1000); a.status != 404 {
		t.Fatalf("unknown job: %d, want 404", a.status)
	}
	_ = f.FinishJob(build, ghfake.ConclusionFailure)
	_ = f.CompleteRun(run, ghfake.ConclusionFailure)
	if a := do(t, http.MethodPost, fmt.Sprintf("%s/repos/acme/other/actions/jobs/%d/rerun", srv.URL, build), nil); a.status != 404 {
		t.Fatalf("job of another repository: %d, want 404", a.status)
	}
	if a := rerun(build); a.status != 201 {
		t.Fatalf("re-run: %d %s, want 201", a.status, a.body)
	}

	r, _ := f.Run(run)
	if r.RunAttempt != 2 || r.Status != "queued" || r.Conclusion != nil {
		t.Fatalf("run after re-run: %+v", r)
	}
	byName := map[string]ghfake.WorkflowJob{}
	for _, j := range f.Jobs(run, 2) {
		byName[j.Name] = j
	}
	// The job and its dependent run again; the other keeps its result.
	for name, queued := range map[string]bool{"build": true, "test": true, "lint": false} {
		j := byName[name]
		if got := j.Status == "queued" && j.RunnerName == nil; got != queued {
			t.Errorf("%s in attempt 2: %+v, want queued %v", name, j, queued)
		}
	}
	if a := rerun(build); a.status != 403 {
		t.Errorf("re-run of attempt 1's job while attempt 2 runs: %d, want 403", a.status)
	}
	if n := f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunJob, Status: 201}); n != 1 {
		t.Errorf("logged %d successful re-runs, want 1", n)
	}
}

func TestRerunFailedJobs(t *testing.T) {
	f, srv := serve(t)
	run, build, _, lint := lostJobRun(t, f)
	_ = f.FinishJob(build, ghfake.ConclusionSuccess)
	_ = f.FinishJob(lint, ghfake.ConclusionFailure)
	_ = f.CompleteRun(run, ghfake.ConclusionFailure) // test fails with it
	if a := do(t, http.MethodPost, fmt.Sprintf("%s/repos/acme/app/actions/runs/%d/rerun-failed-jobs", srv.URL, run), nil); a.status != 201 {
		t.Fatalf("rerun-failed-jobs: %d %s", a.status, a.body)
	}
	for _, j := range f.Jobs(run, 2) {
		if again := j.Status == "queued"; again != (j.Name != "build") {
			t.Errorf("%s in attempt 2: %s", j.Name, j.Status)
		}
	}
}

func TestRerunNeedsActionsWrite(t *testing.T) {
	tests := map[string]struct {
		rights     ghfake.TokenRights
		want       int
		wantScopes string
	}{
		"fine-grained, actions write": {want: 201},
		"fine-grained, actions read":  {rights: ghfake.TokenRights{NoActionsWrite: true}, want: 403},
		"classic with repo":           {rights: ghfake.TokenRights{Scopes: []string{"repo", "admin:org"}}, want: 201, wantScopes: "repo, admin:org"},
		"classic without repo":        {rights: ghfake.TokenRights{Scopes: []string{"admin:org"}}, want: 403, wantScopes: "admin:org"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := serve(t)
			f.SetToken("tok")
			f.SetTokenRights(tc.rights)
			run, build, _, _ := lostJobRun(t, f)
			_ = f.CompleteRun(run, ghfake.ConclusionFailure)
			a := do(t, http.MethodPost, fmt.Sprintf("%s/repos/acme/app/actions/jobs/%d/rerun", srv.URL, build), bearer("tok"))
			if a.status != tc.want {
				t.Errorf("status %d, want %d: %s", a.status, tc.want, a.body)
			}
			if got := a.header.Get("X-OAuth-Scopes"); got != tc.wantScopes {
				t.Errorf("X-OAuth-Scopes %q, want %q", got, tc.wantScopes)
			}
		})
	}
}

func TestInstallationPermissions(t *testing.T) {
	f, srv := serve(t, ghfake.WithScopes(org, repo)) // authentication on: a call without the JWT is refused
	key := newKey(t)
	f.AddApp(appID, &key.PublicKey)
	full := f.AddInstallation(appID, "acme")
	readOnly := f.AddInstallation(appID, "beta")
	f.SetInstallationPermissions(readOnly, map[string]string{"actions": "read", "administration": "write"})
	jwt := appJWT(t, key)

	perms := func(id int64) map[string]string {
		a := do(t, http.MethodGet, fmt.Sprintf("%s/app/installations/%d", srv.URL, id), bearer(jwt))
		return decodeJSON[struct {
			Permissions map[string]string `json:"permissions"`
		}](t, a).Permissions
	}
	if got := perms(full)["actions"]; got != "write" {
		t.Errorf("default installation: actions %q, want write", got)
	}
	if got := perms(readOnly)["actions"]; got != "read" {
		t.Errorf("read-only installation: actions %q, want read", got)
	}
	if a := do(t, http.MethodGet, fmt.Sprintf("%s/app/installations/%d", srv.URL, full+100), bearer(jwt)); a.status != 404 {
		t.Errorf("unknown installation: %d, want 404", a.status)
	}
	if a := do(t, http.MethodGet, fmt.Sprintf("%s/app/installations/%d", srv.URL, full), nil); a.status != 401 {
		t.Errorf("installation without the App's JWT: %d, want 401", a.status)
	}

	for owner, tc := range map[string]struct {
		id   int64
		want int
	}{"acme": {full, 201}, "beta": {readOnly, 403}} {
		run := f.AddRun(owner+"/app", "ci")
		job, _ := f.AddJob(run, "build", "r")
		_ = f.CompleteRun(run, ghfake.ConclusionFailure)
		tok := tokenOf(t, installToken(t, srv.URL, jwt, tc.id))
		a := do(t, http.MethodPost, fmt.Sprintf("%s/repos/%s/app/actions/jobs/%d/rerun", srv.URL, owner, job), bearer(tok))
		if a.status != tc.want {
			t.Errorf("%s: re-run %d, want %d: %s", owner, a.status, tc.want, a.body)
		}
	}
}

// Every workflow call costs what its method does: 1 point for a GET, 5 for
// a POST, and one of the primary limit.
func TestWorkflowCallPoints(t *testing.T) {
	f, srv := serve(t)
	f.SetToken("tok")
	run, build, _, _ := lostJobRun(t, f)
	_ = f.CompleteRun(run, ghfake.ConclusionFailure)
	do(t, http.MethodGet, fmt.Sprintf("%s/repos/acme/app/actions/runs/%d", srv.URL, run), bearer("tok"))
	do(t, http.MethodGet, fmt.Sprintf("%s/repos/acme/app/actions/runs/%d/attempts/1/jobs", srv.URL, run), bearer("tok"))
	a := do(t, http.MethodPost, fmt.Sprintf("%s/repos/acme/app/actions/jobs/%d/rerun", srv.URL, build), bearer("tok"))
	if a.status != 201 {
		t.Fatalf("re-run %d", a.status)
	}
	if got := a.header.Get("X-RateLimit-Used"); got != "3" {
		t.Errorf("primary used %q after three calls, want 3", got)
	}
	if u := f.SecondaryUsage()[ghfake.TokenCredential("tok")]; u.Points != 7 {
		t.Errorf("secondary points %d, want 1+1+5", u.Points)
	}
	for _, op := range []ghfake.Op{ghfake.OpGetRun, ghfake.OpListJobs, ghfake.OpRerunJob} {
		if n := f.CountMatching(ghfake.RequestMatch{Op: op}); n != 1 {
			t.Errorf("%s logged %d times, want 1", op, n)
		}
	}
}

func TestRemoteWorkflowControls(t *testing.T) {
	f, srv := serve(t)
	f.SetToken("tok")
	g := &ghfake.Remote{BaseURL: srv.URL}
	ctx := t.Context()
	run, err := g.AddRun(ctx, "acme/app", "ci")
	if err != nil {
		t.Fatal(err)
	}
	build, err := g.AddJob(ctx, run, "build", "runner-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.AddJob(ctx, run+999, "x", ""); !ghfake.IsNotFound(err) {
		t.Errorf("job of an unknown run: %v, want 404", err)
	}
	if err := g.FinishJob(ctx, build, ghfake.ConclusionFailure); err != nil {
		t.Fatal(err)
	}
	if err := g.CompleteRun(ctx, run, ghfake.ConclusionFailure); err != nil {
		t.Fatal(err)
	}
	if err := g.SetTokenRights(ctx, ghfake.TokenRights{Scopes: []string{"admin:org"}}); err != nil {
		t.Fatal(err)
	}
	if a := do(t, http.MethodPost, fmt.Sprintf("%s/repos/acme/app/actions/jobs/%d/rerun", srv.URL, build), bearer("tok")); a.status != 403 {
		t.Errorf("re-run with a token without repo: %d, want 403", a.status)
	}
	_ = g.SetTokenRights(ctx, ghfake.TokenRights{Scopes: []string{"repo"}})
	if a := do(t, http.MethodPost, fmt.Sprintf("%s/repos/acme/app/actions/jobs/%d/rerun", srv.URL, build), bearer("tok")); a.status != 201 {
		t.Errorf("re-run with repo: %d, want 201", a.status)
	}
	st, err := g.RunState(ctx, run, 0)
	if err != nil || st.Run.RunAttempt != 2 || len(st.Jobs) != 1 || st.Jobs[0].Status != ghfake.StatusQueued {
		t.Errorf("run state after the re-run: %+v, %v", st, err)
	}
	if st, _ = g.RunState(ctx, run, 1); len(st.Jobs) != 1 || *st.Jobs[0].Conclusion != "failure" {
		t.Errorf("attempt 1: %+v", st)
	}
	if _, err := g.RunState(ctx, run+999, 0); !ghfake.IsNotFound(err) {
		t.Errorf("unknown run: %v, want 404", err)
	}
	inst := f.AddInstallation(42, "acme")
	if err := g.SetInstallationPermissions(ctx, inst, map[string]string{"actions": "read"}); err != nil {
		t.Fatal(err)
	}
}

// GET /rate_limit is free of the primary limit and names a classic token's scopes.
func TestRateLimitEndpoint(t *testing.T) {
	f, srv := serve(t, ghfake.WithScopes(org, repo)) // authentication on: a wrong token is refused
	f.SetToken("tok")
	f.SetTokenRights(ghfake.TokenRights{Scopes: []string{"repo"}})
	for range 3 {
		a := do(t, http.MethodGet, srv.URL+"/rate_limit", bearer("tok"))
		if a.status != 200 || a.header.Get("X-RateLimit-Used") != "0" || a.header.Get("X-OAuth-Scopes") != "repo" {
			t.Fatalf("GET /rate_limit: %d used %q scopes %q", a.status, a.header.Get("X-RateLimit-Used"), a.header.Get("X-OAuth-Scopes"))
		}
		body := decodeJSON[struct {
			Resources struct {
				Core struct {
					Remaining int `json:"remaining"`
				} `json:"core"`
			} `json:"resources"`
		}](t, a)
		if body.Resources.Core.Remaining != 5000 {
			t.Errorf("core remaining %d, want 5000", body.Resources.Core.Remaining)
		}
	}
	if a := do(t, http.MethodGet, srv.URL+"/rate_limit", bearer("wrong")); a.status != 401 {
		t.Errorf("wrong token: %d, want 401", a.status)
	}
}

// A run renders the fields GitHub's reference gives it (path, created_at,
// run_started_at), and GitHub re-runs a run at most 50 times: a run at
// attempt 50 answers 403.
func TestWorkflowRunPathStartAndAttemptCap(t *testing.T) {
	f, srv := serve(t)
	run := f.AddRun("acme/app", "nightly")
	job, _ := f.AddJob(run, "build", "runner-a")
	base := fmt.Sprintf("%s/repos/acme/app/actions/runs/%d", srv.URL, run)
	got := decodeJSON[map[string]any](t, do(t, http.MethodGet, base, nil))
	if got["path"] != ".github/workflows/nightly.yml" || got["run_started_at"] == nil || got["created_at"] == nil {
		t.Fatalf("run: %v", got)
	}
	for attempt := 1; attempt < ghfake.MaxRunAttempts; attempt++ {
		_ = f.FinishJob(job, ghfake.ConclusionFailure)
		_ = f.CompleteRun(run, ghfake.ConclusionFailure)
		if a := do(t, http.MethodPost, base+"/rerun-failed-jobs", nil); a.status != http.StatusCreated {
			t.Fatalf("re-run of attempt %d: %d %s", attempt, a.status, a.body)
		}
		jobs := f.Jobs(run, attempt+1)
		job = jobs[0].ID
	}
	_ = f.CompleteRun(run, ghfake.ConclusionFailure)
	if r, _ := f.Run(run); r.RunAttempt != ghfake.MaxRunAttempts {
		t.Fatalf("attempt %d", r.RunAttempt)
	}
	if a := do(t, http.MethodPost, base+"/rerun-failed-jobs", nil); a.status != http.StatusForbidden {
		t.Errorf("re-run of attempt %d: %d %s, want 403", ghfake.MaxRunAttempts, a.status, a.body)
	}
	if a := do(t, http.MethodPost, fmt.Sprintf("%s/repos/acme/app/actions/jobs/%d/rerun", srv.URL, job), nil); a.status != http.StatusForbidden {
		t.Errorf("job re-run at attempt %d: %d %s, want 403", ghfake.MaxRunAttempts, a.status, a.body)
	}
}
