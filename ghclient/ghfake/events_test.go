package ghfake

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/runner-guard/runner-guard/ghclient"
)

// received is what a webhook receiver saw: each delivery's ID (its last
// digit) and action, checked against the signature.
type received struct {
	mu   sync.Mutex
	got  []string
	bad  int
	body map[string]any
}

func receiver(t *testing.T, secret string) (*received, string) {
	t.Helper()
	rec := &received{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if r.Header.Get("X-Hub-Signature-256") != SignDelivery(body, []byte(secret)) || r.Header.Get("X-GitHub-Event") != "workflow_job" {
			rec.bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var p map[string]any
		_ = json.Unmarshal(body, &p)
		rec.body = p
		guid := r.Header.Get("X-GitHub-Delivery")
		rec.got = append(rec.got, guid[len(guid)-1:]+" "+p["action"].(string))
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

func TestEventsFollowBusy(t *testing.T) {
	org, _ := ghclient.OrgScope("acme")
	cases := map[string]struct {
		cfg  Events
		want []string
	}{
		"in order":         {Events{}, []string{"1 in_progress", "2 completed"}},
		"completed lost":   {Events{Lose: []string{"completed"}}, []string{"1 in_progress"}},
		"in_progress lost": {Events{Lose: []string{"in_progress"}}, []string{"1 completed"}},
		"repeated":         {Events{Repeat: true}, []string{"1 in_progress", "1 in_progress", "2 completed", "2 completed"}},
		"reordered":        {Events{Reorder: true}, []string{"1 completed", "2 in_progress"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := New()
			f.AddRunner(org, "r-1")
			rec, url := receiver(t, "s")
			c.cfg.URL, c.cfg.Secret = url, "s"
			f.DeliverEvents(c.cfg)
			f.SetBusy(org, "r-1", true)
			f.SetBusy(org, "r-1", true) // no change: no delivery
			f.SetBusy(org, "r-1", false)
			if !slices.Equal(rec.got, c.want) {
				t.Fatalf("deliveries %q, want %q", rec.got, c.want)
			}
			if rec.bad != 0 {
				t.Fatalf("%d deliveries failed the signature", rec.bad)
			}
			for _, d := range f.Deliveries() {
				if d.Status != http.StatusOK {
					t.Fatalf("delivery %+v not answered 200", d)
				}
			}
		})
	}
}

func TestEventPayload(t *testing.T) {
	org, _ := ghclient.OrgScope("acme")
	f := New()
	id := f.AddRunner(org, "r-1")
	rec, url := receiver(t, "s")
	f.DeliverEvents(Events{URL: url, Secret: "s"})
	f.SetBusy(org, "r-1", true)
	job := rec.body["workflow_job"].(map[string]any)
	if job["runner_name"] != "r-1" || int64(job["runner_id"].(float64)) != id || job["id"].(float64) <= 0 || job["status"] != "in_progress" {
		t.Fatalf("workflow_job = %v", job)
	}
	if repo := rec.body["repository"].(map[string]any)["full_name"]; repo != "acme/app" {
		t.Fatalf("repository = %v", repo)
	}
}

// A runner holding a workflow run's job (AddJob) is delivered that job, as
// GitHub delivers it: its ID, run, attempt, name and repository.
func TestEventPayloadNamesTheRunsJob(t *testing.T) {
	org, _ := ghclient.OrgScope("acme")
	f := New()
	f.AddRunner(org, "r-1")
	run := f.AddRun("acme/api", "ci")
	jobID, err := f.AddJob(run, "test", "r-1")
	if err != nil {
		t.Fatal(err)
	}
	rec, url := receiver(t, "s")
	f.DeliverEvents(Events{URL: url, Secret: "s"})
	f.SetBusy(org, "r-1", true)
	job := rec.body["workflow_job"].(map[string]any)
	if int64(job["id"].(float64)) != jobID || int64(job["run_id"].(float64)) != run || job["run_attempt"].(float64) != 1 || job["name"] != "test" {
		t.Fatalf("workflow_job = %v, want job %d of run %d", job, jobID, run)
	}
	if repo := rec.body["repository"].(map[string]any)["full_name"]; repo != "acme/api" {
		t.Fatalf("repository = %v, want the run's", repo)
	}
	f.SetBusy(org, "r-1", false)
	if job := rec.body["workflow_job"].(map[string]any); rec.body["action"] != "completed" || int64(job["id"].(float64)) != jobID {
		t.Fatalf("completed delivery %v, want job %d", rec.body, jobID)
	}
}
