package ghfake

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
)

// Events configures the workflow_job webhook deliveries the fake sends, as
// an organization webhook with the "Workflow jobs" event does: an
// in_progress when a test marks a runner busy (SetBusy true), a completed
// when it marks it idle. GITHUB-API.md, "Webhook deliveries". The job is the
// workflow run's job in progress on the runner (AddJob, StartJob) when
// there is one, with its ID, run, attempt, name and repository, as GitHub
// sends it; otherwise a job of its own numbering.
type Events struct {
	// URL receives the deliveries (POST, application/json); "" stops them.
	URL string `json:"url"`
	// Secret signs them (X-Hub-Signature-256); empty sends them unsigned.
	Secret string `json:"secret"`
	// Secrets, by organization login, sign that organization's deliveries
	// instead: each organization's webhook has its own secret.
	Secrets map[string]string `json:"secrets,omitempty"`
	// Repository is the job's repository for a runner of an organization
	// or enterprise scope (default ORG/app; an enterprise's org is its slug).
	Repository string `json:"repository,omitempty"`
	// Lose drops every delivery of these actions ("in_progress",
	// "completed"): GitHub does not retry a failed delivery.
	Lose []string `json:"lose,omitempty"`
	// Repeat sends each delivery twice, with the same X-GitHub-Delivery, as
	// a redelivery does.
	Repeat bool `json:"repeat,omitempty"`
	// Reorder holds each in_progress back and sends it after the job's
	// completed.
	Reorder bool `json:"reorder,omitempty"`
}

// Delivery is one delivery sent, for tests to assert on.
type Delivery struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	JobID  int64  `json:"jobID"`
	Runner string `json:"runner"`
	// Status is the receiver's HTTP status; 0 when it could not be reached.
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
}

// eventSender delivers the events of one Events configuration.
type eventSender struct {
	cfg    Events
	client *http.Client

	mu      sync.Mutex
	nextJob int64
	// guids numbers X-GitHub-Delivery values: the Fake's, shared by every
	// sender it starts, since GitHub's never repeat.
	guids     *atomic.Int64
	jobs      map[string]eventJob // runner key -> running job
	held      map[int64][]byte    // reordered in_progress bodies by job
	delivered []Delivery
}

// DeliverEvents starts (or, with an empty URL, stops) webhook deliveries.
func (f *Fake) DeliverEvents(cfg Events) {
	var s *eventSender
	if cfg.URL != "" {
		s = &eventSender{cfg: cfg, client: &http.Client{Timeout: 10 * time.Second}, nextJob: 50000, guids: &f.deliveryGUIDs,
			jobs: map[string]eventJob{}, held: map[int64][]byte{}}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = s
}

// Deliveries lists the deliveries sent since DeliverEvents.
func (f *Fake) Deliveries() []Delivery {
	f.mu.Lock()
	s := f.events
	f.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.delivered...)
}

// eventJob is the job a delivery names.
type eventJob struct {
	id, runID  int64
	attempt    int
	name, repo string // repo "": the sender's default for the scope
	// started is when the job started; completed when it ended (zero
	// while it runs).
	started, completed time.Time
}

// jobChanged sends the delivery of a runner's job starting (busy) or ending.
// It runs outside f.mu: the receiver may call the fake back.
func (f *Fake) jobChanged(scope ghclient.Scope, name string, runnerID int64, busy bool) {
	f.mu.Lock()
	s := f.events
	var job eventJob
	if busy {
		job = f.runningJobLocked(name, runnerID)
	}
	now := f.now()
	f.mu.Unlock()
	if s != nil {
		s.jobChanged(scope, name, runnerID, busy, job, now)
	}
}

// runningJobLocked is the workflow run's job in progress on the runner (zero
// when none). f.mu is held.
func (f *Fake) runningJobLocked(runner string, runnerID int64) eventJob {
	for _, j := range f.wf.jobs {
		if j.Status != StatusInProgress || j.RunnerName == nil || *j.RunnerName != runner || j.RunnerID == nil || *j.RunnerID != runnerID {
			continue
		}
		if run := f.wf.runs[j.RunID]; run != nil {
			return eventJob{id: j.ID, runID: j.RunID, attempt: j.RunAttempt, name: j.Name, repo: run.Repository}
		}
	}
	return eventJob{}
}

func (s *eventSender) jobChanged(scope ghclient.Scope, name string, runnerID int64, busy bool, running eventJob, now time.Time) {
	key := fmt.Sprintf("%v/%s", keyOf(scope), name)
	s.mu.Lock()
	var job eventJob
	if busy {
		job = running
		if job.id == 0 {
			s.nextJob++
			job = eventJob{id: s.nextJob, runID: s.nextJob * 10, attempt: 1, name: "build"}
		}
		job.started = now
		s.jobs[key] = job
	} else {
		job = s.jobs[key]
		job.completed = now
		delete(s.jobs, key)
	}
	s.mu.Unlock()
	jobID := job.id
	if jobID == 0 {
		return // idle without a job this sender saw start
	}
	action := "completed"
	if busy {
		action = "in_progress"
	}
	body := s.payload(scope, name, runnerID, job, action)
	if busy && s.cfg.Reorder {
		s.mu.Lock()
		s.held[jobID] = body
		s.mu.Unlock()
		return
	}
	s.send(action, name, jobID, body)
	if !busy {
		s.mu.Lock()
		held, ok := s.held[jobID]
		delete(s.held, jobID)
		s.mu.Unlock()
		if ok {
			s.send("in_progress", name, jobID, held)
		}
	}
}

