package webhook

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// harness serves the Handler over HTTP the way the webhook server does, in
// front of the real GitHub client talking to the fake GitHub.
type harness struct {
	clock   *fakeclock.Clock
	github  *ghfake.Fake
	events  *events.FakeRecorder
	metrics *Metrics
	url     string
}

// drainUser is the user of runner-guard's own drain (Options.ReleasedBy).
const drainUser = "system:serviceaccount:runner-guard:runner-guard"

func newHarness(t *testing.T, cfg Config, pods ...*corev1.Pod) *harness {
	t.Helper()
	clock := fakeclock.New(time.Now())
	// The scopes of the pods the tests build: GitHub answers 404 for others.
	gh, client := fixture.FakeGitHubClocked(t, clock.Now, ghfake.WithScopes(acme()))
	// ARC's legacy Runner of the pod "ci/runner-1" that arcLegacy builds.
	objs := []runtime.Object{legacyRunner().Obj()}
	for _, p := range pods {
		objs = append(objs, p)
	}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	h := &harness{clock: clock, github: gh, events: events.NewFakeRecorder(100), metrics: NewMetrics()}
	reader := fake.NewClientBuilder().WithRuntimeObjects(objs...).Build()
	handler, err := NewHandler(Options{
		Config:  cfg,
		GitHub:  client,
		Runners: arc.NewResolver(arc.Options{Reader: reader}),
		Pods:    reader,
		Events:  h.events,
		Metrics: h.metrics,
		Now:     h.clock.Now,
		// The user runner-guard's drain evicts as.
		ReleasedBy: drainUser,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&admission.Webhook{Handler: handler})
	t.Cleanup(srv.Close)
	h.url = srv.URL + Path
	return h
}

// post sends raw bytes as an AdmissionReview body and returns the HTTP status and review.
func (h *harness) post(t *testing.T, body []byte) (int, admissionv1.AdmissionReview) {
	t.Helper()
	resp, err := http.Post(h.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v: %s", err, data)
	}
	return resp.StatusCode, out
}

type request struct {
	op     Operation
	pod    *corev1.Pod
	user   string
	dryRun bool
	// evictionDryRun sets the dry run only in the Eviction's deleteOptions,
	// as kubectl drain --dry-run=server does.
	evictionDryRun bool
	// released marks the Eviction as runner-guard's drain does once it
	// unregistered the runner (EvictionReleasedAnnotation).
	released bool
}

func reviewJSON(t *testing.T, r request) []byte {
	t.Helper()
	review := fixture.Review{Pod: r.pod, Evict: r.op == OperationEvict, User: r.user, DryRun: r.dryRun || r.evictionDryRun}
	if r.released {
		review.EvictionAnnotations = map[string]string{EvictionReleasedAnnotation: "drain"}
	}
	if r.dryRun && r.op == OperationEvict {
		t.Fatal("an eviction's dry run is in its deleteOptions: set evictionDryRun")
	}
	body, err := review.JSON()
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func acme() ghclient.Scope { return fixture.Org("acme") }

// legacyRunner is ARC's legacy Runner of pod ci/runner-1, in org acme.
func legacyRunner() *fixture.LegacyRunnerWrapper {
	return fixture.MakeLegacyRunner("ci", "runner-1").Org("acme")
}

func TestHandlerDecisions(t *testing.T) {
	idle := func(h *harness) { h.github.AddRunner(acme(), "runner-1") }
	busy := func(h *harness) { h.github.AddRunner(acme(), "runner-1"); h.github.SetBusy(acme(), "runner-1", true) }
	legacy := func() *fixture.PodWrapper { return fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running() }
	// arcLegacy is the pod ARC's legacy controller makes: controlled by its
	// Runner, with the runner's ID annotated. The ID is checked against the
	// scope's listing (one GET, shared by the scope's decisions) before use.
	arcLegacy := func() *fixture.PodWrapper { return legacy().OwnedByLegacyRunner(legacyRunner()).RunnerID(1001) }
	// failingDelete: runner-1 registered idle, and GitHub answering its
	// DELETE (not the listing that checks its ID) with fault.
	failingDelete := func(fault ghfake.Fault) func(*harness) {
		fault.Method = http.MethodDelete
		return func(h *harness) { idle(h); h.github.InjectFault(fault) }
	}
	tests := map[string]struct {
		cfg      Config
		req      request
		setup    func(*harness)
		allowed  bool
		code     int32
		retry    int32
		reason   Reason
		msg      []string
		notMsg   []string // what the answer must not give away
		warning  bool
		ghCalls  map[string]int // method -> requests GitHub saw
		event    string
		stillReg bool        // runner still registered on GitHub afterwards
		podGone  bool        // the pod does not exist in the API (eviction races a delete)
		live     *corev1.Pod // the live pod, when it differs from the review's
	}{
		"1 not a runner pod": {
			req: request{op: OperationDelete, pod: fixture.MakePod("ci", "web").Running().Obj()}, setup: busy,
			allowed: true, reason: ReasonNotRunnerPod, ghCalls: map[string]int{}, stillReg: true,
		},
		"1 kube-system is exempt": {
			req: request{op: OperationDelete, pod: fixture.MakeLegacyRunnerPod("kube-system", "runner-1").Org("acme").Running().Obj()}, setup: busy,
			allowed: true, reason: ReasonExemptNamespace, ghCalls: map[string]int{}, stillReg: true,
		},
		"1 eviction of a pod that is gone": {
			req: request{op: OperationEvict, pod: fixture.MakePod("ci", "gone").Obj()}, setup: busy, podGone: true,
			allowed: true, reason: ReasonPodNotFound, ghCalls: map[string]int{}, stillReg: true,
		},
		"2 already terminating": {
			req: request{op: OperationDelete, pod: legacy().Terminating().Obj()}, setup: busy,
			allowed: true, reason: ReasonTerminating, ghCalls: map[string]int{}, stillReg: true,
		},
		"3 pending runner pod": {
			req: request{op: OperationDelete, pod: fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Pending().Obj()}, setup: busy,
			allowed: true, reason: ReasonRunnerNotRunning, ghCalls: map[string]int{}, stillReg: true,
		},
		"3 runner container terminated": {
			req: request{op: OperationDelete, pod: fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").RunnerTerminated().Obj()}, setup: busy,
			allowed: true, reason: ReasonRunnerNotRunning, ghCalls: map[string]int{}, stillReg: true,
		},
		"6b bypass user, runner online and busy: its node is alive": {
			req: request{op: OperationDelete, pod: legacy().Obj(), user: "system:serviceaccount:kube-system:node-controller"}, setup: busy,
			code: 403, reason: ReasonBypassBusy, msg: []string{"runner busy", "bypass list", "online"}, event: EventBypassRefused,
			ghCalls: map[string]int{"GET": 1}, stillReg: true,
		},
		"6b bypass user, runner offline": {
			req:     request{op: OperationDelete, pod: legacy().Obj(), user: "system:serviceaccount:kube-system:pod-garbage-collector"},
			setup:   func(h *harness) { busy(h); h.github.SetOnline(acme(), "runner-1", false) },
			allowed: true, reason: ReasonBypassUser, warning: true, event: EventForcedDelete, ghCalls: map[string]int{"GET": 1}, stillReg: true,
		},
		"6b bypass user, scope unknown": {
			req: request{op: OperationDelete, pod: fixture.MakeLegacyRunnerPod("ci", "runner-1").Running().Obj(), user: "system:serviceaccount:kube-system:pod-garbage-collector"}, setup: busy,
			allowed: true, reason: ReasonBypassUser, warning: true, event: EventForcedDelete, ghCalls: map[string]int{}, stillReg: true,
		},
		"4 force annotation": {
			req: request{op: OperationDelete, pod: legacy().Force().Obj()}, setup: busy,
			allowed: true, reason: ReasonForceAnnotation, warning: true, event: EventForcedDelete, ghCalls: map[string]int{}, stillReg: true,
		},
		"5 scope unknown, deny": {
			req: request{op: OperationDelete, pod: fixture.MakeLegacyRunnerPod("ci", "runner-1").Running().Obj()}, setup: busy,
			code: 403, reason: ReasonScopeUnknown, msg: []string{"RUNNER_ORG"}, event: EventScopeUnknown, ghCalls: map[string]int{}, stillReg: true,
		},
		"5 scope unknown, allow": {
			cfg: Config{OnError: OnErrorAllow},
			req: request{op: OperationDelete, pod: fixture.MakeLegacyRunnerPod("ci", "runner-1").Running().Obj()}, setup: busy,
			allowed: true, reason: ReasonScopeUnknown, warning: true, event: EventScopeUnknown, ghCalls: map[string]int{}, stillReg: true,
		},
		"4b forged review: no such pod": {
			req: request{op: OperationDelete, pod: arcLegacy().Obj()}, podGone: true, setup: busy,
			allowed: true, reason: ReasonPodNotLive, msg: []string{"no live pod has the UID"}, ghCalls: map[string]int{}, stillReg: true,
		},
		"4b stale review: the live pod has another UID": {
			req:  request{op: OperationDelete, pod: arcLegacy().Obj()},
			live: legacy().RunnerID(1001).UID("another-uid").Obj(), setup: busy,
			allowed: true, reason: ReasonPodNotLive, msg: []string{"no live pod has the UID"}, notMsg: []string{"another-uid"}, ghCalls: map[string]int{}, stillReg: true,
		},
		"4b scope comes from the live pod, not the review": {
			req:  request{op: OperationDelete, pod: fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("victim").Running().Obj()},
			live: legacy().Obj(), setup: busy,
			code: 403, reason: ReasonRunnerBusy, msg: []string{`org "acme"`}, event: EventRunnerBusy, ghCalls: map[string]int{"GET": 1, "DELETE": 1}, stillReg: true,
		},
		"6 dry-run eviction (deleteOptions.dryRun) unregisters nothing": {
			req: request{op: OperationEvict, pod: legacy().Obj(), evictionDryRun: true}, setup: idle,
			allowed: true, reason: ReasonDryRunIdle, ghCalls: map[string]int{"GET": 1}, stillReg: true,
		},
		"5 scope unknown, eviction is a 429": {
			req: request{op: OperationEvict, pod: fixture.MakeLegacyRunnerPod("ci", "runner-1").Running().Obj()}, setup: busy,
			code: 429, retry: 10, reason: ReasonScopeUnknown, event: EventScopeUnknown, ghCalls: map[string]int{}, stillReg: true,
		},
		"6 dry run busy": {
			req: request{op: OperationDelete, pod: legacy().Obj(), dryRun: true}, setup: busy,
			code: 403, reason: ReasonDryRunBusy, msg: []string{"runner busy"}, ghCalls: map[string]int{"GET": 1}, stillReg: true,
		},
		"6 dry run idle": {
			req: request{op: OperationDelete, pod: legacy().Obj(), dryRun: true}, setup: idle,
			allowed: true, reason: ReasonDryRunIdle, ghCalls: map[string]int{"GET": 1}, stillReg: true,
		},
		"7 idle runner of ARC's Runner, its ID checked by the scope's listing": {
			req: request{op: OperationDelete, pod: arcLegacy().Obj()}, setup: idle,
			allowed: true, reason: ReasonUnregistered, event: EventRunnerUnregistered, ghCalls: map[string]int{"GET": 1, "DELETE": 1},
		},
		"7 an ID the pod itself carries is checked against GitHub's record first": {
			req: request{op: OperationDelete, pod: legacy().RunnerID(1001).Obj()}, setup: idle,
			allowed: true, reason: ReasonUnregistered, event: EventRunnerUnregistered, ghCalls: map[string]int{"GET": 1, "DELETE": 1},
		},
		"7 idle runner looked up by name": {
			req: request{op: OperationDelete, pod: legacy().Obj()}, setup: idle,
			allowed: true, reason: ReasonUnregistered, event: EventRunnerUnregistered, ghCalls: map[string]int{"GET": 1, "DELETE": 1},
		},
		"7 runner not registered": {
			req: request{op: OperationDelete, pod: legacy().Obj()}, setup: func(*harness) {},
			allowed: true, reason: ReasonRunnerNotFound, ghCalls: map[string]int{"GET": 1},
		},
		"7 eviction of an idle runner": {
			req: request{op: OperationEvict, pod: arcLegacy().Obj()}, setup: idle,
			allowed: true, reason: ReasonUnregistered, event: EventRunnerUnregistered, ghCalls: map[string]int{"GET": 1, "DELETE": 1},
		},
		"8 busy delete": {
			req: request{op: OperationDelete, pod: arcLegacy().Obj()}, setup: busy,
			code: 403, reason: ReasonRunnerBusy, msg: []string{"runner busy", `"runner-1"`, `org "acme"`, "force-delete"},
			event: EventRunnerBusy, ghCalls: map[string]int{"GET": 1, "DELETE": 1}, stillReg: true,
		},
		"8 busy eviction gets 429": {
			req: request{op: OperationEvict, pod: arcLegacy().Obj()}, setup: busy,
			code: 429, retry: 10, reason: ReasonRunnerBusy, msg: []string{"runner busy"},
			event: EventRunnerBusy, ghCalls: map[string]int{"GET": 1, "DELETE": 1}, stillReg: true,
		},
		"8 scale-set runner busy": {
			req:   request{op: OperationDelete, pod: fixture.MakeScaleSetRunnerPod("ci", "runner-1").Label("actions.github.com/organization", "acme").Running().Obj()},
			setup: busy, code: 403, reason: ReasonRunnerBusy, msg: []string{"runner busy"}, event: EventRunnerBusy,
			ghCalls: map[string]int{"GET": 1, "DELETE": 1}, stillReg: true,
		},
		"9 secondary rate limit": {
			req:   request{op: OperationDelete, pod: arcLegacy().Obj()},
			setup: failingDelete(ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 403, RetryAfterSeconds: 42}),
			code:  503, reason: ReasonRateLimited, msg: []string{"rate limit", "retry in 42s"}, event: EventRateLimited,
			ghCalls: map[string]int{"GET": 1, "DELETE": 1}, stillReg: true,
		},
		"9 secondary rate limit, eviction": {
			req:   request{op: OperationEvict, pod: arcLegacy().Obj()},
			setup: failingDelete(ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 403, RetryAfterSeconds: 42}),
			code:  429, retry: 42, reason: ReasonRateLimited, msg: []string{"rate limit"}, event: EventRateLimited,
			ghCalls: map[string]int{"GET": 1, "DELETE": 1}, stillReg: true,
		},
		"10 GitHub 500, deny": {
			req:   request{op: OperationDelete, pod: arcLegacy().Obj()},
			setup: failingDelete(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 500}),
			code:  503, reason: ReasonGitHubError, msg: []string{"500", "--on-error=deny"}, event: EventGitHubError,
			ghCalls: map[string]int{"GET": 1, "DELETE": 1}, stillReg: true,
		},
		"10 GitHub 500, allow": {
			cfg:     Config{OnError: OnErrorAllow},
			req:     request{op: OperationDelete, pod: arcLegacy().Obj()},
			setup:   failingDelete(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 500}),
			allowed: true, reason: ReasonGitHubError, warning: true, msg: []string{"500"}, event: EventGitHubError,
			ghCalls: map[string]int{"GET": 1, "DELETE": 1}, stillReg: true,
		},
		"10 GitHub slower than the timeout": {
			cfg: Config{GitHubTimeout: metav1.Duration{Duration: 200 * time.Millisecond}},
			req: request{op: OperationDelete, pod: arcLegacy().Obj()},
			setup: func(h *harness) {
				idle(h)
				h.github.SetLatency(2 * time.Second)
			},
			code: 503, reason: ReasonGitHubError, msg: []string{"deadline exceeded"}, event: EventGitHubError,
			ghCalls: map[string]int{"GET": 1}, stillReg: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			stored := []*corev1.Pod{tc.req.pod}
			switch {
			case tc.podGone:
				stored = nil
			case tc.live != nil:
				stored = []*corev1.Pod{tc.live}
			}
			h := newHarness(t, tc.cfg, stored...)
			tc.setup(h)
			status, out := h.post(t, reviewJSON(t, tc.req))
			if status != http.StatusOK || out.Response == nil {
				t.Fatalf("HTTP %d, response %+v", status, out.Response)
			}
			resp := out.Response
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed = %v, want %v (%+v)", resp.Allowed, tc.allowed, resp.Result)
			}
			if !tc.allowed {
				if resp.Result.Code != tc.code {
					t.Errorf("code = %d, want %d", resp.Result.Code, tc.code)
				}
				if tc.code == 429 && (resp.Result.Details == nil || resp.Result.Details.RetryAfterSeconds != tc.retry) {
					t.Errorf("retryAfterSeconds = %+v, want %d", resp.Result.Details, tc.retry)
				}
			}
			if !tc.allowed && !strings.HasSuffix(resp.Result.Message, "[reason: "+string(tc.reason)+"]") {
				t.Errorf("denial message %q does not end with its reason %q", resp.Result.Message, tc.reason)
			}
			for _, m := range tc.msg {
				if !strings.Contains(resp.Result.Message, m) {
					t.Errorf("message %q does not contain %q", resp.Result.Message, m)
				}
			}
			for _, m := range tc.notMsg {
				if strings.Contains(resp.Result.Message, m) {
					t.Errorf("message %q gives away %q", resp.Result.Message, m)
				}
			}
			if (len(resp.Warnings) > 0) != tc.warning {
				t.Errorf("warnings = %q, want warning: %v", resp.Warnings, tc.warning)
			}
			decision := "deny"
			if tc.allowed {
				decision = "allow"
			}
			if got := testutil.ToFloat64(h.metrics.Decisions.WithLabelValues(string(tc.req.op), decision, string(tc.reason))); got != 1 {
				t.Errorf("runner_guard_decisions_total{%s,%s,%s} = %v, want 1", tc.req.op, decision, tc.reason, got)
			}
			// The fake logs a request the client gave up on once it notices; allow it a moment.
			deadline := time.Now().Add(3 * time.Second)
			for _, method := range []string{"GET", "DELETE"} {
				for h.github.Count(method) < tc.ghCalls[method] && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if got := h.github.Count(method); got != tc.ghCalls[method] {
					t.Errorf("GitHub saw %d %s requests, want %d: %+v", got, method, tc.ghCalls[method], h.github.Requests())
				}
			}
			if _, reg := h.github.Runner(acme(), "runner-1"); reg != tc.stillReg && tc.setup != nil {
				if tc.ghCalls["DELETE"] > 0 || tc.stillReg {
					t.Errorf("runner registered on GitHub = %v, want %v", reg, tc.stillReg)
				}
			}
			select {
			case ev := <-h.events.Events:
				if tc.event == "" || !strings.Contains(ev, tc.event) {
					t.Errorf("event %q, want %q", ev, tc.event)
				}
			default:
				if tc.event != "" {
					t.Errorf("no event, want %q", tc.event)
				}
			}
		})
	}
}

