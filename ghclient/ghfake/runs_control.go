package ghfake

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
)

// Control API of the workflow runs (ControlHandler):
//
//	POST /_fake/runs              RunRequest -> 201 {"id":N}
//	GET  /_fake/runs?id=N[&attempt=K] -> 200 RunState | 404
//	POST /_fake/runs/complete     {"id":N,"conclusion":"failure"} -> 204 | 404
//	POST /_fake/jobs              JobRequest -> 201 {"id":N} | 404
//	POST /_fake/jobs/finish       {"id":N,"conclusion":"failure"} -> 204 | 404
//	POST /_fake/tokenrights       TokenRights -> 204
//	POST /_fake/installations/permissions {"id":N,"permissions":{...}} -> 204

// RunRequest is the body of POST /_fake/runs.
type RunRequest struct {
	Repository string `json:"repository"`
	Name       string `json:"name"`
}

// JobRequest is the body of POST /_fake/jobs.
type JobRequest struct {
	RunID  int64    `json:"runID"`
	Name   string   `json:"name"`
	Runner string   `json:"runner,omitempty"`
	Needs  []string `json:"needs,omitempty"`
}

// ConclusionRequest ends a run or a job.
type ConclusionRequest struct {
	ID         int64  `json:"id"`
	Conclusion string `json:"conclusion"`
}

// RunState is GET /_fake/runs's answer: the run and the jobs of the attempt
// asked for (default its latest).
type RunState struct {
	Run  WorkflowRun   `json:"run"`
	Jobs []WorkflowJob `json:"jobs"`
}

type permissionsRequest struct {
	ID          int64             `json:"id"`
	Permissions map[string]string `json:"permissions"`
}

// controlStatus maps a control method's error: an unknown run or job is 404.
func controlStatus(w http.ResponseWriter, err error, ok int) {
	switch {
	case errors.Is(err, ErrNoRun), errors.Is(err, ErrNoJob):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		w.WriteHeader(ok)
	}
}

func (f *Fake) handleWorkflowControls(mux *http.ServeMux) {
	mux.HandleFunc("POST /_fake/runs", func(w http.ResponseWriter, r *http.Request) {
		var req RunRequest
		if !decode(w, r, &req) {
			return
		}
		writeJSON(w, http.StatusCreated, map[string]int64{"id": f.AddRun(req.Repository, req.Name)})
	})
	mux.HandleFunc("GET /_fake/runs", func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseInt(r.URL.Query().Get("id"), 10, 64)
		run, ok := f.Run(id)
		if !ok {
			http.Error(w, "no such workflow run", http.StatusNotFound)
			return
		}
		attempt := run.RunAttempt
		if a, err := strconv.Atoi(r.URL.Query().Get("attempt")); err == nil && a > 0 {
			attempt = a
		}
		jobs := f.Jobs(id, attempt)
		if jobs == nil {
			jobs = []WorkflowJob{}
		}
		writeJSON(w, http.StatusOK, RunState{Run: run, Jobs: jobs})
	})
	mux.HandleFunc("POST /_fake/runs/complete", func(w http.ResponseWriter, r *http.Request) {
		var req ConclusionRequest
		if decode(w, r, &req) {
			controlStatus(w, f.CompleteRun(req.ID, req.Conclusion), http.StatusNoContent)
		}
	})
	mux.HandleFunc("POST /_fake/jobs", func(w http.ResponseWriter, r *http.Request) {
		var req JobRequest
		if !decode(w, r, &req) {
			return
		}
		id, err := f.AddJob(req.RunID, req.Name, req.Runner, req.Needs...)
		if err != nil {
			controlStatus(w, err, 0)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]int64{"id": id})
	})
	mux.HandleFunc("POST /_fake/jobs/finish", func(w http.ResponseWriter, r *http.Request) {
		var req ConclusionRequest
		if decode(w, r, &req) {
			controlStatus(w, f.FinishJob(req.ID, req.Conclusion), http.StatusNoContent)
		}
	})
	setter(mux, "POST /_fake/tokenrights", func(req TokenRights) error {
		f.SetTokenRights(req)
		return nil
	})
	setter(mux, "POST /_fake/installations/permissions", func(req permissionsRequest) error {
		f.SetInstallationPermissions(req.ID, req.Permissions)
		return nil
	})
}

// AddRun starts a workflow run of repository.
func (g *Remote) AddRun(ctx context.Context, repository, name string) (int64, error) {
	var out struct {
		ID int64 `json:"id"`
	}
	err := g.do(ctx, http.MethodPost, "/_fake/runs", nil, RunRequest{Repository: repository, Name: name}, &out)
	return out.ID, err
}

// AddJob adds a job to the run's current attempt.
func (g *Remote) AddJob(ctx context.Context, runID int64, name, runnerName string, needs ...string) (int64, error) {
	var out struct {
		ID int64 `json:"id"`
	}
	err := g.do(ctx, http.MethodPost, "/_fake/jobs", nil, JobRequest{RunID: runID, Name: name, Runner: runnerName, Needs: needs}, &out)
	return out.ID, err
}

// FinishJob completes a job with conclusion.
func (g *Remote) FinishJob(ctx context.Context, jobID int64, conclusion string) error {
	return g.do(ctx, http.MethodPost, "/_fake/jobs/finish", nil, ConclusionRequest{ID: jobID, Conclusion: conclusion}, nil)
}

// CompleteRun completes the run's current attempt with conclusion.
func (g *Remote) CompleteRun(ctx context.Context, runID int64, conclusion string) error {
	return g.do(ctx, http.MethodPost, "/_fake/runs/complete", nil, ConclusionRequest{ID: runID, Conclusion: conclusion}, nil)
}

// RunState returns the run and the jobs of attempt (0: its latest).
func (g *Remote) RunState(ctx context.Context, runID int64, attempt int) (RunState, error) {
	q := url.Values{"id": {strconv.FormatInt(runID, 10)}}
	if attempt > 0 {
		q.Set("attempt", strconv.Itoa(attempt))
	}
	var out RunState
	err := g.do(ctx, http.MethodGet, "/_fake/runs", q, nil, &out)
	return out, err
}

// SetTokenRights sets what the static token may do with workflow runs.
func (g *Remote) SetTokenRights(ctx context.Context, r TokenRights) error {
	return g.do(ctx, http.MethodPost, "/_fake/tokenrights", nil, r, nil)
}

// SetInstallationPermissions sets an installation's permissions.
func (g *Remote) SetInstallationPermissions(ctx context.Context, id int64, perms map[string]string) error {
	return g.do(ctx, http.MethodPost, "/_fake/installations/permissions", nil, permissionsRequest{ID: id, Permissions: perms}, nil)
}
