package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook"
)

var testSecret = []byte("webhook-secret")

// anySig is a well-formed signature no secret makes.
var anySig = "sha256=" + strings.Repeat("0", 64)

// t0 is the clock of the tests' deliveries and secrets.
var t0 = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

// env is an endpoint over a fake API server holding pods, with the real
// admission handler as its guard.
type env struct {
	h       *Handler
	pods    client.Client
	keys    *jobannotation.Keyring
	metrics *Metrics
	opts    Options
}

// every is the one secret of --github-webhook-secret-file, for every scope.
func every(secret []byte) []Secret {
	return []Secret{{Secret: jobannotation.Secret{Value: secret}}}
}

// scoped is a secret named name for scopes.
func scoped(t *testing.T, name, secret string, scopes ...string) Secret {
	t.Helper()
	s := Secret{Secret: jobannotation.Secret{Name: name, Value: []byte(secret)}, Scopes: []ghclient.ScopePattern{}}
	for _, sc := range scopes {
		p, err := ghclient.ParseScopePattern(sc)
		if err != nil {
			t.Fatal(err)
		}
		s.Scopes = append(s.Scopes, p)
	}
	return s
}

func newEnv(t *testing.T, config string, secrets []Secret, pods ...*corev1.Pod) *env {
	t.Helper()
	cfg := webhook.DefaultConfig()
	if config != "" {
		var err error
		if cfg, err = webhook.ParseConfig([]byte(config)); err != nil {
			t.Fatal(err)
		}
	}
	if secrets == nil {
		secrets = every(testSecret)
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
	ks := make([]jobannotation.Secret, len(secrets))
	for i, s := range secrets {
		ks[i] = s.Secret
	}
	keys, err := jobannotation.NewKeyring(ks, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	e := &env{pods: cl, keys: keys, metrics: NewMetrics(),
		opts: Options{Secrets: secrets, Keys: keys, Pods: cl, Guard: guard, Log: logr.Discard(), Now: func() time.Time { return t0 }}}
	e.restart(t)
	return e
}

// restart builds the endpoint anew over the same pods: a new replica, or
// this one restarted, remembering no delivery.
func (e *env) restart(t *testing.T) {
	t.Helper()
	e.opts.Metrics = e.metrics
	h, err := NewHandler(e.opts)
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
}

// payload is a workflow_job delivery's body; the job started at minute
// jobID after t0 and completed a minute later.
func payload(action, runner string, jobID int64, repo string) string {
	started := t0.Add(time.Duration(jobID) * time.Minute)
	completed := "null"
	if action == ActionCompleted {
		completed = fmt.Sprintf("%q", started.Add(time.Minute).Format(time.RFC3339))
	}
	return fmt.Sprintf(`{"action":%q,"workflow_job":{"id":%d,"run_id":900,"run_attempt":1,"name":"build","status":%q,"runner_name":%q,"runner_id":5,"started_at":%q,"completed_at":%s},"repository":{"full_name":%q},"organization":{"login":%q}}`,
		action, jobID, action, runner, started.Format(time.RFC3339), completed, repo, strings.Split(repo, "/")[0])
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

// record is the verified record on pod name.
func (e *env) record(t *testing.T, name string) (jobannotation.Record, bool) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := e.pods.Get(context.Background(), client.ObjectKey{Namespace: "ci", Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	r, err := e.keys.Read(pod)
	return r, err == nil
}

// job is the job in progress the pod's record holds.
func (e *env) job(t *testing.T, name string) (jobannotation.Job, bool) {
	t.Helper()
	r, ok := e.record(t, name)
	return r.Job, ok && r.Running()
}

func (e *env) outcomes(event, outcome string) float64 {
	return testutil.ToFloat64(e.metrics.Events.WithLabelValues(eventLabel(event), outcome))
}

func legacyPod(name, org string) *corev1.Pod {
	return fixture.MakeLegacyRunnerPod("ci", name).Org(org).Running().Obj()
}

// unread is a body that fails the test if it is read.
type unread struct{ t *testing.T }

func (u unread) Read([]byte) (int, error) {
	u.t.Error("the body was read")
	return 0, io.EOF
}

func TestDeliveryAnswers(t *testing.T) {
	inProgress := payload(ActionInProgress, "r-1", 42, "acme/app")
	cases := map[string]struct {
		method, event, body, contentType string
		secret                           []byte
		sig                              string // overrides the signature
		unreadBody                       bool   // answered before the body is read
		contentLength                    int64  // overrides the header
		code                             int
		outcome                          string
		applied                          bool
	}{
		"in_progress, signed":            {event: "workflow_job", body: inProgress, secret: testSecret, code: 200, outcome: OutcomeApplied, applied: true},
		"unsigned":                       {event: "workflow_job", unreadBody: true, code: 401, outcome: OutcomeUnauthorized},
		"signed with another secret":     {event: "workflow_job", body: inProgress, secret: []byte("guess"), code: 401, outcome: OutcomeUnauthorized},
		"signature not sha256":           {event: "workflow_job", unreadBody: true, sig: "sha1=abc", code: 401, outcome: OutcomeUnauthorized},
		"signature not hex":              {event: "workflow_job", unreadBody: true, sig: "sha256=zz", code: 401, outcome: OutcomeUnauthorized},
		"a GET":                          {method: http.MethodGet, event: "workflow_job", unreadBody: true, code: 405, outcome: OutcomeMalformed},
		"no event header":                {unreadBody: true, sig: anySig, code: 400, outcome: OutcomeMalformed},
		"form-encoded":                   {event: "workflow_job", contentType: "application/x-www-form-urlencoded", unreadBody: true, sig: anySig, code: 415, outcome: OutcomeMalformed},
		"Content-Length over the cap":    {event: "workflow_job", unreadBody: true, sig: anySig, contentLength: 1 << 30, code: 413, outcome: OutcomeTooLarge},
		"another event, unread":          {event: "push", unreadBody: true, code: 202, outcome: OutcomeIgnored},
		"malformed JSON":                 {event: "workflow_job", body: `{"action":`, secret: testSecret, code: 400, outcome: OutcomeMalformed},
		"no job id":                      {event: "workflow_job", body: `{"action":"in_progress","repository":{"full_name":"acme/app"}}`, secret: testSecret, code: 400, outcome: OutcomeMalformed},
		"no started_at":                  {event: "workflow_job", body: `{"action":"in_progress","workflow_job":{"id":1,"runner_name":"r-1"},"repository":{"full_name":"acme/app"}}`, secret: testSecret, code: 400, outcome: OutcomeMalformed},
		"no repository":                  {event: "workflow_job", body: `{"action":"in_progress","workflow_job":{"id":1,"started_at":"2026-12-06T10:00:00Z"}}`, secret: testSecret, code: 400, outcome: OutcomeMalformed},
		"no action":                      {event: "workflow_job", body: `{"workflow_job":{"id":1}}`, secret: testSecret, code: 400, outcome: OutcomeMalformed},
		"ping":                           {event: "ping", body: `{"zen":"hi"}`, secret: testSecret, code: 200, outcome: OutcomePing},
		"queued":                         {event: "workflow_job", body: payload("queued", "", 42, "acme/app"), secret: testSecret, code: 202, outcome: OutcomeIgnored},
		"an unknown action":              {event: "workflow_job", body: payload("rerequested", "r-1", 42, "acme/app"), secret: testSecret, code: 202, outcome: OutcomeIgnored},
		"another organization's job":     {event: "workflow_job", body: payload(ActionInProgress, "r-1", 42, "other/app"), secret: testSecret, code: 200, outcome: OutcomeNoPod},
		"a runner with no pod":           {event: "workflow_job", body: payload(ActionInProgress, "r-9", 42, "acme/app"), secret: testSecret, code: 200, outcome: OutcomeNoPod},
		"a job naming no runner":         {event: "workflow_job", body: payload(ActionInProgress, "", 42, "acme/app"), secret: testSecret, code: 200, outcome: OutcomeNoPod},
		"chunked body over the cap":      {event: "workflow_job", body: `{"pad":"` + strings.Repeat("x", MaxPayload) + `"}`, secret: testSecret, contentLength: -1, code: 413, outcome: OutcomeTooLarge},
		"application/json with charset":  {event: "workflow_job", contentType: "application/json; charset=utf-8", body: inProgress, secret: testSecret, code: 200, outcome: OutcomeApplied, applied: true},
		"completed with no in_progress ": {event: "workflow_job", body: payload(ActionCompleted, "r-1", 42, "acme/app"), secret: testSecret, code: 200, outcome: OutcomeApplied},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, "", nil, legacyPod("r-1", "acme"))
			method := c.method
			if method == "" {
				method = http.MethodPost
			}
			var body io.Reader = strings.NewReader(c.body)
			if c.unreadBody {
				body = unread{t}
			}
			req := httptest.NewRequest(method, Path, body)
			if c.contentLength != 0 {
				req.ContentLength = c.contentLength
			}
			if c.contentType == "" {
				c.contentType = "application/json"
			}
			req.Header.Set("Content-Type", c.contentType)
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
			if got := e.outcomes(c.event, c.outcome); got != 1 {
				t.Fatalf("runner_guard_events_total{outcome=%q} = %v, want 1", c.outcome, got)
			}
			if _, ok := e.job(t, "r-1"); ok != c.applied {
				t.Fatalf("job in progress on the pod = %v, want %v", ok, c.applied)
			}
		})
	}
}

// A job's life: in_progress puts it on its runner's pod, completed records
// its end; repeated, replayed, late and reordered deliveries change nothing
// more, on this replica, another one or after a restart.
func TestDeliveriesFollowTheJob(t *testing.T) {
	e := newEnv(t, "", nil, legacyPod("r-1", "acme"))
	send := func(delivery, action string, job int64) int {
		return e.deliver(t, "workflow_job", delivery, payload(action, "r-1", job, "acme/app"), testSecret)
	}
	if code := send("d-1", ActionInProgress, 42); code != 200 {
		t.Fatalf("in_progress: %d", code)
	}
	job, ok := e.job(t, "r-1")
	if !ok || job.JobID != 42 || job.Repository != "acme/app" || job.RunID != 900 || job.Name != "build" {
		t.Fatalf("job = %+v, %v", job, ok)
	}
	send("d-1", ActionInProgress, 42)
	if got := e.outcomes("workflow_job", OutcomeDuplicate); got != 1 {
		t.Fatalf("duplicates = %v, want 1", got)
	}
	// An older job's completed leaves this one.
	send("d-2", ActionCompleted, 41)
	if _, ok := e.job(t, "r-1"); !ok {
		t.Fatal("an older job's completed removed the job")
	}
	send("d-3", ActionCompleted, 42)
	if r, ok := e.record(t, "r-1"); !ok || r.Running() || r.JobID != 42 {
		t.Fatalf("after completed: record %+v (verifies %v), want job 42 completed", r, ok)
	}
	for name, replay := range map[string]func(){
		"replayed with a fresh delivery ID": func() { send("d-4", ActionInProgress, 42) },
		"after a restart":                   func() { e.restart(t); send("d-1", ActionInProgress, 42) },
		"an older job":                      func() { send("d-5", ActionInProgress, 40) },
	} {
		replay()
		if _, ok := e.job(t, "r-1"); ok {
			t.Fatalf("%s: an in_progress put a completed job back", name)
		}
	}
	if got := e.outcomes("workflow_job", OutcomeStale); got != 4 {
		t.Fatalf("stale = %v, want 4", got)
	}
	// The runner's next job is held.
	send("d-6", ActionInProgress, 43)
	if job, ok := e.job(t, "r-1"); !ok || job.JobID != 43 {
		t.Fatalf("next job: %+v, %v", job, ok)
	}
}

// A job that started before its runner's pod existed ran on an earlier pod
// of the same name: its in_progress, replayed, holds nothing here.
func TestJobOlderThanThePodIsStale(t *testing.T) {
	pod := legacyPod("r-1", "acme")
	pod.CreationTimestamp = metav1.NewTime(t0.Add(time.Hour))
	e := newEnv(t, "", nil, pod)
	if code := e.deliver(t, "workflow_job", "d-1", payload(ActionInProgress, "r-1", 1, "acme/app"), testSecret); code != 200 {
		t.Fatalf("code %d", code)
	}
	if _, ok := e.job(t, "r-1"); ok || e.outcomes("workflow_job", OutcomeStale) != 1 {
		t.Fatalf("a job started an hour before the pod: held %v, stale %v", ok, e.outcomes("workflow_job", OutcomeStale))
	}
	if code := e.deliver(t, "workflow_job", "d-2", payload(ActionInProgress, "r-1", 61, "acme/app"), testSecret); code != 200 {
		t.Fatalf("code %d", code)
	}
	if _, ok := e.job(t, "r-1"); !ok {
		t.Fatal("a job started after the pod is not held")
	}
}

// Concurrent deliveries of a runner's jobs, in any order, leave the record
// of its last job's end: every write is conditional on what it read.
func TestConcurrentDeliveriesConverge(t *testing.T) {
	e := newEnv(t, "", nil, legacyPod("r-1", "acme"))
	var wg sync.WaitGroup
	for job := int64(1); job <= 20; job++ {
		for i, action := range []string{ActionCompleted, ActionInProgress} {
			wg.Go(func() {
				if code := e.deliver(t, "workflow_job", fmt.Sprintf("d-%d-%d", job, i), payload(action, "r-1", job, "acme/app"), testSecret); code != 200 {
					t.Errorf("job %d %s: %d", job, action, code)
				}
			})
		}
	}
	wg.Wait()
	if r, ok := e.record(t, "r-1"); !ok || r.JobID != 20 || r.Running() {
		t.Fatalf("record %+v (verifies %v), want job 20 completed", r, ok)
	}
}

// One secret per webhook: a delivery speaks only for its secret's scopes.
func TestDeliveryScopesOfTheSecret(t *testing.T) {
	orgA := scoped(t, "org-a", "secret-a", "org:org-a")
	orgB := scoped(t, "org-b", "secret-b", "org:org-b")
	appOnly := scoped(t, "app", "secret-app", "repo:org-a/app")
	pods := []*corev1.Pod{legacyPod("a-1", "org-a"), legacyPod("b-1", "org-b")}
	cases := map[string]struct {
		secret        []byte
		runner, repo  string
		code          int
		outcome       string
		appliedRunner string
	}{
		"org-a's secret, org-a's runner":      {secret: []byte("secret-a"), runner: "a-1", repo: "org-a/app", code: 200, outcome: OutcomeApplied, appliedRunner: "a-1"},
		"org-a's secret naming org-b":         {secret: []byte("secret-a"), runner: "b-1", repo: "org-b/app", code: 401, outcome: OutcomeWrongScope},
		"org-a's secret, org-b's runner":      {secret: []byte("secret-a"), runner: "b-1", repo: "org-a/app", code: 200, outcome: OutcomeNoPod},
		"a repository's secret, org runner":   {secret: []byte("secret-app"), runner: "a-1", repo: "org-a/app", code: 200, outcome: OutcomeNoPod},
		"a repository's secret, another repo": {secret: []byte("secret-app"), runner: "a-1", repo: "org-a/other", code: 401, outcome: OutcomeWrongScope},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var cp []*corev1.Pod
			for _, p := range pods {
				cp = append(cp, p.DeepCopy())
			}
			e := newEnv(t, "", []Secret{orgA, orgB, appOnly}, cp...)
			if code := e.deliver(t, "workflow_job", "d", payload(ActionInProgress, c.runner, 7, c.repo), c.secret); code != c.code {
				t.Fatalf("code = %d, want %d", code, c.code)
			}
			if got := e.outcomes("workflow_job", c.outcome); got != 1 {
				t.Fatalf("outcome %q counted %v, want 1", c.outcome, got)
			}
			for _, p := range pods {
				if _, ok := e.job(t, p.Name); ok != (p.Name == c.appliedRunner) {
					t.Fatalf("pod %s holds a job: %v", p.Name, ok)
				}
			}
		})
	}
}

