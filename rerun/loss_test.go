package rerun

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook"
)

// fakeGuard answers as a webhook.Handler whose bindings allow the patterns
// in bound (none: every scope is open) and whose pods resolve to res.
type fakeGuard struct {
	bound []string
	res   webhook.Resolved
	err   error
}

func (g fakeGuard) RunnerContainer(*corev1.Pod) (string, bool) { return "runner", true }

func (g fakeGuard) Resolve(context.Context, *corev1.Pod) (webhook.Resolved, error) {
	return g.res, g.err
}

func (g fakeGuard) ScopeBound(_ *corev1.Pod, scope ghclient.Scope) bool {
	for _, b := range g.bound {
		if p, err := ghclient.ParseScopePattern(b); err == nil && p.Matches(scope) {
			return true
		}
	}
	return len(g.bound) == 0
}

// cached is the lost-job watch's cache of EphemeralRunners: no Nodes.
type cached map[types.NamespacedName]*unstructured.Unstructured

func (c cached) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if u, ok := obj.(*unstructured.Unstructured); ok && c[key] != nil {
		c[key].DeepCopyInto(u)
		return nil
	}
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

func (c cached) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

const recordsNamespace = "runner-guard-system"

// lossHarness is a lost-job watch over a fake API server and a fake GitHub.
type lossHarness struct {
	w       *lossWatch
	api     client.Client
	events  *events.FakeRecorder
	metrics *Metrics
}

// testNow is the clock of the watch and the reconciler under test.
func testNow() time.Time { return time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC) }

func newLossHarness(t *testing.T, g Guard, arcCreds bool, exclude Exclusions, ers ...*unstructured.Unstructured) *lossHarness {
	t.Helper()
	c := cached{}
	for _, er := range ers {
		c[types.NamespacedName{Namespace: er.GetNamespace(), Name: er.GetName()}] = er
	}
	api := fake.NewClientBuilder().Build()
	h := &lossHarness{api: api, events: events.NewFakeRecorder(20), metrics: NewMetrics(nil)}
	h.w = newLossWatch(Options{Namespace: recordsNamespace, Guard: g, ARCCredentials: arcCreds, JobKeys: fixture.JobKeys(t, "events-secret"),
		Exclude: exclude, Events: h.events, Metrics: h.metrics, Log: logr.Discard(), Now: testNow}, c, api, api, true)
	return h
}

// lose hands the deleted pod to the watch and runs its reconcile.
func (h *lossHarness) lose(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	l, ok := h.w.lost(context.Background(), pod)
	if !ok {
		return
	}
	k := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	h.w.pending[k] = l
	if _, err := h.w.Reconcile(context.Background(), reconcile.Request{NamespacedName: k}); err != nil {
		t.Fatal(err)
	}
}

