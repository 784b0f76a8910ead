package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// TestResolverProvenance: which facts the resolver takes from where, and
// which of them it trusts.
func TestResolverProvenance(t *testing.T) {
	specs := DefaultConfig().RunnerPods
	legacy, scaleSet := &specs[0], &specs[1]
	er := fixture.MakeEphemeralRunner("ci", "set-1").ConfigURL("https://github.com/acme").RunnerID(7)
	sibling := fixture.MakeEphemeralRunner("ci", "sibling").ConfigURL("https://github.com/acme").RunnerID(8)
	lr := fixture.MakeLegacyRunner("ci", "legacy-1").Org("acme")
	objs := []client.Object{er.Obj(), sibling.Obj(), lr.Obj()}
	forbidden := &interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewForbidden(arc.GroupResource(), "x", errors.New("no"))
	}}
	trusted := func(kind SourceKind) Source { return Source{Kind: kind, Trusted: true} }
	untrusted := func(kind SourceKind) Source { return Source{Kind: kind} }
	tests := map[string]struct {
		pod       *corev1.Pod
		spec      *RunnerPodSpec
		funcs     *interceptor.Funcs
		bindings  []ScopeBinding
		wantName  string
		wantScope ghclient.Scope
		wantID    int64
		wantFrom  Provenance // Detail is not compared
		want      func(resolution) string
	}{
		"an EphemeralRunner's pod: every fact from ARC's object": {
			pod:  fixture.MakeScaleSetRunnerPod("ci", "set-1").Label("actions.github.com/organization", "other-org").OwnedByEphemeralRunner(er).Running().Obj(),
			spec: scaleSet, wantName: "set-1", wantScope: fixture.Org("acme"), wantID: 7,
			wantFrom: Provenance{Name: trusted(SourceARCObject), Scope: trusted(SourceARCObject), ID: trusted(SourceARCObject), Creds: trusted(SourceFlags)},
		},
		"a legacy Runner's pod: scope from the Runner, env ignored, its ID annotation checked": {
			pod:  fixture.MakeLegacyRunnerPod("ci", "legacy-1").Org("other-org").Env("RUNNER_NAME", "victim").RunnerID(42).OwnedByLegacyRunner(lr).Running().Obj(),
			spec: legacy, wantName: "legacy-1", wantScope: fixture.Org("acme"), wantID: 42,
			wantFrom: Provenance{Name: trusted(SourceARCObject), Scope: trusted(SourceARCObject), ID: untrusted(SourcePodAnnotation), Creds: trusted(SourceFlags)},
		},
		"a pod no ARC object controls: the pod's facts, none trusted": {
			pod:  fixture.MakeLegacyRunnerPod("ci", "vm-copy").Org("acme").Env("RUNNER_NAME", "victim").RunnerID(42).Running().Obj(),
			spec: legacy, wantName: "vm-copy", wantScope: fixture.Org("acme"), wantID: 42,
			wantFrom: Provenance{Name: untrusted(SourcePodName), Scope: untrusted(SourcePodEnv), ID: untrusted(SourcePodAnnotation), Creds: trusted(SourceFlags)},
		},
		"a borrowed controller: not the sibling's runner": {
			pod: fixture.MakeScaleSetRunnerPod("ci", "attacker").Owner(metav1.OwnerReference{
				APIVersion: fixture.EphemeralRunnerAPIVersion, Kind: fixture.EphemeralRunnerKind, Name: "sibling", UID: sibling.GetUID(), Controller: ptr.To(true)}).Running().Obj(),
			spec: scaleSet,
			want: func(r resolution) string {
				if r.NotOwner == nil || r.ARC != nil || r.Target.Name == "sibling" {
					return "want NotOwner and no runner"
				}
				return ""
			},
		},
		"ARC's objects unreadable (RBAC): labels, untrusted, and a fallback note": {
			pod:  fixture.MakeScaleSetRunnerPod("ci", "set-1").Label("actions.github.com/organization", "acme").OwnedByEphemeralRunner(er).Running().Obj(),
			spec: scaleSet, funcs: forbidden, wantName: "set-1", wantScope: fixture.Org("acme"),
			wantFrom: Provenance{Name: untrusted(SourcePodName), Scope: untrusted(SourcePodLabels), ID: untrusted(SourcePodAnnotation), Creds: trusted(SourceFlags)},
			want: func(r resolution) string {
				if !strings.Contains(r.Fallback, "Forbidden") {
					return "want a fallback note naming the cause, got " + r.Fallback
				}
				return ""
			},
		},
		"a scope outside the namespace's binding": {
			pod:  fixture.MakeLegacyRunnerPod("ci", "r").Org("other-org").Running().Obj(),
			spec: legacy, bindings: []ScopeBinding{{Name: "ci", Namespaces: []string{"ci"}, Scopes: []string{"org:acme"}}},
			wantName: "r", wantScope: fixture.Org("other-org"),
			wantFrom: Provenance{Name: untrusted(SourcePodName), Scope: untrusted(SourcePodEnv), ID: untrusted(SourcePodAnnotation), Creds: trusted(SourceFlags)},
			want: func(r resolution) string {
				if !strings.Contains(r.NotBound, `scope binding "ci"`) {
					return "want NotBound naming the binding, got " + r.NotBound
				}
				return ""
			},
		},
		"ARC's own object bound too: a tenant's EphemeralRunner cannot name another organisation": {
			pod:  fixture.MakeScaleSetRunnerPod("ci", "set-1").OwnedByEphemeralRunner(er).Running().Obj(),
			spec: scaleSet, bindings: []ScopeBinding{{Namespaces: []string{"ci"}, Scopes: []string{"org:team-org"}}},
			wantName: "set-1", wantScope: fixture.Org("acme"), wantID: 7,
			wantFrom: Provenance{Name: trusted(SourceARCObject), Scope: trusted(SourceARCObject), ID: trusted(SourceARCObject), Creds: trusted(SourceFlags)},
			want: func(r resolution) string {
				if r.NotBound == "" {
					return "want NotBound"
				}
				return ""
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithObjects(objs...)
			if tc.funcs != nil {
				b = b.WithInterceptorFuncs(*tc.funcs)
			}
			cfg := Config{ScopeBindings: tc.bindings}
			if err := cfg.Complete(); err != nil {
				t.Fatal(err)
			}
			rs := resolver{runners: arc.NewResolver(arc.Options{Reader: b.Build()}), bindings: compileBindings(cfg.ScopeBindings), fallbacks: newFallbackMemory()}
			got := rs.resolve(context.Background(), tc.pod, tc.spec)
			if tc.want != nil {
				if msg := tc.want(got); msg != "" {
					t.Fatalf("%s: %+v", msg, got)
				}
			}
			if tc.wantName == "" {
				return
			}
			tg := got.Target
			if tg.Name != tc.wantName || tg.Scope != tc.wantScope || tg.IDHint != tc.wantID {
				t.Fatalf("runner %q in %s, ID %d; want %q in %s, ID %d", tg.Name, tg.Scope, tg.IDHint, tc.wantName, tc.wantScope, tc.wantID)
			}
			for _, f := range []struct {
				what      string
				got, want Source
			}{{"name", tg.From.Name, tc.wantFrom.Name}, {"scope", tg.From.Scope, tc.wantFrom.Scope}, {"ID", tg.From.ID, tc.wantFrom.ID}, {"credentials", tg.From.Creds, tc.wantFrom.Creds}} {
				if f.got.Kind != f.want.Kind || f.got.Trusted != f.want.Trusted {
					t.Errorf("%s from %s, want %s", f.what, f.got, f.want)
				}
			}
			if r := tg.runner(); r.IDTrusted != (tg.IDHint > 0 && tc.wantFrom.ID.Trusted) {
				t.Errorf("ghclient.Runner.IDTrusted = %v for an ID from %s", r.IDTrusted, tg.From.ID)
			}
		})
	}
}

