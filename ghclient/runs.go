package ghclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-github/v93/github"
)

// WorkflowRun is what runner-guard reads of a workflow run.
type WorkflowRun struct {
	ID int64
	// Status is queued, in_progress, completed, ...; Conclusion is empty
	// until the run completes, then success, failure, cancelled, ...
	Status, Conclusion string
	Attempt            int
	// Path is the workflow file the run ran, as GitHub's path names it
	// (".github/workflows/ci.yml").
	Path string
	// Started is the run's run_started_at (created_at when GitHub gives
	// none; zero when neither): GitHub re-runs nothing 30 days after.
	Started time.Time
}

// Completed reports whether GitHub would re-run the run's jobs now.
func (r WorkflowRun) Completed() bool { return r.Status == "completed" }

// WorkflowJob is one job of a run's attempt.
type WorkflowJob struct {
	// ID is the REST job ID the re-run endpoint takes.
	ID                 int64
	Attempt            int
	Name               string
	Status, Conclusion string
	RunnerName         string
}

// ErrRerunRefused: GitHub answered a re-run with 403 that is no rate limit:
// the run is not completed, or the credential may not write actions
// (classic tokens need the repo scope, Apps and fine-grained tokens
// actions: write).
var ErrRerunRefused = errors.New("GitHub refused the re-run")

// ErrNotFound: GitHub answered 404 (an unknown run or job, or a repository
// the credential cannot see).
var ErrNotFound = errors.New("GitHub does not know it")

// maxJobPages bounds a run's job listing: GitHub caps a run at 256 jobs a
// matrix and a few hundred in all.
const maxJobPages = 20

// WorkflowRun gets the run of repo (ScopeRepo) with ID runID. Like every
// call of the re-run path it is sent at recheck priority: it never waits for
// budget and leaves the rest to unregisters.
func (c *Client) WorkflowRun(ctx context.Context, repo Scope, runID int64) (WorkflowRun, error) {
	op := fmt.Sprintf("get workflow run %d of %s", runID, repo)
	gh, owner, name, ctx, err := c.runsAPI(ctx, repo)
	if err != nil {
		return WorkflowRun{}, fmt.Errorf("%s: %w", op, err)
	}
	run, resp, err := gh.Actions.GetWorkflowRunByID(ctx, owner, name, runID)
	if err != nil {
		return WorkflowRun{}, c.runsError(op, repo, resp, err)
	}
	c.noteScopes(resp)
	started := run.GetRunStartedAt().Time
	if started.IsZero() {
		started = run.GetCreatedAt().Time
	}
	return WorkflowRun{ID: run.GetID(), Status: run.GetStatus(), Conclusion: run.GetConclusion(), Attempt: run.GetRunAttempt(),
		Path: run.GetPath(), Started: started}, nil
}