func (h *lossHarness) records(t *testing.T) []Record {
	t.Helper()
	var list corev1.ConfigMapList
	if err := h.api.List(context.Background(), &list, client.InNamespace(recordsNamespace)); err != nil {
		t.Fatal(err)
	}
	var out []Record
	for i := range list.Items {
		rec, err := parseRecord(&list.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

func (h *lossHarness) counted(cause Cause, o Outcome) float64 {
	return testutil.ToFloat64(h.metrics.lost.WithLabelValues(string(cause), string(o)))
}

// A lost job is recorded only inside the runner's scope and the
// namespace's binding, for the pod's own EphemeralRunner, and not when the
// pod or rerun.exclude opted out; a loss not recorded is counted and said.
func TestLossRecordedInsideTheBinding(t *testing.T) {
	runner := func(configURL, repo string) *fixture.EphemeralRunnerWrapper {
		return fixture.MakeEphemeralRunner("ci", "runner-1").ConfigURL(configURL).ConfigSecret("gh-org-a").
			Field(repo, "status", "jobRepositoryName").Field(int64(77), "status", "workflowRunId")
	}
	scaleSetPod := func(er *fixture.EphemeralRunnerWrapper) *fixture.PodWrapper {
		return fixture.MakeScaleSetRunnerPod("ci", "runner-1").OwnedByEphemeralRunner(er)
	}
	legacyPod := func(repo string, jobID int64) *corev1.Pod {
		pod := fixture.MakeLegacyRunnerPod("ci", "legacy-1").Obj()
		pod.Annotations = map[string]string{AnnotationJob: fixture.JobAnnotation(t, "events-secret",
			jobannotation.Job{Repository: repo, RunID: 88, Attempt: 2, JobID: jobID, Name: "build"}, jobannotation.StateInProgress, string(pod.UID))}
		return pod
	}
	annotate := func(pod *corev1.Pod, repo string, run, jobID int64) *corev1.Pod {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[AnnotationJob] = fixture.JobAnnotation(t, "events-secret",
			jobannotation.Job{Repository: repo, RunID: run, Attempt: 2, JobID: jobID, Name: "build"}, jobannotation.StateInProgress, string(pod.UID))
		return pod
	}
	orgA, _ := ghclient.OrgScope("org-a")
	orgB, _ := ghclient.OrgScope("org-b")
	exclude, _ := ParseExclusions([]string{"org-a/legacy-*"})
	tests := map[string]struct {
		er         *fixture.EphemeralRunnerWrapper
		pod        *corev1.Pod
		guard      fakeGuard
		arcCreds   bool
		staticBase string
		want       *Record // nil: nothing recorded
		outcome    Outcome // counted at once when nothing is recorded ("": not a loss)
		says       string
	}{
		"a tenant's EphemeralRunner names another organization's repository": {
			er: runner("https://github.com/org-a", "org-b/app"), guard: fakeGuard{bound: []string{"org:org-a"}},
			outcome: OutcomeUnnamed, says: "outside the runner's scope"},
		"the same with ARC's credentials": {
			er: runner("https://github.com/org-a", "org-b/app"), guard: fakeGuard{bound: []string{"org:org-a"}}, arcCreds: true,
			outcome: OutcomeUnnamed, says: "outside the runner's scope"},
		"a runner of another organization in a namespace bound to org-a": {
			er: runner("https://github.com/org-b", "org-b/app"), guard: fakeGuard{bound: []string{"org:org-a"}},
			outcome: OutcomeUnnamed, says: "scope binding"},
		"an EphemeralRunner that is not the pod's controller": {
			er:      runner("https://github.com/org-a", "org-a/app"),
			pod:     fixture.MakeScaleSetRunnerPod("ci", "runner-1").OwnedByEphemeralRunner(runner("https://github.com/org-a", "org-a/app").UID("uid-other")).Obj(),
			outcome: OutcomeUnnamed, says: "not the pod's controller"},
		"a pod that only shares its name with an EphemeralRunner": {
			er: runner("https://github.com/org-a", "org-a/app"), pod: fixture.MakeScaleSetRunnerPod("ci", "runner-1").Obj()},
		"the pod opted out": {
			er:      runner("https://github.com/org-a", "org-a/app"),
			pod:     scaleSetPod(runner("https://github.com/org-a", "org-a/app")).Annotation(AnnotationRerun, "false").Obj(),
			outcome: OutcomeExcluded, says: AnnotationRerun},
		"rerun.exclude names the repository": {
			er: runner("https://github.com/org-a", "org-a/legacy-app"), outcome: OutcomeExcluded, says: "org-a/legacy-*"},
		"inside the binding, static credentials": {
			er: runner("https://github.com/org-a", "org-a/app"), guard: fakeGuard{bound: []string{"org:org-a"}},
			want: &Record{Job: Job{Repository: "org-a/app", RunID: 77, Runner: "runner-1"}, Credentials: CredentialsRef{Mode: CredentialsStatic}}},
		"inside the binding, ARC's credentials": {
			er: runner("https://github.com/org-a", "org-a/app"), guard: fakeGuard{bound: []string{"repo:org-a/app"}}, arcCreds: true,
			want: &Record{Job: Job{Repository: "org-a/app", RunID: 77, Runner: "runner-1"},
				Credentials: CredentialsRef{Mode: CredentialsARC, Secret: types.NamespacedName{Namespace: "ci", Name: "gh-org-a"}, BaseURL: "https://api.github.com/"}}},
		"a legacy pod's verified job, inside its runner's scope": {
			pod: legacyPod("org-a/app", 9002), guard: fakeGuard{res: webhook.Resolved{Runner: ghclient.Runner{Scope: orgA, Name: "legacy-1"}}},
			want: &Record{Job: Job{Repository: "org-a/app", RunID: 88, Runner: "legacy-1", ID: 9002}, Attempt: 2, JobID: 9002, Credentials: CredentialsRef{Mode: CredentialsStatic}}},
		"a scale-set pod's verified job annotation names its job ID": {
			er: runner("https://github.com/org-a", "org-a/app"), guard: fakeGuard{bound: []string{"org:org-a"}},
			pod:  annotate(scaleSetPod(runner("https://github.com/org-a", "org-a/app")).Obj(), "org-a/app", 77, 5001),
			want: &Record{Job: Job{Repository: "org-a/app", RunID: 77, Runner: "runner-1", ID: 5001}, Attempt: 2, JobID: 5001, Credentials: CredentialsRef{Mode: CredentialsStatic}}},
		"an annotation of another run than the EphemeralRunner's": {
			er: runner("https://github.com/org-a", "org-a/app"), guard: fakeGuard{bound: []string{"org:org-a"}},
			pod:  annotate(scaleSetPod(runner("https://github.com/org-a", "org-a/app")).Obj(), "org-a/app", 78, 5001),
			want: &Record{Job: Job{Repository: "org-a/app", RunID: 77, Runner: "runner-1"}, Credentials: CredentialsRef{Mode: CredentialsStatic}}},
		"an annotated scale-set pod whose EphemeralRunner is gone, ARC's credentials": {
			pod:      annotate(scaleSetPod(runner("https://github.com/org-a", "org-a/app")).Obj(), "org-a/app", 77, 5001),
			arcCreds: true, outcome: OutcomeUnnamed, says: "credentials that reach its job are unknown"},
		"a runner of another GitHub, static credentials": {
			er: runner("https://ghes.example.com/org-a", "org-a/app"), staticBase: "https://api.github.com/",
			outcome: OutcomeUnnamed, says: "registered at https://ghes.example.com/api/v3"},
		"a runner of the GitHub the static credentials reach": {
			er: runner("https://ghes.example.com/org-a", "org-a/app"), staticBase: "https://ghes.example.com/api/v3",
			want: &Record{Job: Job{Repository: "org-a/app", RunID: 77, Runner: "runner-1"}, Credentials: CredentialsRef{Mode: CredentialsStatic}}},
		"ARC's credentials, and no Secret named": {
			er: runner("https://github.com/org-a", "org-a/app").ConfigSecret(""), arcCreds: true,
			outcome: OutcomeUnnamed, says: "no spec.githubConfigSecret"},
		"a legacy pod's job outside its runner's scope": {
			pod: legacyPod("org-a/app", 9002), guard: fakeGuard{res: webhook.Resolved{Runner: ghclient.Runner{Scope: orgB, Name: "legacy-1"}}},
			outcome: OutcomeUnnamed, says: "outside the runner's scope"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ers []*unstructured.Unstructured
			if tc.er != nil {
				ers = append(ers, tc.er.Obj())
			}
			h := newLossHarness(t, tc.guard, tc.arcCreds, exclude, ers...)
			h.w.staticBase = tc.staticBase
			pod := tc.pod
			if pod == nil {
				pod = scaleSetPod(tc.er).Obj()
			}
			h.lose(t, pod)
			recs := h.records(t)
			switch {
			case tc.want == nil && len(recs) != 0:
				t.Fatalf("recorded %+v", recs)
			case tc.want != nil && len(recs) != 1:
				t.Fatalf("%d records, want 1", len(recs))
			case tc.want != nil:
				got := recs[0]
				if got.Job != tc.want.Job || got.Credentials != tc.want.Credentials || got.Attempt != tc.want.Attempt || got.JobID != tc.want.JobID || got.State != StateWaiting {
					t.Errorf("record %+v, want %+v", got, *tc.want)
				}
			}
			if tc.outcome != "" {
				if n := h.counted(CauseDeleted, tc.outcome); n != 1 {
					t.Errorf("counted %v %s, want 1", n, tc.outcome)
				}
				select {
				case e := <-h.events.Events:
					if !strings.Contains(e, string(tc.outcome)) || !strings.Contains(e, tc.says) {
						t.Errorf("Event %q, want it to say %s and %q", e, tc.outcome, tc.says)
					}
				default:
					t.Error("no Event")
				}
			}
			// Nothing recorded, nothing asked: the run reconciler finds no
			// record, so GitHub sees no request.
			f, gh := gitHub(t)
			r := testReconciler(h.api, func(*ghclient.Credentials) (Runs, error) { return gh, nil }, h.events, h.metrics)
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: recordsNamespace, Name: "88"}}); err != nil {
				t.Fatal(err)
			}
			if tc.want == nil && len(f.Requests()) != 0 {
				t.Errorf("GitHub saw %d requests for a loss not recorded", len(f.Requests()))
			}
		})
	}
}

