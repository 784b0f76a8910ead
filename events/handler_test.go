package events

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runner-guard/runner-guard/events/jobannotation"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook"
)

var testSecret = []byte("webhook-secret")

// env is an endpoint over a fake API server holding pods, with the real
// admission handler as its guard.
type env struct {
	h       *Handler
	pods    client.Client
	metrics *Metrics
}

func newEnv(t *testing.T, config string, pods ...*corev1.Pod) *env {
	t.Helper()
	cfg := webhook.DefaultConfig()
	if config != "" {
		var err error
		if cfg, err = webhook.ParseConfig([]byte(config)); err != nil {
			t.Fatal(err)
		}
	}
	b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithIndex(&corev1.Pod{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} })
	for _, p := range pods {
		b = b.WithObjects(p)
	}
	cl := b.Build()
	_, gh := fixture.FakeGitHub(t)
	guard, err := webhook.NewHandler(webhook.Options{Config: cfg, GitHub: gh, Pods: cl})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	h, err := NewHandler(Options{Secret: testSecret, Pods: cl, Guard: guard, Metrics: m, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	return &env{h: h, pods: cl, metrics: m}
}

// payload is a workflow_job delivery's body.
func payload(action, runner string, jobID int64, repo string) string {
	return fmt.Sprintf(`{"action":%q,"workflow_job":{"id":%d,"run_id":900,"run_attempt":1,"name":"build","status":%q,"runner_name":%q,"runner_id":5},"repository":{"full_name":%q},"organization":{"login":%q}}`,
		action, jobID, action, runner, repo, strings.Split(repo, "/")[0])
}

// deliver POSTs body as GitHub would, signed with secret (nil: unsigned).
func (e *env) deliver(t *testing.T, event, delivery, body string, secret []byte) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderEvent, event)
	req.Header.Set(HeaderDelivery, delivery)
	if secret != nil {
		req.Header.Set(HeaderSignature, Sign([]byte(body), secret))
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec.Code
}

func (e *env) job(t *testing.T, name string) (jobannotation.Job, bool) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := e.pods.Get(context.Background(), client.ObjectKey{Namespace: "ci", Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	return jobannotation.JobFromPod(pod, testSecret)
}

func legacyPod(name, org string) *corev1.Pod {
	return fixture.MakeLegacyRunnerPod("ci", name).Org(org).Running().Obj()
}

func TestDeliveryAnswers(t *testing.T) {
	inProgress := payload(ActionInProgress, "r-1", 42, "acme/app")
	cases := map[string]struct {
		event, body string
		secret      []byte
		sig         string // overrides the signature
		code        int
		outcome     string
		applied     bool
	}{
		"in_progress, signed":        {event: "workflow_job", body: inProgress, secret: testSecret, code: 200, outcome: OutcomeApplied, applied: true},
		"unsigned":                   {event: "workflow_job", body: inProgress, code: 401, outcome: OutcomeUnauthorized},
		"signed with another secret": {event: "workflow_job", body: inProgress, secret: []byte("guess"), code: 401, outcome: OutcomeUnauthorized},
		"signature not sha256":       {event: "workflow_job", body: inProgress, sig: "sha1=abc", code: 401, outcome: OutcomeUnauthorized},
		"signature not hex":          {event: "workflow_job", body: inProgress, sig: "sha256=zz", code: 401, outcome: OutcomeUnauthorized},
		"malformed JSON":             {event: "workflow_job", body: `{"action":`, secret: testSecret, code: 400, outcome: OutcomeMalformed},
		"no job id":                  {event: "workflow_job", body: `{"action":"in_progress","repository":{"full_name":"acme/app"}}`, secret: testSecret, code: 400, outcome: OutcomeMalformed},
		"no repository":              {event: "workflow_job", body: `{"action":"in_progress","workflow_job":{"id":1}}`, secret: testSecret, code: 400, outcome: OutcomeMalformed},
		"ping":                       {event: "ping", body: `{"zen":"hi"}`, secret: testSecret, code: 200, outcome: OutcomePing},
		"another event":              {event: "push", body: `{}`, secret: testSecret, code: 202, outcome: OutcomeIgnored},
		"queued":                     {event: "workflow_job", body: payload("queued", "", 42, "acme/app"), secret: testSecret, code: 202, outcome: OutcomeIgnored},
		"another organization's job": {event: "workflow_job", body: payload(ActionInProgress, "r-1", 42, "other/app"), secret: testSecret, code: 200, outcome: OutcomeNoPod},
		"a runner with no pod":       {event: "workflow_job", body: payload(ActionInProgress, "r-9", 42, "acme/app"), secret: testSecret, code: 200, outcome: OutcomeNoPod},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, "", legacyPod("r-1", "acme"))
			req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(c.body))
			req.Header.Set(HeaderEvent, c.event)
			req.Header.Set(HeaderDelivery, "d-1")
			switch {
			case c.sig != "":
				req.Header.Set(HeaderSignature, c.sig)
			case c.secret != nil:
				req.Header.Set(HeaderSignature, Sign([]byte(c.body), c.secret))
			}
			rec := httptest.NewRecorder()
			e.h.ServeHTTP(rec, req)
			if rec.Code != c.code {
				t.Fatalf("code = %d, want %d (%s)", rec.Code, c.code, rec.Body)
			}
			if got := testutil.ToFloat64(e.metrics.Events.WithLabelValues(eventLabel(c.event), c.outcome)); got != 1 {
				t.Fatalf("runner_guard_events_total{outcome=%q} = %v, want 1", c.outcome, got)
			}
			if _, ok := e.job(t, "r-1"); ok != c.applied {
				t.Fatalf("job annotated = %v, want %v", ok, c.applied)
			}
		})
	}
}