// statusGitHub answers every look-up "idle" and counts them.
type statusGitHub struct {
	noListing
	unregisters, statuses int
}

func (s *statusGitHub) Unregister(context.Context, ghclient.Runner) (ghclient.Outcome, error) {
	s.unregisters++
	return ghclient.Removed, nil
}

func (s *statusGitHub) Status(context.Context, ghclient.Runner) (ghclient.RunnerStatus, error) {
	s.statuses++
	return ghclient.RunnerStatus{State: ghclient.StateIdle, ID: 1, Online: true}, nil
}

// A loop of forged dry-run reviews for one live runner pod costs GitHub one
// look-up per memory window, and never an unregister.
func TestForgedDryRunsCostOneLookUpPerWindow(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	clock := fakeclock.New(time.Now())
	gh := &statusGitHub{}
	d := newDecider(DefaultConfig(), gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), clock.Now)
	dryRun := func() Decision {
		dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "runner-1", Pod: pod.DeepCopy(), DryRun: true})
		return dec
	}
	for i := range 200 {
		if dec := dryRun(); dec.Reason != ReasonDryRunIdle {
			t.Fatalf("review %d: %s: %s", i, dec.Reason, dec.Message)
		}
	}
	if gh.statuses != 1 || gh.unregisters != 0 {
		t.Fatalf("200 dry runs cost %d look-ups and %d unregisters; want 1 and 0", gh.statuses, gh.unregisters)
	}
	clock.Advance(DefaultReadOnlyMemoryTTL)
	dryRun()
	if gh.statuses != 2 {
		t.Errorf("after the memory window: %d look-ups, want 2", gh.statuses)
	}
	// A real delete is never answered from the read-only memory.
	if dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "runner-1", Pod: pod.DeepCopy()}); dec.Reason != ReasonUnregistered || gh.unregisters != 1 {
		t.Errorf("delete after dry runs: %s with %d unregisters; want unregistered with 1", dec.Reason, gh.unregisters)
	}
}