// testReconciler is a run reconciler over api, re-runs on.
func testReconciler(api client.Client, clientOf func(*ghclient.Credentials) (Runs, error), rec events.EventRecorder, m *Metrics) *runReconciler {
	o := Options{Namespace: recordsNamespace, Client: clientOf, Enabled: true, Events: rec, Metrics: m, Log: logr.Discard(), Now: testNow}
	return newRunReconciler(o.withDefaults(), api, api, api)
}

// After a restart a record of ARC's credentials whose Secret is gone waits,
// an Event says why, and no other credential asks GitHub; once the Secret is
// back, its own token does.
func TestRecordCredentialsUnresolvableAfterRestart(t *testing.T) {
	f := ghfake.New()
	f.SetToken("arc-token")
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	run := f.AddRun("org-a/app", "ci")
	job, _ := f.AddJob(run, "build", "runner-1")

	rec := lostRecord(run, "runner-1")
	rec.Repository = "org-a/app"
	rec.Recorded = time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)
	rec.Credentials = CredentialsRef{Mode: CredentialsARC, Secret: types.NamespacedName{Namespace: "ci", Name: "gh-org-a"}, BaseURL: srv.URL}
	api := fake.NewClientBuilder().WithObjects(rec.ConfigMap(recordsNamespace)).Build()
	var asked []*ghclient.Credentials
	clientOf := func(c *ghclient.Credentials) (Runs, error) {
		asked = append(asked, c)
		if c == nil {
			// The static credentials exist, and must never be used.
			return ghclient.New(ghclient.Config{BaseURL: srv.URL, AllowHTTP: true, Token: "static-token"})
		}
		return ghclient.New(ghclient.Config{BaseURL: c.BaseURL, AllowHTTP: true, Token: c.Token})
	}
	ev, m := events.NewFakeRecorder(20), NewMetrics(nil)
	r := testReconciler(api, clientOf, ev, m)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: recordsNamespace, Name: strconv.FormatInt(run, 10)}}
	for range 2 {
		res, err := r.Reconcile(context.Background(), req)
		if err != nil || res.RequeueAfter != DefaultPoll {
			t.Fatalf("Reconcile = %+v, %v", res, err)
		}
	}
	if len(asked) != 0 || len(f.Requests()) != 0 {
		t.Fatalf("asked for clients %v, GitHub saw %d requests", asked, len(f.Requests()))
	}
	if len(ev.Events) != 1 {
		t.Fatalf("%d Events, want 1 (said once)", len(ev.Events))
	}
	if e := <-ev.Events; !strings.Contains(e, ReasonJobRerunWaiting) || !strings.Contains(e, "ci/gh-org-a") || !strings.Contains(e, "no other credentials") {
		t.Errorf("Event %q", e)
	}
	var cm corev1.ConfigMap
	_ = api.Get(context.Background(), types.NamespacedName{Namespace: recordsNamespace, Name: rec.Name()}, &cm)
	if got, _ := parseRecord(&cm); got.State != StateWaiting || !strings.Contains(got.Message, "cannot be resolved") {
		t.Errorf("record %+v", got)
	}

	// The Secret is back: its token, and only it, asks GitHub.
	if err := api.Create(context.Background(), fixture.ARCSecret("ci", "gh-org-a", map[string]string{"github_token": "arc-token"})); err != nil {
		t.Fatal(err)
	}
	_ = f.FinishJob(job, ghfake.ConclusionFailure)
	_ = f.CompleteRun(run, ghfake.ConclusionFailure)
	for range 2 {
		if _, err := r.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range asked {
		if c == nil || c.Key != "ci/gh-org-a" {
			t.Fatalf("asked for the client of %+v, want only ci/gh-org-a's", c)
		}
	}
	if n := f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpRerunJob}); n != 1 {
		t.Errorf("%d re-runs, want 1", n)
	}
	if n := testutil.ToFloat64(m.lost.WithLabelValues(string(CauseNodeGone), string(OutcomeRerun))); n != 1 {
		t.Errorf("counted %v rerun, want 1", n)
	}
}

