package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// oneRunner is a RunnerResolver that says every pod is run.
type oneRunner struct{ run *arc.Runner }

func (o oneRunner) Resolve(context.Context, *corev1.Pod) (*arc.Runner, error) { return o.run, nil }
func (o oneRunner) Retire(context.Context, *arc.Runner) error                 { return nil }

// countingGitHub counts questions and answers every one "busy".
type countingGitHub struct {
	noListing
	calls int
}

func (c *countingGitHub) Unregister(context.Context, ghclient.Runner) (ghclient.Outcome, error) {
	c.calls++
	return ghclient.Busy, nil
}

func (c *countingGitHub) Status(context.Context, ghclient.Runner) (ghclient.RunnerStatus, error) {
	c.calls++
	return ghclient.RunnerStatus{State: ghclient.StateBusy, Online: true}, nil
}

// In static credentials mode a scale-set runner registered on another GitHub
// host than --github-url must not be asked at --github-url: that GitHub's
// "not found" would let a busy runner's pod go.
func TestScaleSetRunnerOnAnotherHost(t *testing.T) {
	pod := fixture.MakeScaleSetRunnerPod("ci", "set-1").Running().Obj()
	run := func(base string) *arc.Runner {
		return &arc.Runner{
			Runner:          ghclient.Runner{Scope: fixture.Org("acme"), Name: "set-1", ID: 7},
			BaseURL:         base,
			EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "set-1"},
		}
	}
	tests := map[string]struct {
		base      string
		wantCalls int
		want      Reason
	}{
		"same host as --github-url": {"https://api.github.com/", 1, ReasonRunnerBusy},
		"a GHES host":               {"https://ghes.example.com/api/v3/", 0, ReasonCredentials},
		"a GHE.com host":            {"https://api.acme.ghe.com/", 0, ReasonCredentials},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gh := &countingGitHub{}
			d := newDecider(DefaultConfig(), gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
			d.resolver.runners, d.resolver.githubBase = oneRunner{run(tc.base)}, "https://api.github.com"
			dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "set-1", Pod: pod})
			if dec.Reason != tc.want || dec.Allowed || gh.calls != tc.wantCalls {
				t.Fatalf("decision %s (allowed %v), %d GitHub calls; want %s, refused, %d calls: %s", dec.Reason, dec.Allowed, gh.calls, tc.want, tc.wantCalls, dec.Message)
			}
			if tc.want == ReasonCredentials && !strings.Contains(dec.Message, strings.TrimSuffix(tc.base, "/")) {
				t.Errorf("message does not name the runner's host: %s", dec.Message)
			}
		})
	}
}

// A github.com runner is asked at --github-url whatever it is: an operator
// who points it elsewhere runs a proxy (or, in tests, a fake) for github.com.
func TestScaleSetGitHubComRunnerAskedAtGitHubURL(t *testing.T) {
	pod := fixture.MakeScaleSetRunnerPod("ci", "set-1").Running().Obj()
	gh := &countingGitHub{}
	d := newDecider(DefaultConfig(), gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
	d.resolver.runners = oneRunner{&arc.Runner{Runner: ghclient.Runner{Scope: fixture.Org("acme"), Name: "set-1", ID: 7},
		BaseURL: ghclient.DefaultBaseURL, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "set-1"}}}
	d.resolver.githubBase = "http://127.0.0.1:8080/"
	dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "set-1", Pod: pod})
	if dec.Reason != ReasonRunnerBusy || gh.calls != 1 {
		t.Fatalf("decision %s after %d GitHub calls; want runner-busy after 1: %s", dec.Reason, gh.calls, dec.Message)
	}
}

