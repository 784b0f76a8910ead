package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// Shared fixtures of the rule tests.
var (
	testOrg, _  = ghclient.OrgScope("acme")
	testTarget  = Target{Scope: testOrg, Name: "runner-1"}
	legacySpec  = &DefaultConfig().RunnerPods[0]
	runningPod  = fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	defaultPol  = testPolicy(OnErrorDeny)
	deleteOnPod = review{Operation: OperationDelete, Namespace: "ci", Name: "runner-1", Pod: runningPod, Spec: legacySpec}
)

func testPolicy(onErr OnErrorPolicy) policy {
	cfg := DefaultConfig()
	cfg.OnError = onErr
	return cfg.policy()
}

// answered is r after the runner was resolved to testTarget and GitHub answered res.
func answered(r review, res githubResult) *review {
	r.Target, r.GitHub = testTarget, res
	return &r
}

func withOp(r review, op Operation) review { r.Operation = op; return r }
func withDryRun(r review) review           { r.DryRun = true; return r }

// wantDecision is what a rule test asserts; applies=false means the rule must pass.
type wantDecision struct {
	applies    bool
	allowed    bool
	reason     Reason
	code       int32
	retryAfter time.Duration
	msg        []string
	warning    bool
	event      string
}

func checkDecision(t *testing.T, got Decision, applied bool, want wantDecision) {
	t.Helper()
	if applied != want.applies {
		t.Fatalf("rule applied = %v, want %v (decision %+v)", applied, want.applies, got)
	}
	if !applied {
		return
	}
	if got.Allowed != want.allowed || got.Reason != want.reason {
		t.Errorf("decision = allowed %v reason %q, want allowed %v reason %q", got.Allowed, got.Reason, want.allowed, want.reason)
	}
	if !got.Allowed && got.Code != want.code {
		t.Errorf("code = %d, want %d", got.Code, want.code)
	}
	if got.RetryAfter != want.retryAfter {
		t.Errorf("retryAfter = %s, want %s", got.RetryAfter, want.retryAfter)
	}
	for _, m := range want.msg {
		if !strings.Contains(got.Message, m) {
			t.Errorf("message %q does not contain %q", got.Message, m)
		}
	}
	if (got.Warning != "") != want.warning {
		t.Errorf("warning = %q, want warning: %v", got.Warning, want.warning)
	}
	if got.EventReason != want.event {
		t.Errorf("event = %q, want %q", got.EventReason, want.event)
	}
}