// The API server may review one deletion up to three times; only the first asks GitHub.
func TestHandlerRepeatedReviewsCostOneUnregister(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	h := newHarness(t, Config{}, pod)
	h.github.AddRunner(acme(), "runner-1")
	for i := range 3 {
		_, out := h.post(t, reviewJSON(t, request{op: OperationDelete, pod: pod}))
		if !out.Response.Allowed {
			t.Fatalf("review %d denied: %+v", i, out.Response.Result)
		}
	}
	if got := h.github.Count(""); got != 2 {
		t.Errorf("GitHub requests = %d, want 2 (one list, one DELETE): %+v", got, h.github.Requests())
	}
	if got := testutil.ToFloat64(h.metrics.Decisions.WithLabelValues("delete", "allow", string(ReasonRecentlyAdmitted))); got != 2 {
		t.Errorf("recently-admitted decisions = %v, want 2", got)
	}
}

// deleteAndWant posts a DELETE review of pod and fails unless the answer is
// allowed as wanted, with reason in its message.
func (h *harness) deleteAndWant(t *testing.T, pod *corev1.Pod, allowed bool, reason Reason) {
	t.Helper()
	_, out := h.post(t, reviewJSON(t, request{op: OperationDelete, pod: pod}))
	if out.Response.Allowed != allowed || !strings.Contains(out.Response.Result.Message, string(reason)) {
		t.Fatalf("allowed = %v, result %+v; want allowed %v, reason %s", out.Response.Allowed, out.Response.Result, allowed, reason)
	}
}