// A bypass user's delete lets the pod go on "idle": it never trusts a
// remembered "idle" (a dry run's, moments ago), only a remembered "busy".
func TestBypassNeverReusesARememberedIdle(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	gh := &statusGitHub{}
	d := newDecider(DefaultConfig(), gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
	bypass := review{Operation: OperationDelete, Namespace: "ci", Name: "runner-1", Pod: pod.DeepCopy(),
		User: authenticationv1.UserInfo{Username: DefaultBypassUsers()[0]}}
	if dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "runner-1", Pod: pod.DeepCopy(), DryRun: true}); dec.Reason != ReasonDryRunIdle {
		t.Fatalf("dry run: %s", dec.Reason)
	}
	if dec, _ := d.decide(context.Background(), bypass); dec.Reason != ReasonBypassUser || gh.statuses != 2 {
		t.Fatalf("bypass after an idle dry run: %s after %d look-ups; want bypass-user after asking GitHub again (2)", dec.Reason, gh.statuses)
	}
	// A remembered "busy" is reused: it only keeps the pod.
	d.statuses.remember(statusKey(d.resolver.resolve(context.Background(), pod, &d.specs[0]).Target),
		githubResult{Status: &ghclient.RunnerStatus{State: ghclient.StateBusy, Online: true}})
	if dec, _ := d.decide(context.Background(), bypass); dec.Reason != ReasonBypassBusy || gh.statuses != 2 {
		t.Errorf("bypass with a remembered busy: %s after %d look-ups; want bypass-runner-busy from memory", dec.Reason, gh.statuses)
	}
}

// The decisions for pods the resolver will not ask GitHub about make no
// request at all.
func TestUnaskableRunnersCostNoRequest(t *testing.T) {
	sibling := fixture.MakeEphemeralRunner("ci", "sibling").ConfigURL("https://github.com/acme").RunnerID(8)
	tests := map[string]struct {
		pod      *corev1.Pod
		bindings []ScopeBinding
		want     Reason
		event    string
	}{
		"borrowed controller": {
			pod: fixture.MakeScaleSetRunnerPod("ci", "attacker").Owner(metav1.OwnerReference{
				APIVersion: fixture.EphemeralRunnerAPIVersion, Kind: fixture.EphemeralRunnerKind, Name: "sibling", UID: sibling.GetUID(), Controller: ptr.To(true)}).Running().Obj(),
			want: ReasonNotOwner, event: EventNotOwner,
		},
		"scope outside the binding": {
			pod:      fixture.MakeLegacyRunnerPod("ci", "r").Org("other-org").Running().Obj(),
			bindings: []ScopeBinding{{Namespaces: []string{"ci"}, Scopes: []string{"org:acme"}}},
			want:     ReasonScopeNotBound, event: EventScopeNotBound,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, op := range []Operation{OperationDelete, OperationEvict} {
				for _, dry := range []bool{false, true} {
					cfg := Config{ScopeBindings: tc.bindings}
					if err := cfg.Complete(); err != nil {
						t.Fatal(err)
					}
					gh := &statusGitHub{}
					reader := fake.NewClientBuilder().WithObjects(tc.pod.DeepCopy(), sibling.Obj()).Build()
					d := newDecider(cfg, gh, reader, time.Now)
					d.resolver.runners = arc.NewResolver(arc.Options{Reader: reader})
					dec, _ := d.decide(context.Background(), review{Operation: op, Namespace: "ci", Name: tc.pod.Name, Pod: tc.pod.DeepCopy(), DryRun: dry})
					if dec.Reason != tc.want || !dec.Allowed || dec.Warning == "" || dec.EventReason != tc.event {
						t.Errorf("%s (dry run %v): %s allowed=%v event %q; want %s, allowed with a warning and Event %s: %s", op, dry, dec.Reason, dec.Allowed, dec.EventReason, tc.want, tc.event, dec.Message)
					}
					if gh.statuses+gh.unregisters != 0 {
						t.Errorf("%s (dry run %v): %d GitHub requests, want 0", op, dry, gh.statuses+gh.unregisters)
					}
				}
			}
		})
	}
}