func TestRuleNotRunnerPod(t *testing.T) {
	tests := map[string]struct {
		r    review
		want wantDecision
	}{
		"eviction of a pod that is gone": {review{Operation: OperationEvict}, wantDecision{applies: true, allowed: true, reason: ReasonPodNotFound}},
		"pod without runner spec":        {review{Pod: fixture.MakePod("ci", "web").Running().Obj()}, wantDecision{applies: true, allowed: true, reason: ReasonNotRunnerPod}},
		"runner pod":                     {deleteOnPod, wantDecision{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ruleNotRunnerPod(&tc.r, &defaultPol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}

// TestRulesOnPodState: the rules that read only the pod's state, each case
// keyed by the rule it runs.
func TestRulesOnPodState(t *testing.T) {
	terminating := ruleAlreadyTerminating
	notRunning := ruleRunnerNotRunning
	wantNotRunning := wantDecision{applies: true, allowed: true, reason: ReasonRunnerNotRunning, msg: []string{`"runner"`}}
	withPhase := func(p *corev1.Pod, phase corev1.PodPhase) *corev1.Pod {
		p.Status.Phase = phase
		return p
	}
	tests := map[string]struct {
		rule func(*review, *policy) (Decision, bool)
		pod  *corev1.Pod
		want wantDecision
	}{
		"already terminating: terminating": {terminating, fixture.MakeLegacyRunnerPod("ci", "r").Org("acme").Running().Terminating().Obj(),
			wantDecision{applies: true, allowed: true, reason: ReasonTerminating}},
		"already terminating: not terminating":  {terminating, runningPod, wantDecision{}},
		"runner not running: pending":           {notRunning, fixture.MakeLegacyRunnerPod("ci", "r").Pending().Obj(), wantNotRunning},
		"runner not running: no status at all":  {notRunning, fixture.MakeLegacyRunnerPod("ci", "r").Obj(), wantNotRunning},
		"runner not running: runner terminated": {notRunning, fixture.MakeLegacyRunnerPod("ci", "r").RunnerTerminated().Obj(), wantNotRunning},
		"runner not running: succeeded":         {notRunning, withPhase(fixture.MakeLegacyRunnerPod("ci", "r").Running().Obj(), corev1.PodSucceeded), wantNotRunning},
		"runner not running: failed":            {notRunning, withPhase(fixture.MakeLegacyRunnerPod("ci", "r").Running().Obj(), corev1.PodFailed), wantNotRunning},
		"runner not running: container waits":   {notRunning, withPhase(fixture.MakeLegacyRunnerPod("ci", "r").Pending().Obj(), corev1.PodRunning), wantNotRunning},
		"runner not running: running":           {notRunning, runningPod, wantDecision{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := tc.rule(&review{Pod: tc.pod, Spec: legacySpec}, &defaultPol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}

func TestRuleForceAnnotation(t *testing.T) {
	noForce := testPolicy(OnErrorDeny)
	noForce.ForceAnnotation = ""
	tests := map[string]struct {
		pod  *corev1.Pod
		pol  policy
		want wantDecision
	}{
		"force annotation": {
			pod: fixture.MakeLegacyRunnerPod("ci", "r").Org("acme").Running().Force().Obj(), pol: defaultPol,
			want: wantDecision{applies: true, allowed: true, reason: ReasonForceAnnotation, warning: true, event: EventForcedDelete,
				msg: []string{"runner-guard.io/force-delete=true", "not unregistered"}},
		},
		"force annotation disabled": {pod: fixture.MakeLegacyRunnerPod("ci", "r").Org("acme").Running().Force().Obj(), pol: noForce},
		"force annotation not true": {pod: fixture.MakeLegacyRunnerPod("ci", "r").Org("acme").Running().Annotation(DefaultForceAnnotation, "yes").Obj(), pol: defaultPol},
		"no annotation":             {pod: runningPod, pol: defaultPol},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ruleForceAnnotation(&review{Operation: OperationDelete, Namespace: "ci", Name: "r", Pod: tc.pod, Spec: legacySpec}, &tc.pol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}

func TestRuleBypass(t *testing.T) {
	gc := authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:pod-garbage-collector"}
	nodeCtl := authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:node-controller"}
	alice := authenticationv1.UserInfo{Username: "alice", Groups: []string{"devs", "ops:breakglass"}}
	groups := testPolicy(OnErrorDeny)
	groups.BypassGroups = []string{"ops:breakglass"}
	status := func(s ghclient.RunnerState, online bool) githubResult {
		return githubResult{Status: &ghclient.RunnerStatus{State: s, ID: 7, Online: online}}
	}
	forcedBy := func(reason Reason, msg ...string) wantDecision {
		return wantDecision{applies: true, allowed: true, reason: reason, warning: true, event: EventForcedDelete, msg: append(msg, "not unregistered")}
	}
	refused := wantDecision{applies: true, reason: ReasonBypassBusy, code: http.StatusForbidden, event: EventBypassRefused, msg: []string{"runner busy", "online"}}
	tests := map[string]struct {
		user      authenticationv1.UserInfo
		disrupted bool
		op        Operation
		res       githubResult
		scopeErr  error
		pol       policy
		want      wantDecision
	}{
		"GC, runner offline":               {user: gc, res: status(ghclient.StateBusy, false), pol: defaultPol, want: forcedBy(ReasonBypassUser, "bypass list", "offline")},
		"GC, runner idle":                  {user: gc, res: status(ghclient.StateIdle, true), pol: defaultPol, want: forcedBy(ReasonBypassUser, "bypass list")},
		"GC, runner unknown":               {user: gc, res: status(ghclient.StateNotFound, false), pol: defaultPol, want: forcedBy(ReasonBypassUser)},
		"GC, GitHub fails":                 {user: gc, res: githubResult{Err: errors.New("502")}, pol: defaultPol, want: forcedBy(ReasonBypassUser, "502")},
		"GC, scope unknown":                {user: gc, scopeErr: errors.New("no scope"), pol: defaultPol, want: forcedBy(ReasonBypassUser, "no scope")},
		"node controller, online and busy": {user: nodeCtl, res: status(ghclient.StateBusy, true), pol: defaultPol, want: refused},
		"node controller evicting, busy": {user: nodeCtl, op: OperationEvict, res: status(ghclient.StateBusy, true), pol: defaultPol,
			want: wantDecision{applies: true, reason: ReasonBypassBusy, code: http.StatusTooManyRequests, retryAfter: DefaultBusyRetryAfter, event: EventBypassRefused, msg: []string{"runner busy"}}},
		"bypass group, online and busy":  {user: alice, res: status(ghclient.StateBusy, true), pol: groups, want: refused},
		"bypass group, idle":             {user: alice, res: status(ghclient.StateIdle, true), pol: groups, want: forcedBy(ReasonBypassUser, `bypass group "ops:breakglass"`)},
		"disrupted pod, online and busy": {user: alice, disrupted: true, res: status(ghclient.StateBusy, true), pol: defaultPol, want: refused},
		"disrupted pod, offline":         {user: alice, disrupted: true, res: status(ghclient.StateBusy, false), pol: defaultPol, want: forcedBy(ReasonDisrupted, "DisruptionTarget")},
		"ordinary user":                  {user: authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:masters"}}, res: status(ghclient.StateBusy, true), pol: defaultPol},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := answered(deleteOnPod, tc.res)
			r.User, r.Disrupted, r.ScopeErr = tc.user, tc.disrupted, tc.scopeErr
			if tc.op != "" {
				r.Operation = tc.op
			}
			got, ok := ruleBypass(r, &tc.pol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}

func TestRuleScopeUnknown(t *testing.T) {
	scopeErr := errors.New("no runner scope found: pod sets none of env RUNNER_REPO")
	tests := map[string]struct {
		err  error
		pol  policy
		want wantDecision
	}{
		"scope found": {nil, defaultPol, wantDecision{}},
		"deny": {scopeErr, defaultPol, wantDecision{applies: true, reason: ReasonScopeUnknown, code: http.StatusForbidden,
			msg: []string{"ci/runner-1", "RUNNER_REPO", "--on-error=deny"}, event: EventScopeUnknown}},
		"allow": {scopeErr, testPolicy(OnErrorAllow), wantDecision{applies: true, allowed: true, reason: ReasonScopeUnknown, warning: true,
			msg: []string{"RUNNER_REPO", "--on-error=allow"}, event: EventScopeUnknown}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := deleteOnPod
			r.ScopeErr = tc.err
			got, ok := ruleScopeUnknown(&r, &tc.pol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}

func TestRuleDryRun(t *testing.T) {
	status := func(s ghclient.RunnerState) githubResult {
		return githubResult{Status: &ghclient.RunnerStatus{State: s, ID: 7}}
	}
	tests := map[string]struct {
		r    review
		res  githubResult
		want wantDecision
	}{
		"not a dry run": {deleteOnPod, githubResult{Outcome: ghclient.Removed}, wantDecision{}},
		"busy delete": {withDryRun(deleteOnPod), status(ghclient.StateBusy), wantDecision{applies: true, reason: ReasonDryRunBusy, code: http.StatusForbidden,
			msg: []string{"runner busy", `"runner-1"`, `org "acme"`}, event: EventRunnerBusy}},
		"busy eviction": {withDryRun(withOp(deleteOnPod, OperationEvict)), status(ghclient.StateBusy), wantDecision{applies: true, reason: ReasonDryRunBusy,
			code: http.StatusTooManyRequests, retryAfter: DefaultBusyRetryAfter, msg: []string{"runner busy"}, event: EventRunnerBusy}},
		"idle":           {withDryRun(deleteOnPod), status(ghclient.StateIdle), wantDecision{applies: true, allowed: true, reason: ReasonDryRunIdle, msg: []string{"dry run", "idle"}}},
		"not found":      {withDryRun(deleteOnPod), status(ghclient.StateNotFound), wantDecision{applies: true, allowed: true, reason: ReasonDryRunNotFound}},
		"look-up failed": {withDryRun(deleteOnPod), githubResult{Err: errors.New("boom")}, wantDecision{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ruleDryRun(answered(tc.r, tc.res), &defaultPol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}

func TestRuleUnregistered(t *testing.T) {
	tests := map[string]struct {
		r    review
		res  githubResult
		want wantDecision
	}{
		"removed":   {deleteOnPod, githubResult{Outcome: ghclient.Removed}, wantDecision{applies: true, allowed: true, reason: ReasonUnregistered, event: EventRunnerUnregistered, msg: []string{"unregistered"}}},
		"not found": {deleteOnPod, githubResult{Outcome: ghclient.NotFound}, wantDecision{applies: true, allowed: true, reason: ReasonRunnerNotFound}},
		"busy":      {deleteOnPod, githubResult{Outcome: ghclient.Busy}, wantDecision{}},
		"error":     {deleteOnPod, githubResult{Outcome: ghclient.Removed, Err: errors.New("x")}, wantDecision{}},
		"dry run":   {withDryRun(deleteOnPod), githubResult{Outcome: ghclient.Removed}, wantDecision{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ruleUnregistered(answered(tc.r, tc.res), &defaultPol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}

func TestRuleRunnerBusy(t *testing.T) {
	noForce := testPolicy(OnErrorDeny)
	noForce.ForceAnnotation = ""
	tests := map[string]struct {
		r    review
		res  githubResult
		pol  policy
		want wantDecision
	}{
		"delete": {deleteOnPod, githubResult{Outcome: ghclient.Busy}, defaultPol, wantDecision{applies: true, reason: ReasonRunnerBusy, code: http.StatusForbidden,
			event: EventRunnerBusy, msg: []string{"runner busy", `"runner-1"`, `org "acme"`, "ci/runner-1", "wait for the job", "runner-guard.io/force-delete=true"}}},
		"eviction": {withOp(deleteOnPod, OperationEvict), githubResult{Outcome: ghclient.Busy}, defaultPol, wantDecision{applies: true, reason: ReasonRunnerBusy,
			code: http.StatusTooManyRequests, retryAfter: DefaultBusyRetryAfter, event: EventRunnerBusy, msg: []string{"runner busy", "refused to evict", "retried in 10s"}}},
		"force disabled: no hint": {deleteOnPod, githubResult{Outcome: ghclient.Busy}, noForce, wantDecision{applies: true, reason: ReasonRunnerBusy, code: http.StatusForbidden,
			event: EventRunnerBusy, msg: []string{"runner busy"}}},
		"removed": {deleteOnPod, githubResult{Outcome: ghclient.Removed}, defaultPol, wantDecision{}},
		"dry run": {withDryRun(deleteOnPod), githubResult{Outcome: ghclient.Busy}, defaultPol, wantDecision{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ruleRunnerBusy(answered(tc.r, tc.res), &tc.pol)
			checkDecision(t, got, ok, tc.want)
			if name == "force disabled: no hint" && strings.Contains(got.Message, "force-delete") {
				t.Errorf("message mentions a disabled force annotation: %q", got.Message)
			}
		})
	}
}

func TestRuleRateLimited(t *testing.T) {
	rl := func(d time.Duration) error {
		return fmt.Errorf("unregister: %w", &ghclient.RateLimited{RetryAfter: d, Err: errors.New("403")})
	}
	tests := map[string]struct {
		op   Operation
		res  githubResult
		pol  policy
		want wantDecision
	}{
		"delete: answered at once, no Retry-After": {op: OperationDelete, res: githubResult{Err: rl(30 * time.Second)}, pol: defaultPol,
			want: wantDecision{applies: true, reason: ReasonRateLimited, code: 503, event: EventRateLimited, msg: []string{"rate limit", "retry in 30s", `"runner-1"`, "--on-error=deny"}}},
		"eviction: 429 with the limit's wait": {op: OperationEvict, res: githubResult{Err: rl(30 * time.Second)}, pol: defaultPol,
			want: wantDecision{applies: true, reason: ReasonRateLimited, code: 429, retryAfter: 30 * time.Second, event: EventRateLimited, msg: []string{"retry in 30s"}}},
		"eviction under a second rounds up": {op: OperationEvict, res: githubResult{Err: rl(100 * time.Millisecond)}, pol: defaultPol,
			want: wantDecision{applies: true, reason: ReasonRateLimited, code: 429, retryAfter: time.Second, event: EventRateLimited, msg: []string{"retry in 1s"}}},
		"on-error allow lets it go": {op: OperationDelete, res: githubResult{Err: rl(30 * time.Second)}, pol: testPolicy(OnErrorAllow),
			want: wantDecision{applies: true, allowed: true, reason: ReasonRateLimited, warning: true, event: EventRateLimited, msg: []string{"--on-error=allow"}}},
		"other error": {op: OperationDelete, res: githubResult{Err: errors.New("500")}, pol: defaultPol},
		"no error":    {op: OperationDelete, res: githubResult{Outcome: ghclient.Removed}, pol: defaultPol},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ruleRateLimited(answered(withOp(deleteOnPod, tc.op), tc.res), &tc.pol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}

func TestRuleGitHubError(t *testing.T) {
	err := errors.New("remove runner: 502 Bad Gateway")
	tests := map[string]struct {
		r    review
		pol  policy
		res  githubResult
		want wantDecision
	}{
		"deny delete": {deleteOnPod, defaultPol, githubResult{Err: err}, wantDecision{applies: true, reason: ReasonGitHubError, code: http.StatusServiceUnavailable,
			event: EventGitHubError, msg: []string{"502 Bad Gateway", `"runner-1"`, "--on-error=deny"}}},
		"deny eviction retries": {withOp(deleteOnPod, OperationEvict), defaultPol, githubResult{Err: err}, wantDecision{applies: true, reason: ReasonGitHubError,
			code: http.StatusTooManyRequests, retryAfter: DefaultBusyRetryAfter, event: EventGitHubError, msg: []string{"502"}}},
		"allow": {deleteOnPod, testPolicy(OnErrorAllow), githubResult{Err: err}, wantDecision{applies: true, allowed: true, reason: ReasonGitHubError, warning: true,
			event: EventGitHubError, msg: []string{"502", "--on-error=allow"}}},
		"no error": {deleteOnPod, defaultPol, githubResult{Outcome: ghclient.Busy}, wantDecision{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ruleGitHubError(answered(tc.r, tc.res), &tc.pol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}

func TestRuleExemptNamespace(t *testing.T) {
	pol := testPolicy(OnErrorDeny)
	pol.ExemptNamespaces = append(pol.ExemptNamespaces, "runner-guard-system")
	tests := map[string]struct {
		ns   string
		want wantDecision
	}{
		"kube-system":           {"kube-system", wantDecision{applies: true, allowed: true, reason: ReasonExemptNamespace}},
		"own namespace":         {"runner-guard-system", wantDecision{applies: true, allowed: true, reason: ReasonExemptNamespace}},
		"runner namespace":      {"ci", wantDecision{}},
		"cluster-scoped (none)": {"", wantDecision{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ruleExemptNamespace(&review{Namespace: tc.ns}, &pol)
			checkDecision(t, got, ok, tc.want)
		})
	}
}