// ARC's listener writes a job into the EphemeralRunner's status when the job
// starts, and never clears it: a runner whose fields are set is refused with
// no GitHub request. Empty fields prove nothing, so the DELETE decides; bypass
// users (pod GC after a node died) get their look-up, since the fields stay
// set on a runner whose node died mid-job.
func TestScaleSetJobFieldsProveBusy(t *testing.T) {
	pod := fixture.MakeScaleSetRunnerPod("ci", "set-1").Running().Obj()
	job := arc.Job{RequestID: 31, ID: "job-9", Repository: "acme/app", WorkflowRunID: 4242, DisplayName: "build"}
	tests := map[string]struct {
		job       arc.Job
		op        Operation
		user      string
		dryRun    bool
		wantCalls int
		want      Reason
		wantCode  int32
	}{
		"job fields set: refused without GitHub":   {job: job, op: OperationDelete, want: ReasonJobRunning, wantCode: http.StatusForbidden},
		"job fields set, eviction: a 429":          {job: job, op: OperationEvict, want: ReasonJobRunning, wantCode: http.StatusTooManyRequests},
		"only the request ID set: still proof":     {job: arc.Job{RequestID: 31}, op: OperationDelete, want: ReasonJobRunning, wantCode: http.StatusForbidden},
		"dry run with job fields":                  {job: job, op: OperationDelete, dryRun: true, want: ReasonJobRunning, wantCode: http.StatusForbidden},
		"empty fields: the DELETE decides":         {op: OperationDelete, wantCalls: 1, want: ReasonRunnerBusy, wantCode: http.StatusForbidden},
		"bypass user with job fields: the look-up": {job: job, op: OperationDelete, user: "system:serviceaccount:kube-system:pod-garbage-collector", wantCalls: 1, want: ReasonBypassBusy, wantCode: http.StatusForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gh := &countingGitHub{}
			d := newDecider(DefaultConfig(), gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
			d.resolver.runners = oneRunner{&arc.Runner{Runner: ghclient.Runner{Scope: fixture.Org("acme"), Name: "set-1", ID: 7, IDTrusted: true},
				BaseURL: ghclient.DefaultBaseURL, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "set-1"}, Job: tc.job}}
			d.resolver.githubBase = ghclient.DefaultBaseURL
			dec, _ := d.decide(context.Background(), review{Operation: tc.op, Namespace: "ci", Name: "set-1", Pod: pod.DeepCopy(),
				DryRun: tc.dryRun, User: authenticationv1.UserInfo{Username: tc.user}})
			if dec.Reason != tc.want || dec.Allowed || dec.Code != tc.wantCode || gh.calls != tc.wantCalls {
				t.Fatalf("decision %s (allowed %v, code %d), %d GitHub calls; want %s, code %d, %d calls: %s",
					dec.Reason, dec.Allowed, dec.Code, gh.calls, tc.want, tc.wantCode, tc.wantCalls, dec.Message)
			}
			if !strings.Contains(dec.Message, "runner busy") {
				t.Errorf("message lacks \"runner busy\": %s", dec.Message)
			}
			if tc.want == ReasonJobRunning && tc.job.Repository != "" && !strings.Contains(dec.Message, "acme/app") {
				t.Errorf("message does not name the job's repository: %s", dec.Message)
			}
		})
	}
}

// spentGitHub's budget is spent: every unregister comes back unsent.
type spentGitHub struct {
	noListing
	byGitHub, reserve bool
}

func (s spentGitHub) Unregister(context.Context, ghclient.Runner) (ghclient.Outcome, error) {
	return 0, fmt.Errorf("remove runner: %w", &ghclient.Spent{Credential: "token:x", RetryAfter: 12 * time.Second, GitHub: s.byGitHub, Reserve: s.reserve})
}

func (s spentGitHub) Status(context.Context, ghclient.Runner) (ghclient.RunnerStatus, error) {
	return ghclient.RunnerStatus{}, fmt.Errorf("list runners: %w", &ghclient.Spent{Credential: "token:x", RetryAfter: 12 * time.Second, GitHub: s.byGitHub, Reserve: s.reserve})
}

