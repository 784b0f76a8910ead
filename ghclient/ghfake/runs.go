package ghfake

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
)

// Workflow runs and jobs, as GitHub's REST reference describes them
// (docs/reruns.md has the facts and their source):
//
//   - GET /repos/{owner}/{repo}/actions/runs/{run_id}: status, conclusion
//     (null until completed), run_attempt;
//   - GET .../actions/runs/{run_id}/jobs (filter=latest, the default, or
//     all) and GET .../runs/{run_id}/attempts/{attempt_number}/jobs: paged
//     (per_page at most 100), each job with id, run_id, run_attempt, status,
//     conclusion, name, runner_id and runner_name;
//   - POST .../actions/jobs/{job_id}/rerun: the job and the jobs that need it
//     run again in a new attempt of the run: 201; 403 while the run is not
//     completed or when the credential may not write actions (classic
//     tokens need the repo scope); 404 for a job the repository does not
//     have;
//   - POST .../actions/runs/{run_id}/rerun-failed-jobs: the same for every
//     job of the latest attempt that failed;
//   - a run is re-run at most 50 times (GitHub changelog, 2026-04-10): a
//     re-run of a run at attempt MaxRunAttempts answers 403;
//   - a run renders its workflow file as path (".github/workflows/NAME.yml"),
//     created_at and run_started_at (ISO 8601);
//   - GET /rate_limit: free of the primary limit; like every answer to a
//     classic token it carries X-OAuth-Scopes.
//
// Each is one request at the points of its method (GET 1, POST 5) and one
// of the primary limit, as every other route.

// Op values of the workflow routes.
const (
	OpGetRun          Op = "get-run"           // GET .../actions/runs/{run_id}
	OpListJobs        Op = "list-jobs"         // GET .../actions/runs/{run_id}[/attempts/{n}]/jobs
	OpRerunJob        Op = "rerun-job"         // POST .../actions/jobs/{job_id}/rerun
	OpRerunFailedJobs Op = "rerun-failed-jobs" // POST .../actions/runs/{run_id}/rerun-failed-jobs
	OpGetInstallation Op = "get-installation"  // GET /app/installations/{installation_id}
	OpRateLimit       Op = "rate-limit"        // GET /rate_limit
)

// Run statuses and conclusions the fake uses.
const (
	StatusQueued     = "queued"
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"

	ConclusionSuccess   = "success"
	ConclusionFailure   = "failure"
	ConclusionCancelled = "cancelled"
	ConclusionSkipped   = "skipped"
)

// WorkflowRun is a workflow run as GET .../actions/runs/{run_id} renders it
// (the fields runner-guard reads).
type WorkflowRun struct {
	ID         int64   `json:"id"`
	Name       string  `json:"name"`
	Status     string  `json:"status"`
	Conclusion *string `json:"conclusion"`
	RunAttempt int     `json:"run_attempt"`
	// Path is the workflow file, as GitHub names it: ".github/workflows/ci.yml".
	Path         string    `json:"path"`
	CreatedAt    time.Time `json:"created_at"`
	RunStartedAt time.Time `json:"run_started_at"`
	// Repository is "owner/repo" (GitHub nests it as repository.full_name).
	Repository string `json:"-"`
}

// WorkflowJob is one job of a run's attempt as the job listings render it.
type WorkflowJob struct {
	ID         int64   `json:"id"`
	RunID      int64   `json:"run_id"`
	RunAttempt int     `json:"run_attempt"`
	Status     string  `json:"status"`
	Conclusion *string `json:"conclusion"`
	Name       string  `json:"name"`
	RunnerID   *int64  `json:"runner_id"`
	RunnerName *string `json:"runner_name"`
	// Needs names the jobs this one depends on (re-run with them); GitHub
	// does not render it.
	Needs []string `json:"-"`
}

// TokenRights are what the static token (SetToken) may do with workflow
// runs. The zero value is a fine-grained token with actions: write.
type TokenRights struct {
	// Scopes make it a classic token: every answer to it carries them in
	// X-OAuth-Scopes, and a re-run needs "repo".
	Scopes []string `json:"scopes,omitempty"`
	// NoActionsWrite makes a token without Scopes a fine-grained token with
	// actions: read only; nothing in GitHub's answers tells.
	NoActionsWrite bool `json:"noActionsWrite,omitempty"`
}