// Records an older runner-guard wrote are read: a decided one stays until
// it expires, a waiting one is decided unnamed without asking GitHub
// (nothing says which credentials reach it), and none waits for ever.
func TestOldRecordFormat(t *testing.T) {
	old := func(run int64, runner string, state State, recorded time.Time) *corev1.ConfigMap {
		rec := lostRecord(run, runner)
		rec.State, rec.Recorded, rec.Legacy = state, recorded, true
		cm := rec.ConfigMap(recordsNamespace)
		if _, ok := cm.Data["format"]; ok {
			t.Fatal("an old record carries a format")
		}
		return cm
	}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	waiting := old(77, "runner-1", StateWaiting, now.Add(-time.Hour))
	decided := old(77, "runner-2", StateRerun, now.Add(-time.Hour))
	stale := old(77, "runner-3", StateLost, now.Add(-32*24*time.Hour))
	api := fake.NewClientBuilder().WithObjects(waiting, decided, stale).Build()
	f, gh := gitHub(t)
	ev, m := events.NewFakeRecorder(20), NewMetrics(nil)
	r := testReconciler(api, func(*ghclient.Credentials) (Runs, error) { return gh, nil }, ev, m)
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: recordsNamespace, Name: "77"}})
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("Reconcile = %+v, %v", res, err)
	}
	get := func(cm *corev1.ConfigMap) (Record, bool) {
		var got corev1.ConfigMap
		if err := api.Get(context.Background(), client.ObjectKeyFromObject(cm), &got); err != nil {
			return Record{}, false
		}
		rec, err := parseRecord(&got)
		if err != nil {
			t.Fatal(err)
		}
		return rec, true
	}
	if rec, ok := get(waiting); !ok || rec.State != StateUnknown || !strings.Contains(rec.Message, "older runner-guard") {
		t.Errorf("the old waiting record: %+v", rec)
	}
	if rec, ok := get(decided); !ok || rec.State != StateRerun {
		t.Errorf("the old decided record: %+v, %v", rec, ok)
	}
	if _, ok := get(stale); ok {
		t.Error("an old record past its 31 days was kept")
	}
	if len(f.Requests()) != 0 {
		t.Errorf("GitHub saw %d requests", len(f.Requests()))
	}
	if n := testutil.ToFloat64(m.lost.WithLabelValues(string(CauseNodeGone), string(OutcomeUnnamed))); n != 1 {
		t.Errorf("counted %v unnamed, want 1", n)
	}
}