// A release the budget cannot send before the deadline is refused with the
// wait, whatever the on-error policy (nothing was decided: GitHub was not
// asked), with a Warning Event; when GitHub's own limit holds the credential,
// the on-error policy decides as for any rate limit.
func TestBudgetSpentRefusesWithTheWait(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	for name, tc := range map[string]struct {
		byGitHub  bool
		reserve   bool
		busyKnown bool   // GitHub said busy lately, no longer trusted
		user      string // the requester; a bypass user's look-up is held back
		onError   OnErrorPolicy
		op        Operation
		want      Reason
		allowed   bool
		wantCode  int32
		wantEvent string
	}{
		"delete, budget spent":                 {op: OperationDelete, onError: OnErrorDeny, want: ReasonBudgetSpent, wantCode: http.StatusServiceUnavailable, wantEvent: EventBudgetSpent},
		"eviction, budget spent":               {op: OperationEvict, onError: OnErrorDeny, want: ReasonBudgetSpent, wantCode: http.StatusTooManyRequests, wantEvent: EventBudgetSpent},
		"on-error allow still refuses":         {op: OperationDelete, onError: OnErrorAllow, want: ReasonBudgetSpent, wantCode: http.StatusServiceUnavailable, wantEvent: EventBudgetSpent},
		"GitHub's limit holds, on-error deny":  {byGitHub: true, op: OperationDelete, onError: OnErrorDeny, want: ReasonRateLimited, wantCode: http.StatusServiceUnavailable, wantEvent: EventRateLimited},
		"GitHub's limit holds, on-error allow": {byGitHub: true, op: OperationDelete, onError: OnErrorAllow, want: ReasonRateLimited, allowed: true, wantEvent: EventRateLimited},
		// runner-guard's own choices never reach the on-error policy.
		"hourly reserve, on-error allow still refuses":             {reserve: true, busyKnown: true, op: OperationDelete, onError: OnErrorAllow, want: ReasonBudgetSpent, wantCode: http.StatusServiceUnavailable, wantEvent: EventBudgetSpent},
		"GitHub's limit holds, runner busy lately, on-error allow": {byGitHub: true, busyKnown: true, op: OperationDelete, onError: OnErrorAllow, want: ReasonBudgetSpent, wantCode: http.StatusServiceUnavailable, wantEvent: EventBudgetSpent},
		"bypass user, budget spent, on-error allow":                {user: "system:serviceaccount:kube-system:pod-garbage-collector", op: OperationDelete, onError: OnErrorAllow, want: ReasonBudgetSpent, wantCode: http.StatusServiceUnavailable, wantEvent: EventBudgetSpent},
		"bypass user, GitHub's limit holds":                        {byGitHub: true, user: "system:serviceaccount:kube-system:pod-garbage-collector", op: OperationDelete, onError: OnErrorAllow, want: ReasonBudgetSpent, wantCode: http.StatusServiceUnavailable, wantEvent: EventBudgetSpent},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.OnError = tc.onError
			if err := cfg.Complete(); err != nil {
				t.Fatal(err)
			}
			clock := fakeclock.New(time.Now())
			d := newDecider(cfg, spentGitHub{byGitHub: tc.byGitHub, reserve: tc.reserve}, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), clock.Now)
			if tc.busyKnown {
				d.busy.busy(targetKey(Target{Scope: fixture.Org("acme"), Name: "runner-1"}), 0)
				clock.Advance(cfg.BusyRetryAfter.Duration) // no longer trusted, still known
			}
			dec, _ := d.decide(context.Background(), review{Operation: tc.op, Namespace: "ci", Name: "runner-1", Pod: pod.DeepCopy(),
				User: authenticationv1.UserInfo{Username: tc.user}})
			if dec.Reason != tc.want || dec.Allowed != tc.allowed || dec.EventReason != tc.wantEvent || (!tc.allowed && dec.Code != tc.wantCode) {
				t.Fatalf("decision %s (allowed %v, code %d, event %q); want %s, allowed %v, code %d, event %q: %s",
					dec.Reason, dec.Allowed, dec.Code, dec.EventReason, tc.want, tc.allowed, tc.wantCode, tc.wantEvent, dec.Message)
			}
			if !strings.Contains(dec.Message, "12s") {
				t.Errorf("message does not say when to retry: %s", dec.Message)
			}
			if tc.op == OperationEvict && dec.RetryAfter != 12*time.Second {
				t.Errorf("retryAfter %s, want the budget's 12s", dec.RetryAfter)
			}
		})
	}
}

// brokenCredentials is ARC's runner whose githubConfigSecret is unusable.
type brokenCredentials struct{ run *arc.Runner }

func (b brokenCredentials) Resolve(context.Context, *corev1.Pod) (*arc.Runner, error) {
	return b.run, &arc.CredentialsError{EphemeralRunner: b.run.EphemeralRunner,
		Secret: types.NamespacedName{Namespace: "ci", Name: "arc-creds"}, Err: errors.New("Secret not found")}
}
func (brokenCredentials) Retire(context.Context, *arc.Runner) error { return nil }

// In ARC credentials mode an unusable Secret leaves the runner ARC's: its
// scope comes from githubConfigUrl, never from the pod's labels (which ARC
// trims or strips), so a bound scope is not read as unbound and let go, and
// a job the listener recorded keeps its pod.
func TestScaleSetBrokenSecretKeepsARCsScope(t *testing.T) {
	pod := fixture.MakeScaleSetRunnerPod("ci", "set-1").Running().Obj() // no scope labels
	tests := map[string]struct {
		job  arc.Job
		want Reason
	}{
		"no job recorded: the on-error policy": {want: ReasonCredentials},
		"a job recorded: refused as busy":      {job: arc.Job{RequestID: 31, Repository: "acme/app"}, want: ReasonJobRunning},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ScopeBindings = []ScopeBinding{{Namespaces: []string{"ci"}, Scopes: []string{"org:acme"}}}
			if err := cfg.Complete(); err != nil {
				t.Fatal(err)
			}
			gh := &countingGitHub{}
			d := newDecider(cfg, gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
			d.resolver.runners = brokenCredentials{&arc.Runner{Runner: ghclient.Runner{Scope: fixture.Org("acme"), Name: "set-1", ID: 7, IDTrusted: true},
				Kind: arc.Kind, BaseURL: ghclient.DefaultBaseURL, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "set-1"}, Job: tc.job}}
			dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "set-1", Pod: pod.DeepCopy()})
			if dec.Reason != tc.want || dec.Allowed || gh.calls != 0 {
				t.Fatalf("decision %s (allowed %v), %d GitHub calls; want %s, refused, none: %s", dec.Reason, dec.Allowed, gh.calls, tc.want, dec.Message)
			}
		})
	}
}