// A pod that carries ARC's legacy Runner's owner reference is not trusted
// with its actions-runner/id: whoever may create pods in the namespace can
// make one (the Runner's name and UID are readable) naming another idle
// runner's ID. GitHub's record for that ID names the other runner, so the pod
// is decided by its own name and the other runner stays.
func TestHandlerRunnersPodWithAnotherRunnersID(t *testing.T) {
	for name, ownBusy := range map[string]bool{"own runner idle": false, "own runner busy": true} {
		t.Run(name, func(t *testing.T) {
			const victim = 1001 // the fake's first ID
			pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().
				OwnedByLegacyRunner(legacyRunner()).RunnerID(victim).Obj()
			h := newHarness(t, Config{}, pod)
			if id := h.github.AddRunner(acme(), "victim"); id != victim {
				t.Fatalf("victim's ID = %d, want %d", id, victim)
			}
			h.github.AddRunner(acme(), "runner-1")
			h.github.SetBusy(acme(), "runner-1", ownBusy)

			if ownBusy {
				h.deleteAndWant(t, pod, false, ReasonRunnerBusy)
			} else {
				h.deleteAndWant(t, pod, true, ReasonUnregistered)
			}

			if _, ok := h.github.Runner(acme(), "victim"); !ok {
				t.Error("the runner whose ID the pod carried was removed")
			}
			for _, r := range h.github.Requests() {
				if r.Method == http.MethodDelete && r.RunnerID == victim {
					t.Errorf("GitHub saw a DELETE of the other runner's ID: %s %s", r.Method, r.Path)
				}
			}
		})
	}
}