// workflows is the fake's runs and jobs, guarded by Fake.mu.
type workflows struct {
	nextID int64
	runs   map[int64]*WorkflowRun
	// jobs are every attempt's jobs, by job ID.
	jobs map[int64]*WorkflowJob
	// perms are installations' permissions set with SetInstallationPermissions.
	perms  map[int64]map[string]string
	rights TokenRights
}

func (w *workflows) init() {
	if w.runs == nil {
		w.nextID = 50000
		w.runs, w.jobs, w.perms = map[int64]*WorkflowRun{}, map[int64]*WorkflowJob{}, map[int64]map[string]string{}
	}
}

// defaultInstallationPermissions are an installation's permissions unless
// SetInstallationPermissions says otherwise: what runner-guard needs.
func defaultInstallationPermissions() map[string]string {
	return map[string]string{"actions": "write", "administration": "write", "metadata": "read", "organization_self_hosted_runners": "write"}
}

// ErrNoRun and ErrNoJob: the control methods were given an unknown ID.
var (
	ErrNoRun = errors.New("no such workflow run")
	ErrNoJob = errors.New("no such job")
)

// runLocked is the run runID, or ErrNoRun.
func (f *Fake) runLocked(runID int64) (*WorkflowRun, error) {
	run, ok := f.wf.runs[runID]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrNoRun, runID)
	}
	return run, nil
}

// updateJob applies change to the job jobID under the lock, or returns ErrNoJob.
func (f *Fake) updateJob(jobID int64, change func(*WorkflowJob)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.wf.jobs[jobID]
	if !ok {
		return fmt.Errorf("%w: %d", ErrNoJob, jobID)
	}
	change(j)
	return nil
}

// MaxRunAttempts is how many attempts GitHub lets a run have: a run is
// re-run at most 50 times (GitHub changelog, 2026-04-10).
const MaxRunAttempts = 50

// AddRun starts a workflow run of repository ("owner/repo") in attempt 1,
// in progress, now, from the workflow file .github/workflows/NAME.yml, and
// returns its ID.
func (f *Fake) AddRun(repository, name string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wf.init()
	f.wf.nextID++
	now := f.now().UTC().Truncate(time.Second)
	f.wf.runs[f.wf.nextID] = &WorkflowRun{ID: f.wf.nextID, Name: name, Status: StatusInProgress, RunAttempt: 1, Repository: strings.ToLower(repository),
		Path: ".github/workflows/" + name + ".yml", CreatedAt: now, RunStartedAt: now}
	return f.wf.nextID
}

// AddJob adds a job to the run's current attempt: in progress on runnerName
// (queued when runnerName is empty), needing the jobs named in needs.
func (f *Fake) AddJob(runID int64, name, runnerName string, needs ...string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wf.init()
	run, err := f.runLocked(runID)
	if err != nil {
		return 0, err
	}
	f.wf.nextID++
	j := &WorkflowJob{ID: f.wf.nextID, RunID: runID, RunAttempt: run.RunAttempt, Status: StatusQueued, Name: name, Needs: needs}
	f.assignLocked(j, runnerName)
	f.wf.jobs[j.ID] = j
	return j.ID, nil
}

// StartJob puts a queued job (a re-run's) on runnerName.
func (f *Fake) StartJob(jobID int64, runnerName string) error {
	return f.updateJob(jobID, func(j *WorkflowJob) { f.assignLocked(j, runnerName) })
}

func (f *Fake) assignLocked(j *WorkflowJob, runnerName string) {
	if runnerName == "" {
		return
	}
	j.Status, j.RunnerName = StatusInProgress, &runnerName
	var id int64
	for _, r := range f.runners {
		if r.Name == runnerName {
			id = r.ID
		}
	}
	j.RunnerID = &id
}

// FinishJob completes a job with conclusion.
func (f *Fake) FinishJob(jobID int64, conclusion string) error {
	return f.updateJob(jobID, func(j *WorkflowJob) { j.Status, j.Conclusion = StatusCompleted, &conclusion })
}

// CompleteRun completes the run's current attempt with conclusion; its jobs
// not completed yet end with that conclusion too (a cancelled run cancels them).
func (f *Fake) CompleteRun(runID int64, conclusion string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	run, err := f.runLocked(runID)
	if err != nil {
		return err
	}
	run.Status, run.Conclusion = StatusCompleted, &conclusion
	for _, j := range f.attemptJobsLocked(run, run.RunAttempt) {
		if j.Status != StatusCompleted {
			j.Status, j.Conclusion = StatusCompleted, &conclusion
		}
	}
	return nil
}