// priorityGitHub records the priority of every question and answers idle.
type priorityGitHub struct {
	noListing
	status, unregister []ghclient.Priority
}

func (p *priorityGitHub) Unregister(ctx context.Context, _ ghclient.Runner) (ghclient.Outcome, error) {
	p.unregister = append(p.unregister, ghclient.PriorityOf(ctx))
	return ghclient.Removed, nil
}

func (p *priorityGitHub) Status(ctx context.Context, _ ghclient.Runner) (ghclient.RunnerStatus, error) {
	p.status = append(p.status, ghclient.PriorityOf(ctx))
	return ghclient.RunnerStatus{State: ghclient.StateIdle, Online: true}, nil
}

// A dry run lets no pod go, so its look-up yields to unregisters that can:
// a tenant's dry runs in a loop cannot spend the budget other teams' deletes
// need. A bypass user's look-up can let a pod go and keeps release priority.
func TestDryRunAsksAtRecheckPriority(t *testing.T) {
	pod := fixture.MakeScaleSetRunnerPod("ci", "set-1").Running().Obj()
	tests := map[string]struct {
		dryRun bool
		user   string
		want   ghclient.Priority
	}{
		"dry run":     {dryRun: true, want: ghclient.PriorityRecheck},
		"bypass user": {user: "system:serviceaccount:kube-system:pod-garbage-collector", want: ghclient.PriorityRelease},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gh := &priorityGitHub{}
			d := newDecider(DefaultConfig(), gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
			d.resolver.runners = oneRunner{&arc.Runner{Runner: ghclient.Runner{Scope: fixture.Org("acme"), Name: "set-1", ID: 7, IDTrusted: true},
				BaseURL: ghclient.DefaultBaseURL, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "set-1"}}}
			dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "set-1", Pod: pod.DeepCopy(),
				DryRun: tc.dryRun, User: authenticationv1.UserInfo{Username: tc.user}})
			if len(gh.status) != 1 || gh.status[0] != tc.want || len(gh.unregister) != 0 {
				t.Fatalf("look-ups at %v, unregisters %v (decision %s); want one look-up at %s and no unregister", gh.status, gh.unregister, dec.Reason, tc.want)
			}
		})
	}
}

// With guardedNamespaces, runner-guard reads pods through a Role in each
// namespace, which a namespace's deletion removes with everything else: a
// runner pod that may no longer be read there is decided from the review's
// copy, so the namespace is not kept Terminating. Elsewhere a read that is
// refused stays a refusal (the on-error policy).
func TestForbiddenPodReadInANamespaceBeingDeleted(t *testing.T) {
	pod := fixture.MakeScaleSetRunnerPod("ci", "set-1").Running().Obj()
	tests := map[string]struct {
		phase     corev1.NamespacePhase
		want      Reason
		allowed   bool
		wantCalls int
	}{
		"namespace being deleted: the review's pod, GitHub asked": {phase: corev1.NamespaceTerminating, want: ReasonUnregistered, allowed: true, wantCalls: 1},
		"namespace active: the read's failure decides":            {phase: corev1.NamespaceActive, want: ReasonPodLookupFailed},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ci"}, Status: corev1.NamespaceStatus{Phase: tc.phase}}
			pods := fake.NewClientBuilder().WithObjects(pod.DeepCopy(), ns).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.Pod); ok {
						return apierrors.NewForbidden(corev1.Resource("pods"), key.Name, errors.New("the Role is gone"))
					}
					return c.Get(ctx, key, obj, opts...)
				}}).Build()
			gh := &priorityGitHub{}
			d := newDecider(DefaultConfig(), gh, pods, time.Now)
			d.resolver.runners = oneRunner{&arc.Runner{Runner: ghclient.Runner{Scope: fixture.Org("acme"), Name: "set-1", ID: 7, IDTrusted: true},
				BaseURL: ghclient.DefaultBaseURL, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "set-1"}}}
			dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "set-1", Pod: pod.DeepCopy()})
			if dec.Reason != tc.want || dec.Allowed != tc.allowed || len(gh.unregister) != tc.wantCalls {
				t.Fatalf("decision %s (allowed %v) after %d unregisters; want %s (allowed %v) after %d: %s",
					dec.Reason, dec.Allowed, len(gh.unregister), tc.want, tc.allowed, tc.wantCalls, dec.Message)
			}
		})
	}
}