// A rotated secret's previous value is accepted until its window ends.
func TestRotatedSecret(t *testing.T) {
	cases := map[string]struct {
		until time.Time
		code  int
	}{
		"inside the window": {until: t0.Add(time.Hour), code: 200},
		"after the window":  {until: t0.Add(-time.Hour), code: 401},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := scoped(t, "acme", "s2", "org:acme")
			s.Previous, s.PreviousUntil = []byte("s1"), c.until
			e := newEnv(t, "", []Secret{s}, legacyPod("r-1", "acme"))
			if code := e.deliver(t, "workflow_job", "d", payload(ActionInProgress, "r-1", 1, "acme/app"), []byte("s1")); code != c.code {
				t.Fatalf("signed with the previous value: %d, want %d", code, c.code)
			}
		})
	}
}

// Deliveries in flight are bounded: one more is answered 503 with
// Retry-After, without its body being read.
func TestDeliveriesInFlightAreBounded(t *testing.T) {
	e := newEnv(t, "", nil, legacyPod("r-1", "acme"))
	e.opts.MaxInFlight, e.opts.SlotWait = 1, -1
	e.restart(t)
	pr, pw := io.Pipe()
	first := httptest.NewRequest(http.MethodPost, Path, pr)
	first.Header.Set("Content-Type", "application/json")
	first.Header.Set(HeaderEvent, "workflow_job")
	first.Header.Set(HeaderSignature, anySig)
	done := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, first)
		done <- rec.Code
	}()
	// The first holds its slot while it reads: wait until it does.
	if _, err := pw.Write([]byte("{")); err != nil {
		t.Fatal(err)
	}
	second := httptest.NewRequest(http.MethodPost, Path, unread{t})
	second.Header = first.Header.Clone()
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, second)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("second: %d, Retry-After %q; want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	pw.CloseWithError(errors.New("sender gone"))
	if code := <-done; code != http.StatusBadRequest {
		t.Fatalf("first: %d, want 400", code)
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
			e := newEnv(t, c.config, nil, pw.Obj())
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
	if r.add("9") || !r.add("0") {
		t.Fatal("after 10 keys in a memory of 3: 9 is new again, or 0 is remembered")
	}
	now = now.Add(rememberFor)
	if !r.add("9") {
		t.Fatal("a key is still remembered after rememberFor")
	}
}