// Run returns a copy of the run.
func (f *Fake) Run(runID int64) (WorkflowRun, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	run, ok := f.wf.runs[runID]
	if !ok {
		return WorkflowRun{}, false
	}
	return *run, true
}

// Jobs returns copies of the jobs of the run's attempt in ID order.
func (f *Fake) Jobs(runID int64, attempt int) []WorkflowJob {
	f.mu.Lock()
	defer f.mu.Unlock()
	run, ok := f.wf.runs[runID]
	if !ok {
		return nil
	}
	var out []WorkflowJob
	for _, j := range f.attemptJobsLocked(run, attempt) {
		out = append(out, *j)
	}
	return out
}

// SetInstallationPermissions sets what an installation's tokens may do, as
// GET /app/installations/{id} reports it; an installation without
// "actions": "write" may not re-run jobs.
func (f *Fake) SetInstallationPermissions(id int64, perms map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wf.init()
	cp := map[string]string{}
	for k, v := range perms {
		cp[k] = v
	}
	f.wf.perms[id] = cp
}

// SetTokenRights sets what the static token may do with workflow runs.
func (f *Fake) SetTokenRights(r TokenRights) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wf.rights = TokenRights{Scopes: append([]string(nil), r.Scopes...), NoActionsWrite: r.NoActionsWrite}
}

func (f *Fake) installationPermsLocked(id int64) map[string]string {
	if p, ok := f.wf.perms[id]; ok {
		return p
	}
	return defaultInstallationPermissions()
}