// busyRunnerHarness is a harness with one legacy runner pod, runner-1 of
// acme, registered on the fake GitHub and busy. The pod carries no runner ID:
// the first decision looks the name up, and takes no listing of the scope.
func busyRunnerHarness(t *testing.T) (*harness, *corev1.Pod) {
	t.Helper()
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	h := newHarness(t, Config{}, pod)
	h.github.AddRunner(acme(), "runner-1")
	h.github.SetBusy(acme(), "runner-1", true)
	return h, pod
}

// After GitHub's "busy" (a 422), the runner is re-checked with its scope's
// shared listing, which costs no DELETE: a listing that shows it busy refuses,
// one younger than ghclient.ListingTTL answers with no request at all, and
// once it shows the runner idle the DELETE decides, and the pod goes. An
// admission is never made from a listing or from memory.
func TestHandlerBusyRecheckedByListing(t *testing.T) {
	h, pod := busyRunnerHarness(t)
	deleteAndWant := func(allowed bool, reason Reason) { t.Helper(); h.deleteAndWant(t, pod, allowed, reason) }
	deleteAndWant(false, ReasonRunnerBusy) // the DELETE: 422
	deleteAndWant(false, ReasonListedBusy) // busy lately: the listing is taken, and shows it busy
	before := h.github.Count("")
	deleteAndWant(false, ReasonListedBusy) // the same listing, still fresh
	if got := h.github.Count(""); got != before {
		t.Fatalf("a fresh listing cost %d requests", got-before)
	}
	h.clock.Advance(ghclient.ListingTTL)
	deleteAndWant(false, ReasonListedBusy) // renewed: still busy
	h.github.SetBusy(acme(), "runner-1", false)
	h.clock.Advance(ghclient.ListingTTL)
	deleteAndWant(true, ReasonUnregistered) // renewed: idle, so the DELETE decides
	if got := h.github.Count("DELETE"); got != 2 {
		t.Errorf("DELETEs = %d, want 2 (the listing's refusals send none)", got)
	}
}