// A record not decided 31 days after its run started ends, whatever its
// credentials, counted refused.
func TestRecordExpires(t *testing.T) {
	rec := lostRecord(77, "runner-1")
	rec.Recorded = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	rec.RunStarted = time.Date(2026, 11, 4, 12, 0, 0, 0, time.UTC)
	rec.Credentials = CredentialsRef{Mode: CredentialsARC, Secret: types.NamespacedName{Namespace: "ci", Name: "gone"}}
	api := fake.NewClientBuilder().WithObjects(rec.ConfigMap(recordsNamespace)).Build()
	f, gh := gitHub(t)
	ev, m := events.NewFakeRecorder(20), NewMetrics(nil)
	r := testReconciler(api, func(*ghclient.Credentials) (Runs, error) { return gh, nil }, ev, m)
	if res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: recordsNamespace, Name: "77"}}); err != nil || res.RequeueAfter != 0 {
		t.Fatalf("Reconcile = %+v, %v", res, err)
	}
	var cm corev1.ConfigMap
	_ = api.Get(context.Background(), types.NamespacedName{Namespace: recordsNamespace, Name: rec.Name()}, &cm)
	if got, _ := parseRecord(&cm); got.State != StateExpired || got.Outcome != OutcomeRefused {
		t.Errorf("record %+v", got)
	}
	if len(f.Requests()) != 0 || testutil.ToFloat64(m.lost.WithLabelValues(string(CauseNodeGone), string(OutcomeRefused))) != 1 {
		t.Errorf("%d requests; refused counted %v", len(f.Requests()), testutil.ToFloat64(m.lost.WithLabelValues(string(CauseNodeGone), string(OutcomeRefused))))
	}
}