// retireCounter counts the EphemeralRunners handed over for retiring.
type retireCounter struct{ retires int }

func (r *retireCounter) Add(arc.Runner, types.UID) { r.retires++ }

// Only EphemeralRunners are retired: a legacy Runner's controller replaces its pod itself.
func TestUnregisteredLegacyRunnerIsNotRetired(t *testing.T) {
	lr := fixture.MakeLegacyRunner("ci", "legacy-1").Org("acme")
	pod := fixture.MakeLegacyRunnerPod("ci", "legacy-1").OwnedByLegacyRunner(lr).RunnerID(5).Running().Obj()
	reader := fake.NewClientBuilder().WithObjects(pod.DeepCopy(), lr.Obj()).Build()
	gh := &statusGitHub{}
	d := newDecider(DefaultConfig(), gh, reader, time.Now)
	rc := &retireCounter{}
	d.resolver.runners, d.retirements = arc.NewResolver(arc.Options{Reader: reader}), rc
	dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "legacy-1", Pod: pod})
	if dec.Reason != ReasonUnregistered || rc.retires != 0 || strings.Contains(dec.Message, "retir") {
		t.Errorf("%s, %d retires: %s; want unregistered and no retire", dec.Reason, rc.retires, dec.Message)
	}
}

// An unregister that could not end before the API server gives up is never
// started, whatever the on-error policy.
func TestUnregisterNotStartedTooCloseToTheDeadline(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	for _, onErr := range []OnErrorPolicy{OnErrorDeny, OnErrorAllow} {
		for op, code := range map[Operation]int32{OperationDelete: 503, OperationEvict: 429} {
			gh := &statusGitHub{}
			cfg := Config{OnError: onErr}
			if err := cfg.Complete(); err != nil {
				t.Fatal(err)
			}
			d := newDecider(cfg, gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
			// 9.5 s of the 10 s are gone: the deadline (1 s before) is 0.5 s away.
			arrived := time.Now().Add(-cfg.WebhookTimeout.Duration + deadlineMargin + 500*time.Millisecond)
			dec, _ := d.decide(context.Background(), review{Operation: op, Namespace: "ci", Name: "runner-1", Pod: pod.DeepCopy(), Arrived: arrived})
			if dec.Allowed || dec.Reason != ReasonDeadline || dec.Code != code || gh.unregisters != 0 {
				t.Errorf("%s, on-error %s: allowed=%v %s %d after %d unregisters; want %s %d and none sent: %s",
					op, onErr, dec.Allowed, dec.Reason, dec.Code, gh.unregisters, ReasonDeadline, code, dec.Message)
			}
		}
	}
	// With time left the same review unregisters.
	gh := &statusGitHub{}
	d := newDecider(DefaultConfig(), gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
	if dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "runner-1", Pod: pod.DeepCopy(), Arrived: time.Now()}); dec.Reason != ReasonUnregistered || gh.unregisters != 1 {
		t.Errorf("with time left: %s after %d unregisters", dec.Reason, gh.unregisters)
	}
}