// A listing that says idle never lets a pod go on its own: GitHub's listing
// lags its broker (actions/runner#4422), so the DELETE's 422 wins.
func TestHandlerLaggingListingNeverAdmits(t *testing.T) {
	h, pod := busyRunnerHarness(t)
	h.github.SetListingLags(acme(), "runner-1", true) // listed idle, DELETE answers 422
	for range 3 {
		h.deleteAndWant(t, pod, false, ReasonRunnerBusy)
		h.clock.Advance(ghclient.ListingTTL)
	}
	if got := h.github.Count("DELETE"); got != 3 {
		t.Errorf("DELETEs = %d, want 3: a listing saying idle is followed by the DELETE", got)
	}
}

// When nothing fresher can be had (the listing fails), the remembered "busy"
// refuses, for busyRetryAfter, growing while the runner stays busy; past it
// the DELETE asks again.
func TestHandlerBusyRememberedWhenNoListing(t *testing.T) {
	h, pod := busyRunnerHarness(t)
	deleteAndWant := func(allowed bool, reason Reason) { t.Helper(); h.deleteAndWant(t, pod, allowed, reason) }
	deleteAndWant(false, ReasonRunnerBusy) // asked: busy, remembered 10s
	h.github.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Method: http.MethodGet, PathContains: "/actions/runners", Status: http.StatusBadGateway})
	deleteAndWant(false, ReasonRecentlyBusy) // the listing fails: from memory
	h.clock.Advance(DefaultBusyRetryAfter)   // memory ran out
	deleteAndWant(false, ReasonRunnerBusy)   // asked again: still busy, remembered 20s
	h.github.SetBusy(acme(), "runner-1", false)
	h.clock.Advance(2 * DefaultBusyRetryAfter)
	deleteAndWant(true, ReasonUnregistered)
	if got := h.github.Count("DELETE"); got != 3 {
		t.Errorf("DELETEs = %d, want 3 (the remembered refusal asks nothing)", got)
	}
}