// payload is the workflow_job delivery's body, with the fields
// GITHUB-API.md lists.
func (s *eventSender) payload(scope ghclient.Scope, name string, runnerID int64, j eventJob, action string) []byte {
	repo, org, enterprise := s.cfg.Repository, "", ""
	switch scope.Kind {
	case ghclient.ScopeRepo:
		repo = scope.Name
	case ghclient.ScopeOrg:
		org = scope.Name
	case ghclient.ScopeEnterprise:
		enterprise = scope.Name
		org = scope.Name
	}
	if repo == "" {
		repo = org + "/app"
	}
	if j.repo != "" {
		repo = j.repo
	}
	owner, short, _ := strings.Cut(repo, "/")
	if org == "" {
		org = owner
	}
	job := map[string]any{
		"id": j.id, "run_id": j.runID, "run_attempt": j.attempt, "name": j.name, "status": action,
		"conclusion": nil, "labels": []string{"self-hosted"}, "runner_id": runnerID,
		"runner_name": name, "runner_group_name": "Default",
	}
	// GitHub's timestamps are ISO 8601 to the second.
	job["started_at"] = j.started.UTC().Format(time.RFC3339)
	job["completed_at"] = nil
	if action == "completed" {
		job["conclusion"] = "success"
		job["completed_at"] = j.completed.UTC().Format(time.RFC3339)
	}
	p := map[string]any{
		"action":       action,
		"workflow_job": job,
		"repository":   map[string]any{"full_name": repo, "name": short, "owner": map[string]any{"login": owner}},
		"organization": map[string]any{"login": org},
		"sender":       map[string]any{"login": "octocat"},
	}
	if enterprise != "" {
		p["enterprise"] = map[string]any{"slug": enterprise}
	}
	b, _ := json.Marshal(p) // maps of plain values always marshal
	return b
}

// send POSTs one delivery (twice with Repeat), unless its action is lost.
func (s *eventSender) send(action, runner string, jobID int64, body []byte) {
	for _, lost := range s.cfg.Lose {
		if lost == action {
			return
		}
	}
	guid := fmt.Sprintf("00000000-0000-4000-8000-%012d", s.guids.Add(1))
	times := 1
	if s.cfg.Repeat {
		times = 2
	}
	for range times {
		d := Delivery{ID: guid, Action: action, JobID: jobID, Runner: runner}
		d.Status, d.Error = s.post("workflow_job", guid, body)
		s.mu.Lock()
		s.delivered = append(s.delivered, d)
		s.mu.Unlock()
	}
}

// secretFor is the secret of the webhook of the delivery's organization.
func (s *eventSender) secretFor(body []byte) string {
	var p struct {
		Organization struct {
			Login string `json:"login"`
		} `json:"organization"`
	}
	if err := json.Unmarshal(body, &p); err == nil {
		if secret, ok := s.cfg.Secrets[p.Organization.Login]; ok {
			return secret
		}
	}
	return s.cfg.Secret
}

func (s *eventSender) post(event, guid string, body []byte) (int, string) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/fake")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", guid)
	req.Header.Set("X-GitHub-Hook-ID", "1")
	if secret := s.secretFor(body); secret != "" {
		req.Header.Set("X-Hub-Signature-256", SignDelivery(body, []byte(secret)))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	return resp.StatusCode, ""
}

// SignDelivery is the X-Hub-Signature-256 header GitHub sends with body.
func SignDelivery(body, secret []byte) string {
	h := hmac.New(sha256.New, secret)
	h.Write(body)
	return "sha256=" + hex.EncodeToString(h.Sum(nil))
}

// handleEventControls adds the delivery controls:
//
//	POST /_fake/events   Events -> 204 ({"url":""} stops deliveries)
//	GET  /_fake/events   -> 200 [Delivery...]
func (f *Fake) handleEventControls(mux *http.ServeMux) {
	setter(mux, "POST /_fake/events", func(req Events) error {
		for _, a := range req.Lose {
			if a != "in_progress" && a != "completed" {
				return fmt.Errorf("lose: %q is neither in_progress nor completed", a)
			}
		}
		f.DeliverEvents(req)
		return nil
	})
	mux.HandleFunc("GET /_fake/events", func(w http.ResponseWriter, _ *http.Request) {
		d := f.Deliveries()
		if d == nil {
			d = []Delivery{}
		}
		writeJSON(w, http.StatusOK, d)
	})
}

// DeliverEvents starts (or stops) the remote fake's webhook deliveries.
func (g *Remote) DeliverEvents(ctx context.Context, cfg Events) error {
	return g.do(ctx, http.MethodPost, "/_fake/events", nil, cfg, nil)
}

// Deliveries lists the remote fake's deliveries.
func (g *Remote) Deliveries(ctx context.Context) ([]Delivery, error) {
	var out []Delivery
	err := g.do(ctx, http.MethodGet, "/_fake/events", nil, nil, &out)
	if err != nil {
		return nil, fmt.Errorf("fake GitHub deliveries: %w", err)
	}
	return out, nil
}