// AttemptJobs lists the jobs of the run's attempt (all pages).
func (c *Client) AttemptJobs(ctx context.Context, repo Scope, runID int64, attempt int) ([]WorkflowJob, error) {
	op := fmt.Sprintf("list the jobs of attempt %d of workflow run %d of %s", attempt, runID, repo)
	gh, owner, name, ctx, err := c.runsAPI(ctx, repo)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	var out []WorkflowJob
	opts := &github.ListOptions{PerPage: listPerPage}
	for page := 0; page < maxJobPages; page++ {
		jobs, resp, err := gh.Actions.ListWorkflowJobsAttempt(ctx, owner, name, runID, int64(attempt), opts)
		if err != nil {
			return nil, c.runsError(op, repo, resp, err)
		}
		c.noteScopes(resp)
		for _, j := range jobs.Jobs {
			out = append(out, WorkflowJob{
				ID: j.GetID(), Attempt: int(j.GetRunAttempt()), Name: j.GetName(),
				Status: j.GetStatus(), Conclusion: j.GetConclusion(), RunnerName: j.GetRunnerName(),
			})
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		opts.Page = resp.NextPage
	}
	return nil, fmt.Errorf("%s: more than %d pages", op, maxJobPages)
}

// RerunJob asks GitHub to re-run the job and the jobs that need it.
// Errors: ErrRerunRefused or ErrNotFound (errors.Is), *RateLimited
// (errors.As), else a wrapped error.
func (c *Client) RerunJob(ctx context.Context, repo Scope, jobID int64) error {
	return c.rerun(ctx, repo, fmt.Sprintf("re-run job %d of %s", jobID, repo), jobID, (*github.ActionsService).RerunJobByID)
}

// RerunFailedJobs asks GitHub to re-run every failed job of the run's
// latest attempt, and their dependents. Errors as RerunJob's.
func (c *Client) RerunFailedJobs(ctx context.Context, repo Scope, runID int64) error {
	return c.rerun(ctx, repo, fmt.Sprintf("re-run the failed jobs of workflow run %d of %s", runID, repo), runID, (*github.ActionsService).RerunFailedJobsByID)
}

// rerun makes one of the re-run requests, which all take the repository's
// owner and name and one ID and answer with no body.
func (c *Client) rerun(ctx context.Context, repo Scope, op string, id int64,
	request func(*github.ActionsService, context.Context, string, string, int64) (*github.Response, error),
) error {
	gh, owner, name, ctx, err := c.runsAPI(ctx, repo)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if resp, err := request(gh.Actions, ctx, owner, name, id); err != nil {
		return c.runsError(op, repo, resp, err)
	}
	return nil
}

// RerunRight is what can be known before the first re-run of whether the
// credential may re-run jobs.
type RerunRight int

const (
	// RerunRightUnknown: nothing tells (a fine-grained token, an App
	// finding its installation per owner, a classic token not yet answered).
	RerunRightUnknown RerunRight = iota
	// RerunRightGranted: the installation has actions: write, or the
	// classic token the repo scope.
	RerunRightGranted
	// RerunRightMissing: it has not.
	RerunRightMissing
)

// CheckRerunRight tells what can be told of the credential's right to
// re-run jobs: an App's fixed installation's permissions (one GET of
// /app/installations/{id} with the App's JWT), or a classic token's scopes
// (one GET of /rate_limit, whose answer names them); both at recheck
// priority. A fine-grained token's rights show nowhere: unknown.
func (c *Client) CheckRerunRight(ctx context.Context) (RerunRight, string, error) {
	if c.install > 0 && c.appAPI != nil {
		inst, resp, err := c.appAPI.Apps.GetInstallation(WithPriority(ctx, PriorityRecheck), c.install)
		if err != nil {
			return RerunRightUnknown, "", c.wrap(fmt.Sprintf("get the GitHub App installation %d", c.install), resp, err)
		}
		level := inst.GetPermissions().GetActions()
		if level != "write" {
			return RerunRightMissing, fmt.Sprintf("the GitHub App installation %d has actions: %q, re-runs need actions: write", c.install, level), nil
		}
		return RerunRightGranted, "", nil
	}
	if !c.isApp {
		// GET /rate_limit costs nothing of the hourly limit; a classic
		// token's answer names its scopes.
		_, resp, err := c.gh.RateLimit.Get(WithPriority(ctx, PriorityRecheck))
		if err != nil {
			return RerunRightUnknown, "", c.wrap("read the token's scopes (GET /rate_limit)", resp, err)
		}
		c.noteScopes(resp)
	}
	return c.scopeRight()
}

// scopeRight reads the classic token's scopes GitHub last named.
func (c *Client) scopeRight() (RerunRight, string, error) {
	c.mu.Lock()
	scopes, seen := c.scopes, c.scopesSeen
	c.mu.Unlock()
	if !seen {
		return RerunRightUnknown, "", nil
	}
	for _, s := range strings.Split(scopes, ",") {
		if strings.TrimSpace(s) == "repo" {
			return RerunRightGranted, "", nil
		}
	}
	return RerunRightMissing, fmt.Sprintf("the classic token's scopes are %q, re-runs need repo", scopes), nil
}

// noteScopes keeps the X-OAuth-Scopes a classic token's answer carries.
func (c *Client) noteScopes(resp *github.Response) {
	if resp == nil || resp.Response == nil {
		return
	}
	v, ok := resp.Header["X-Oauth-Scopes"]
	if !ok || len(v) == 0 {
		return
	}
	c.mu.Lock()
	c.scopes, c.scopesSeen = v[0], true
	c.mu.Unlock()
}

// runsAPI checks repo and returns its client and owner/name, with ctx at
// recheck priority.
func (c *Client) runsAPI(ctx context.Context, repo Scope) (*github.Client, string, string, context.Context, error) {
	if repo.Kind != ScopeRepo {
		return nil, "", "", ctx, fmt.Errorf("workflow runs belong to a repository, got %s", repo)
	}
	if _, err := newScope(repo.Kind, repo.Name); err != nil {
		return nil, "", "", ctx, err
	}
	ctx = WithPriority(ctx, PriorityRecheck)
	gh, err := c.api(ctx, repo)
	if err != nil {
		return nil, "", "", ctx, err
	}
	owner, name, _ := strings.Cut(repo.Name, "/")
	return gh, owner, name, ctx, nil
}

// runsError maps an answer of the re-run path: rate limits first (a 403
// can be one), then 404 and a refusing 403.
func (c *Client) runsError(op string, repo Scope, resp *github.Response, err error) error {
	c.noteScopes(resp)
	if rl := rateLimited(err, c.now(), c.cloud); rl != nil {
		return c.wrap(op, resp, err)
	}
	switch statusOf(err) {
	case http.StatusNotFound:
		c.forgetInstallation(repo, err)
		return fmt.Errorf("%s: %w: %w", op, ErrNotFound, err)
	case http.StatusForbidden:
		return fmt.Errorf("%s: %w: %w", op, ErrRerunRefused, err)
	}
	c.forgetInstallation(repo, err)
	return c.wrap(op, resp, err)
}