// A legacy runner registered at another GitHub than github.com (its pod's
// GITHUB_URL, which ARC sets from its own GitHub URL) is not asked at
// github.com, the default --github-url, whose "not found" would let a busy
// runner's pod go. A --github-url the operator set is taken as asking the
// right GitHub (a proxy, another name of the same server).
func TestLegacyRunnerOfAnotherGitHub(t *testing.T) {
	legacy := &DefaultConfig().RunnerPods[0]
	for name, tc := range map[string]struct {
		githubURL, base string
		wantErr         bool
	}{
		"github.com, asked at api.github.com":                {githubURL: "https://github.com/", base: ghclient.DefaultBaseURL},
		"github.com in another case":                         {githubURL: "https://GitHub.com", base: "https://api.github.com"},
		"github.com, asked at another base (a proxy)":        {githubURL: "https://github.com/", base: "https://ghes.example.com/api/v3/"},
		"GHES, asked at its API":                             {githubURL: "https://ghes.example.com/", base: "https://ghes.example.com/api/v3/"},
		"ghe.com, asked at api.HOST":                         {githubURL: "https://acme.ghe.com/", base: "https://api.acme.ghe.com/"},
		"a fake on a port, asked there":                      {githubURL: "http://10.0.0.9:8080", base: "http://10.0.0.9:8080/"},
		"a GitHub asked under another name (the operator's)": {githubURL: "http://fake.ns.svc:8080", base: "http://127.0.0.1:8080/"},
		"no GITHUB_URL":                                      {base: ghclient.DefaultBaseURL},
		"GHES, asked at api.github.com":                      {githubURL: "https://ghes.example.com/", base: ghclient.DefaultBaseURL, wantErr: true},
		"ghe.com, asked at api.github.com":                   {githubURL: "https://acme.ghe.com/", base: "https://api.github.com", wantErr: true},
		"not a URL: not read (the scope decides as ever)":    {githubURL: "::", base: ghclient.DefaultBaseURL},
	} {
		t.Run(name, func(t *testing.T) {
			pod := fixture.MakeLegacyRunnerPod("ci", "r1").Org("acme")
			if tc.githubURL != "" {
				pod.Env("GITHUB_URL", tc.githubURL)
			}
			err := otherGitHub(pod.Obj(), legacy, tc.base)
			if (err != nil) != tc.wantErr {
				t.Fatalf("otherGitHub = %v, want an error: %v", err, tc.wantErr)
			}
			if err != nil && (!strings.Contains(err.Error(), "GITHUB_URL="+tc.githubURL) || !strings.Contains(err.Error(), "--github-url")) {
				t.Errorf("error %q should name the env var, its value and the flag", err)
			}
		})
	}
}

// The decision: a legacy runner of a GHES while runner-guard asks github.com
// is refused as credentials-unusable with no GitHub request (deny, the
// default on-error policy), and one of the GitHub asked is decided by GitHub.
func TestLegacyRunnerOfAnotherGitHubIsNotAskedThere(t *testing.T) {
	for name, tc := range map[string]struct {
		githubURL string
		wantCalls int
		want      Reason
	}{
		"github.com": {"https://github.com/", 1, ReasonRunnerBusy},
		"a GHES":     {"https://ghes.example.com/", 0, ReasonCredentials},
	} {
		t.Run(name, func(t *testing.T) {
			pod := fixture.MakeLegacyRunnerPod("ci", "r1").Org("acme").Env("GITHUB_URL", tc.githubURL).Running().Obj()
			gh := &countingGitHub{}
			d := newDecider(DefaultConfig(), gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
			d.resolver.githubBase = ghclient.DefaultBaseURL
			dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "r1", Pod: pod})
			if dec.Reason != tc.want || dec.Allowed || gh.calls != tc.wantCalls {
				t.Fatalf("decision %s (allowed %v), %d GitHub calls; want %s, refused, %d calls: %s", dec.Reason, dec.Allowed, gh.calls, tc.want, tc.wantCalls, dec.Message)
			}
			if tc.want == ReasonCredentials && !strings.Contains(dec.Message, "GITHUB_URL=https://ghes.example.com/") {
				t.Errorf("message does not name the pod's GitHub: %s", dec.Message)
			}
		})
	}
}

// A webhook configuration whose timeoutSeconds is shorter than
// --webhook-timeout (FitTimeout, from the activation controller) shortens
// the deadline: a review that would still have time under --webhook-timeout
// starts no unregister once the API server has given up on it.
func TestFitTimeoutShortensTheDeadline(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	gh := &statusGitHub{}
	d := newDecider(DefaultConfig(), gh, fake.NewClientBuilder().WithObjects(pod.DeepCopy()).Build(), time.Now)
	h := &Handler{decider: d}
	h.FitTimeout(3 * time.Second)
	arrived := time.Now().Add(-2500 * time.Millisecond) // 7.5 s left of 10, none of 3
	dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "runner-1", Pod: pod.DeepCopy(), Arrived: arrived})
	if dec.Reason != ReasonDeadline || gh.unregisters != 0 {
		t.Errorf("%s after %d unregisters; want %s and none sent", dec.Reason, gh.unregisters, ReasonDeadline)
	}
	h.FitTimeout(DefaultConfig().WebhookTimeout.Duration)
	if dec, _ := d.decide(context.Background(), review{Operation: OperationDelete, Namespace: "ci", Name: "runner-1", Pod: pod.DeepCopy(), Arrived: arrived}); dec.Reason != ReasonUnregistered {
		t.Errorf("timeouts alike again: %s", dec.Reason)
	}
}