func TestHandlerMalformedBodies(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	tests := map[string][]byte{
		"not json":            []byte("{not json"),
		"empty object":        []byte("{}"),
		"no request":          []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
		"oldObject junk":      []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"DELETE","resource":{"version":"v1","resource":"pods"},"oldObject":{"kind":"Pod","apiVersion":"v1","metadata":{"labels":{"actions-runner":""}},"spec":"x","status":{"phase":"Running","containerStatuses":[{"name":"runner","state":{"running":{}}}]}}}}`),
		"oldObject not a pod": []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"DELETE","resource":{"version":"v1","resource":"pods"},"oldObject":[1,2]}}`),
		"no oldObject":        []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"DELETE","resource":{"version":"v1","resource":"pods"}}}`),
		"eviction no pod":     []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"CREATE","resource":{"version":"v1","resource":"pods"},"subResource":"eviction"}}`),
	}
	h := newHarness(t, Config{}, pod)
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			status, out := h.post(t, body)
			if status >= 500 {
				t.Fatalf("HTTP %d for a malformed body", status)
			}
			if out.Response == nil || out.Response.Allowed || out.Response.Result == nil || out.Response.Result.Code != http.StatusBadRequest {
				t.Fatalf("response = %+v, want a 400 denial", out.Response)
			}
		})
	}
	if h.github.Count("") != 0 {
		t.Errorf("malformed reviews reached GitHub: %+v", h.github.Requests())
	}
}