// A record of ARC's credentials reads its githubConfigSecret by ARC's rules,
// as the webhook does; a Secret they refuse is a reason naming the key.
func TestClientOfReadsARCSecretAsARCDoes(t *testing.T) {
	ref := CredentialsRef{Mode: CredentialsARC, Secret: types.NamespacedName{Namespace: "ci", Name: "gh"}, BaseURL: "https://ghe.example.com/api/v3"}
	tests := map[string]struct {
		data       map[string]string
		wantToken  string
		wantReason string
	}{
		"a token, trimmed":      {data: map[string]string{"github_token": "t0ken\n"}, wantToken: "t0ken"},
		"a token, half an App":  {data: map[string]string{"github_token": "t0ken", "github_app_id": "1"}, wantToken: "t0ken"},
		"an App without a key":  {data: map[string]string{"github_app_id": "1", "github_app_installation_id": "2"}, wantReason: "Secret ci/gh: github_app_private_key: missing"},
		"a token and an App":    {data: map[string]string{"github_token": "t", "github_app_id": "1", "github_app_installation_id": "2", "github_app_private_key": "k"}, wantReason: "github_token: both"},
		"a bad installation ID": {data: map[string]string{"github_app_id": "1", "github_app_installation_id": "x", "github_app_private_key": "k"}, wantReason: `github_app_installation_id: "x" is not a positive integer`},
		"nothing":               {data: map[string]string{}, wantReason: "Secret ci/gh: holds none of"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			api := fake.NewClientBuilder().WithObjects(fixture.ARCSecret("ci", "gh", tc.data)).Build()
			var got *ghclient.Credentials
			r := testReconciler(api, func(c *ghclient.Credentials) (Runs, error) {
				got = c
				return nil, nil
			}, events.NewFakeRecorder(1), NewMetrics(nil))
			_, reason := r.clientOf(context.Background(), ref)
			if !strings.Contains(reason, tc.wantReason) || (tc.wantReason == "") != (reason == "") {
				t.Fatalf("reason %q, want one with %q", reason, tc.wantReason)
			}
			if tc.wantToken != "" && (got == nil || got.Token != tc.wantToken || got.BaseURL != ref.BaseURL || got.Key != "ci/gh") {
				t.Errorf("credentials %+v, want token %q at %s", got, tc.wantToken, ref.BaseURL)
			}
		})
	}
}