func TestDeliveryTooLarge(t *testing.T) {
	e := newEnv(t, "", legacyPod("r-1", "acme"))
	body := `{"action":"in_progress","pad":"` + strings.Repeat("x", MaxPayload) + `"}`
	if code := e.deliver(t, "workflow_job", "d-1", body, testSecret); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("code = %d, want 413", code)
	}
}

// A job's life: in_progress puts it on its runner's pod, completed takes it
// off; repeated, late and reordered deliveries change nothing more.
func TestDeliveriesFollowTheJob(t *testing.T) {
	e := newEnv(t, "", legacyPod("r-1", "acme"))
	if code := e.deliver(t, "workflow_job", "d-1", payload(ActionInProgress, "r-1", 42, "acme/app"), testSecret); code != 200 {
		t.Fatalf("in_progress: %d", code)
	}
	job, ok := e.job(t, "r-1")
	if !ok || job.JobID != 42 || job.Repository != "acme/app" || job.RunID != 900 || job.Name != "build" {
		t.Fatalf("job = %+v, %v", job, ok)
	}
	// The same delivery again is answered, not applied: the pod is not patched.
	var before corev1.Pod
	_ = e.pods.Get(context.Background(), client.ObjectKey{Namespace: "ci", Name: "r-1"}, &before)
	e.deliver(t, "workflow_job", "d-1", payload(ActionInProgress, "r-1", 42, "acme/app"), testSecret)
	if got := testutil.ToFloat64(e.metrics.Events.WithLabelValues("workflow_job", OutcomeDuplicate)); got != 1 {
		t.Fatalf("duplicates = %v, want 1", got)
	}
	// A completed of another job leaves this one.
	e.deliver(t, "workflow_job", "d-2", payload(ActionCompleted, "r-1", 41, "acme/app"), testSecret)
	if _, ok := e.job(t, "r-1"); !ok {
		t.Fatal("a completed of another job removed the annotation")
	}
	e.deliver(t, "workflow_job", "d-3", payload(ActionCompleted, "r-1", 42, "acme/app"), testSecret)
	if _, ok := e.job(t, "r-1"); ok {
		t.Fatal("completed left the annotation")
	}
	// A late in_progress (reordered, or redelivered by hand) does not put it back.
	e.deliver(t, "workflow_job", "d-4", payload(ActionInProgress, "r-1", 42, "acme/app"), testSecret)
	if _, ok := e.job(t, "r-1"); ok {
		t.Fatal("a late in_progress put a completed job back")
	}
}

// Scopes: the runner's scope and the namespace's binding must both cover the
// job's repository.
func TestDeliveryScopes(t *testing.T) {
	bindings := `
scopeBindings:
- namespaces: ["ci"]
  scopes: ["repo:acme/app"]
`
	cases := map[string]struct {
		config, podOrg, podRepo, repo string
		applied                       bool
	}{
		"org runner, open bindings":               {podOrg: "acme", repo: "acme/app", applied: true},
		"org runner, another org's job":           {podOrg: "acme", repo: "evil/app", applied: false},
		"repo runner, its repository":             {podRepo: "acme/app", repo: "acme/app", applied: true},
		"repo runner, another repository":         {podRepo: "acme/app", repo: "acme/other", applied: false},
		"bound repo runner, bound repository":     {config: bindings, podRepo: "acme/app", repo: "acme/app", applied: true},
		"org runner outside the namespace's bind": {config: bindings, podOrg: "acme", repo: "acme/app", applied: false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			pw := fixture.MakeLegacyRunnerPod("ci", "r-1").Running()
			if c.podOrg != "" {
				pw = pw.Org(c.podOrg)
			} else {
				pw = pw.Repo(c.podRepo)
			}
			e := newEnv(t, c.config, pw.Obj())
			if code := e.deliver(t, "workflow_job", "d", payload(ActionInProgress, "r-1", 1, c.repo), testSecret); code != 200 {
				t.Fatalf("code %d", code)
			}
			if _, ok := e.job(t, "r-1"); ok != c.applied {
				t.Fatalf("applied = %v, want %v", ok, c.applied)
			}
		})
	}
}

func TestRecentIsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRecent(3, func() time.Time { return now })
	for i := range 10 {
		if !r.add(fmt.Sprint(i)) {
			t.Fatalf("%d not new", i)
		}
	}
	if r.add("9") || r.has("0") || !r.has("7") || !r.has("8") {
		t.Fatalf("after 10 keys in a memory of 3: 9 new again %v, has 0 %v, has 7 %v, has 8 %v", !r.has("9"), r.has("0"), r.has("7"), r.has("8"))
	}
	now = now.Add(rememberFor)
	if r.has("9") || !r.add("9") {
		t.Fatal("a key is still remembered after rememberFor")
	}
}