// attemptJobsLocked are the jobs of run's attempt in ID order.
func (f *Fake) attemptJobsLocked(run *WorkflowRun, attempt int) []*WorkflowJob {
	var out []*WorkflowJob
	for _, j := range f.wf.jobs {
		if j.RunID == run.ID && j.RunAttempt == attempt {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// workflowRoute is a request to one of the workflow routes.
type workflowRoute struct {
	op      Op
	repo    string // lower-case owner/repo
	id      int64  // run, job or installation ID
	attempt int    // OpListJobs of one attempt
}

// parseWorkflowRoute matches the workflow routes (parts: the path split on
// "/", without /api/v3).
func parseWorkflowRoute(method string, parts []string) (workflowRoute, bool) {
	if method == http.MethodGet && len(parts) == 1 && parts[0] == "rate_limit" {
		return workflowRoute{op: OpRateLimit}, true
	}
	if method == http.MethodGet && len(parts) == 3 && parts[0] == "app" && parts[1] == "installations" {
		id, err := strconv.ParseInt(parts[2], 10, 64)
		return workflowRoute{op: OpGetInstallation, id: id}, err == nil
	}
	if len(parts) < 6 || parts[0] != "repos" || parts[1] == "" || parts[2] == "" || parts[3] != "actions" {
		return workflowRoute{}, false
	}
	id, err := strconv.ParseInt(parts[5], 10, 64)
	if err != nil {
		return workflowRoute{}, false
	}
	rt := workflowRoute{repo: strings.ToLower(parts[1] + "/" + parts[2]), id: id}
	rest := parts[6:]
	switch {
	case parts[4] == "jobs" && method == http.MethodPost && len(rest) == 1 && rest[0] == "rerun":
		rt.op = OpRerunJob
	case parts[4] != "runs":
		return workflowRoute{}, false
	case method == http.MethodGet && len(rest) == 0:
		rt.op = OpGetRun
	case method == http.MethodGet && len(rest) == 1 && rest[0] == "jobs":
		rt.op = OpListJobs
	case method == http.MethodGet && len(rest) == 3 && rest[0] == "attempts" && rest[2] == "jobs":
		n, err := strconv.Atoi(rest[1])
		if err != nil || n <= 0 {
			return workflowRoute{}, false
		}
		rt.op, rt.attempt = OpListJobs, n
	case method == http.MethodPost && len(rest) == 1 && rest[0] == "rerun-failed-jobs":
		rt.op = OpRerunFailedJobs
	default:
		return workflowRoute{}, false
	}
	return rt, true
}

// answerAppInstallationLocked answers GET /app/installations/{id} (the App's
// JWT): the installation with its permissions, 404 for another App's or an
// unknown one.
func (f *Fake) answerAppInstallationLocked(r *http.Request, h http.Header, rt workflowRoute, now time.Time) response {
	appID, denied, ok := f.authenticateAppLocked(r, h, now)
	if !ok {
		return denied
	}
	if limited, ok := f.spendPrimaryLocked(h, f.credentialLocked(r), now); !ok {
		return limited
	}
	in, known := f.installations[rt.id]
	if !known || len(f.apps) > 0 && in.AppID != appID {
		return notFound(h)
	}
	return jsonResponse(http.StatusOK, h, map[string]any{
		"id": in.ID, "app_id": in.AppID, "target_type": "Organization",
		"permissions": f.installationPermsLocked(in.ID),
	})
}

// answerWorkflowLocked answers an authorized workflow request; install is
// the installation of an installation token (0: the static token).
func (f *Fake) answerWorkflowLocked(r *http.Request, h http.Header, install int64, rt workflowRoute) response {
	f.wf.init()
	if resp, denied := f.installationDeniesLocked(h, install, scopeKey{kind: ghclient.ScopeRepo, name: rt.repo}); denied {
		return resp
	}
	switch rt.op {
	case OpGetRun:
		run, ok := f.wf.runs[rt.id]
		if !ok || run.Repository != rt.repo {
			return notFound(h)
		}
		return jsonResponse(http.StatusOK, h, run)
	case OpListJobs:
		return f.listJobsLocked(r, h, rt)
	}
	if !f.mayWriteActionsLocked(install) {
		msg := "Resource not accessible by personal access token"
		if install != 0 {
			msg = "Resource not accessible by integration"
		}
		return errorResponse(http.StatusForbidden, h, msg)
	}
	if rt.op == OpRerunFailedJobs {
		run, ok := f.wf.runs[rt.id]
		if !ok || run.Repository != rt.repo {
			return notFound(h)
		}
		return f.rerunLocked(h, run, func(j *WorkflowJob) bool { return j.Conclusion != nil && failed(*j.Conclusion) })
	}
	job, ok := f.wf.jobs[rt.id]
	if !ok || f.wf.runs[job.RunID].Repository != rt.repo {
		return notFound(h)
	}
	run := f.wf.runs[job.RunID]
	if job.RunAttempt != run.RunAttempt && run.Status == StatusCompleted {
		// Only the latest attempt's jobs can be re-run.
		return errorResponse(http.StatusForbidden, h, "This job is not part of the latest attempt of the workflow run.")
	}
	return f.rerunLocked(h, run, func(j *WorkflowJob) bool { return j.Name == job.Name })
}

// failed reports whether a job's conclusion is one rerun-failed-jobs re-runs.
func failed(conclusion string) bool {
	switch conclusion {
	case ConclusionFailure, ConclusionCancelled, "timed_out", "startup_failure":
		return true
	}
	return false
}

func (f *Fake) mayWriteActionsLocked(install int64) bool {
	if install != 0 {
		return f.installationPermsLocked(install)["actions"] == "write"
	}
	if f.wf.rights.Scopes != nil {
		for _, s := range f.wf.rights.Scopes {
			if s == "repo" {
				return true
			}
		}
		return false
	}
	return !f.wf.rights.NoActionsWrite
}

// rerunLocked starts the run's next attempt: the jobs pick selects and every
// job needing them (transitively) are queued again under new IDs; the
// others are carried over as they ended. 403 while the run is not completed.
func (f *Fake) rerunLocked(h http.Header, run *WorkflowRun, pick func(*WorkflowJob) bool) response {
	if run.Status != StatusCompleted {
		return errorResponse(http.StatusForbidden, h, "Unable to re-run a workflow run that is not completed.")
	}
	if run.RunAttempt >= MaxRunAttempts {
		return errorResponse(http.StatusForbidden, h, "This workflow run has reached the maximum number of attempts.")
	}
	jobs := f.attemptJobsLocked(run, run.RunAttempt)
	again := map[string]bool{}
	for _, j := range jobs {
		if pick(j) {
			again[j.Name] = true
		}
	}
	for grew := true; grew; {
		grew = false
		for _, j := range jobs {
			for _, n := range j.Needs {
				if again[n] && !again[j.Name] {
					again[j.Name], grew = true, true
				}
			}
		}
	}
	if len(again) == 0 {
		return errorResponse(http.StatusForbidden, h, "There are no failed jobs to re-run.")
	}
	run.RunAttempt++
	run.Status, run.Conclusion = StatusQueued, nil
	for _, j := range jobs {
		f.wf.nextID++
		cp := *j
		cp.ID, cp.RunAttempt = f.wf.nextID, run.RunAttempt
		if again[j.Name] {
			cp.Status, cp.Conclusion, cp.RunnerID, cp.RunnerName = StatusQueued, nil, nil, nil
		}
		f.wf.jobs[cp.ID] = &cp
	}
	return jsonResponse(http.StatusCreated, h, map[string]any{})
}

// listJobsLocked answers a run's job listing: the latest attempt's jobs
// (filter=latest, the default), every attempt's (filter=all), or one
// attempt's; paged as the runner listings.
func (f *Fake) listJobsLocked(r *http.Request, h http.Header, rt workflowRoute) response {
	run, ok := f.wf.runs[rt.id]
	if !ok || run.Repository != rt.repo || rt.attempt > run.RunAttempt {
		return notFound(h)
	}
	q := r.URL.Query()
	var jobs []*WorkflowJob
	switch {
	case rt.attempt > 0:
		jobs = f.attemptJobsLocked(run, rt.attempt)
	case q.Get("filter") == "all":
		for n := 1; n <= run.RunAttempt; n++ {
			jobs = append(jobs, f.attemptJobsLocked(run, n)...)
		}
	case q.Get("filter") == "" || q.Get("filter") == "latest":
		jobs = f.attemptJobsLocked(run, run.RunAttempt)
	default:
		return errorResponse(http.StatusUnprocessableEntity, h, "Invalid request.\n\nfilter must be latest or all.")
	}
	p := listPageOf(q)
	out := []WorkflowJob{}
	for _, j := range jobs[p.start(len(jobs)):p.end(len(jobs))] {
		out = append(out, *j)
	}
	if link := linkHeader(r, p, len(jobs)); link != "" {
		h.Set("Link", link)
	}
	return jsonResponse(http.StatusOK, h, struct {
		TotalCount int           `json:"total_count"`
		Jobs       []WorkflowJob `json:"jobs"`
	}{len(jobs), out})
}

// oauthScopesLocked adds X-OAuth-Scopes to an answer to a classic token.
func (f *Fake) oauthScopesLocked(r *http.Request, h http.Header) {
	if f.wf.rights.Scopes == nil {
		return
	}
	if tok, ok := credential(r); ok && f.token != "" && tok == f.token {
		h.Set("X-OAuth-Scopes", strings.Join(f.wf.rights.Scopes, ", "))
	}
}

// workflowLocked authenticates a workflow request and answers it.
func (f *Fake) workflowLocked(r *http.Request, h http.Header, rt workflowRoute, now time.Time) response {
	if rt.op == OpGetInstallation {
		return f.answerAppInstallationLocked(r, h, rt, now)
	}
	install, ok := f.authorizedLocked(r, now)
	if !ok {
		return errorResponse(http.StatusUnauthorized, h, "Bad credentials")
	}
	f.oauthScopesLocked(r, h)
	if rt.op == OpRateLimit {
		return f.rateLimitLocked(r, h)
	}
	if limited, ok := f.spendPrimaryLocked(h, f.credentialLocked(r), now); !ok {
		return limited
	}
	return f.answerWorkflowLocked(r, h, install, rt)
}

// rateLimitLocked answers GET /rate_limit, which GitHub does not count
// against the primary limit: the asking credential's window as it is.
func (f *Fake) rateLimitLocked(r *http.Request, h http.Header) response {
	cred := f.credentialLocked(r)
	w := f.primaryLocked(cred, f.now())
	if f.style != StyleGHES {
		f.rateHeadersLocked(h, cred)
	}
	core := map[string]int64{"limit": int64(w.Limit), "remaining": int64(max(w.Remaining, 0)),
		"used": int64(w.Limit - max(w.Remaining, 0)), "reset": w.Reset.Unix()}
	return jsonResponse(http.StatusOK, h, map[string]any{"resources": map[string]any{"core": core}, "rate": core})
}