// Rule 1 reads only the labels: a non-runner pod is let go without decoding
// the rest of it, and a runner pod is decoded whole.
func TestHandlerReadsLabelsFirst(t *testing.T) {
	h := newHarness(t, Config{})
	body := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"DELETE","resource":{"version":"v1","resource":"pods"},"oldObject":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web","namespace":"ci","labels":{"app":"web"}},"spec":"not decoded"}}}`)
	if _, out := h.post(t, body); !out.Response.Allowed {
		t.Fatalf("non-runner pod denied: %+v", out.Response.Result)
	}
	if got := testutil.ToFloat64(h.metrics.Decisions.WithLabelValues("delete", "allow", string(ReasonNotRunnerPod))); got != 1 {
		t.Errorf("not-runner-pod decisions = %v, want 1", got)
	}
}

func TestHandlerIgnoresOtherOperations(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	h := newHarness(t, Config{}, pod)
	raw, _ := json.Marshal(pod)
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Update,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: raw}},
	})
	if _, out := h.post(t, body); !out.Response.Allowed {
		t.Fatalf("UPDATE denied: %+v", out.Response.Result)
	}
}

func TestNewHandlerRequiresParts(t *testing.T) {
	cfg := DefaultConfig()
	tests := map[string]Options{
		"no GitHub":  {Config: cfg, Pods: fake.NewClientBuilder().Build()},
		"no pods":    {Config: cfg, GitHub: &ghclient.Router{}},
		"bad config": {Config: Config{OnError: "x"}, GitHub: &ghclient.Router{}, Pods: fake.NewClientBuilder().Build()},
	}
	for name, o := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := NewHandler(o); err == nil {
				t.Fatal("NewHandler succeeded, want an error")
			}
		})
	}
}

// A pod naming a repository GitHub does not know (a typo in RUNNER_REPO)
// deleted in a loop costs one GitHub request, not one a delete: the 404 is
// remembered for the scope and the pod's failed decision backs off.
func TestHandlerMissingRepositoryRemembered(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Repo("acme/does-not-exist").Running().Obj()
	h := newHarness(t, Config{}, pod)
	h.github.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: http.StatusNotFound, PathContains: "/repos/acme/does-not-exist/"})
	for i := range 30 {
		h.deleteAndWant(t, pod, false, ReasonGitHubError)
		if i%6 == 5 {
			h.clock.Advance(time.Second) // 30 deletes in 5 seconds
		}
	}
	if got := h.github.Count(""); got > 2 {
		t.Errorf("GitHub requests for 30 deletes of one pod in a missing repository = %d, want at most 2", got)
	}
}

// A pod whose decision failed (GitHub answering 502) does not reach GitHub
// again for a backoff doubling from 1s, however often it is deleted.
func TestHandlerFailedDecisionBacksOff(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	h := newHarness(t, Config{}, pod)
	h.github.AddRunner(acme(), "runner-1")
	h.github.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: http.StatusBadGateway})
	for _, step := range []struct {
		advance time.Duration
		asks    bool
	}{
		{0, true}, {0, false}, {500 * time.Millisecond, false}, {500 * time.Millisecond, true}, // 1s
		{time.Second, false}, {time.Second, true}, // 2s
		{3 * time.Second, false}, {time.Second, true}, // 4s
	} {
		h.clock.Advance(step.advance)
		before := h.github.Count("")
		h.deleteAndWant(t, pod, false, ReasonGitHubError)
		asked := h.github.Count("") > before
		if asked != step.asks {
			t.Fatalf("after %s more: asked GitHub %v, want %v", step.advance, asked, step.asks)
		}
	}
	h.github.ClearFaults()
	h.clock.Advance(8 * time.Second)
	h.deleteAndWant(t, pod, true, ReasonUnregistered)
}

// Under 5 % of GitHub's hourly limit left, runner-guard holds re-checks for
// releases. That hold is its own: a runner busy lately is refused
// (github-budget-spent), not let go by onError: allow without a request.
func TestHandlerHourlyReserveNeverReachesOnError(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	h := newHarness(t, Config{OnError: OnErrorAllow}, pod)
	h.github.AddRunner(acme(), "runner-1")
	h.github.SetBusy(acme(), "runner-1", true)
	h.github.SetRateLimit(5000, 100, h.clock.Now().Add(time.Hour))
	h.deleteAndWant(t, pod, false, ReasonRunnerBusy) // GitHub: 422, and 100 of 5,000 left
	h.clock.Advance(DefaultBusyRetryAfter)           // the remembered "busy" is no longer trusted
	before := h.github.Count("")
	h.deleteAndWant(t, pod, false, ReasonBudgetSpent)
	if got := h.github.Count("") - before; got != 0 {
		t.Errorf("GitHub requests under the hourly reserve = %d, want 0", got)
	}
}

// A runner whose job ended is let go at the next retry of its eviction
// (kubectl drain's 5 s), not one listing's lifetime later: a listing that
// shows it busy is renewed once ghclient.ListedBusyMaxAge old, conditionally
// (304s while nothing changed).
// An eviction runner-guard's drain sends once it has unregistered the
// runner (on another replica, whose memory this one does not share) is asked
// of GitHub, not refused on a listing taken while the job ran: that would
// keep a pod whose runner is gone. Unmarked, the listing still answers.
func TestHandlerReleasedEvictionAsksGitHub(t *testing.T) {
	h, pod := busyRunnerHarness(t)
	h.deleteAndWant(t, pod, false, ReasonRunnerBusy)
	h.deleteAndWant(t, pod, false, ReasonListedBusy) // a listing taken while the job runs
	h.github.SetBusy(acme(), "runner-1", false)
	h.github.RemoveRunnerByName(acme(), "runner-1") // the drain unregistered it
	deletes := h.github.Count("DELETE")
	for name, r := range map[string]request{
		"unmarked eviction":               {op: OperationEvict, pod: pod, user: drainUser},
		"eviction marked by someone else": {op: OperationEvict, pod: pod, user: "tenant", released: true},
	} {
		if _, out := h.post(t, reviewJSON(t, r)); out.Response.Allowed || !strings.Contains(out.Response.Result.Message, string(ReasonListedBusy)) {
			t.Errorf("%s: allowed = %v, result %+v; want refused %s", name, out.Response.Allowed, out.Response.Result, ReasonListedBusy)
		}
	}
	if got := h.github.Count("DELETE"); got != deletes {
		t.Errorf("%d DELETEs for evictions not marked by runner-guard's drain; want none", got-deletes)
	}
	if _, out := h.post(t, reviewJSON(t, request{op: OperationEvict, pod: pod, user: drainUser, released: true})); !out.Response.Allowed || h.github.Count("DELETE") != deletes+1 {
		t.Errorf("the drain's eviction: allowed = %v after %d DELETEs, result %+v; want GitHub asked and the pod let go", out.Response.Allowed, h.github.Count("DELETE")-deletes, out.Response.Result)
	}
}

func TestHandlerBusyListingRenewedWithinOneRetry(t *testing.T) {
	h, pod := busyRunnerHarness(t)
	h.deleteAndWant(t, pod, false, ReasonRunnerBusy)
	h.deleteAndWant(t, pod, false, ReasonListedBusy)
	h.clock.Advance(ghclient.ListedBusyMaxAge)
	h.deleteAndWant(t, pod, false, ReasonListedBusy) // renewed: still busy
	h.github.SetBusy(acme(), "runner-1", false)
	h.clock.Advance(ghclient.ListedBusyMaxAge)
	h.deleteAndWant(t, pod, true, ReasonUnregistered)
}
