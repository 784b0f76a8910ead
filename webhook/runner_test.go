package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
)

func TestMatchRunnerPod(t *testing.T) {
	specs := DefaultConfig().RunnerPods
	tests := map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"legacy":                       {fixture.MakeLegacyRunnerPod("ci", "r").Obj(), "legacy"},
		"scale set":                    {fixture.MakeScaleSetRunnerPod("ci", "r").Obj(), "scale-set"},
		"scale set label not True":     {fixture.MakePod("ci", "r").Label("actions-ephemeral-runner", "False").Obj(), ""},
		"plain pod":                    {fixture.MakePod("ci", "web").Label("app", "web").Obj(), ""},
		"no labels":                    {fixture.MakePod("ci", "web").Obj(), ""},
		"nil pod (eviction, pod gone)": {nil, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := matchRunnerPod(tc.pod, specs)
			if (got == nil && tc.want != "") || (got != nil && got.Name != tc.want) {
				t.Fatalf("matchRunnerPod = %v, want %q", got, tc.want)
			}
		})
	}
}

func TestPodTarget(t *testing.T) {
	specs := DefaultConfig().RunnerPods
	legacy, scaleSet := &specs[0], &specs[1]
	named := &RunnerPodSpec{Name: "named", Container: "runner", RunnerNameEnv: "RUNNER_NAME", ScopeEnv: legacy.ScopeEnv}
	long := strings.Repeat("a", 58) + "-trim" // ARC's truncation of a 63+ character value
	repo := func(s string) ghclient.Scope { sc, _ := ghclient.RepoScope(s); return sc }
	org := func(s string) ghclient.Scope { sc, _ := ghclient.OrgScope(s); return sc }
	ent := func(s string) ghclient.Scope { sc, _ := ghclient.EnterpriseScope(s); return sc }
	tests := map[string]struct {
		pod     *corev1.Pod
		spec    *RunnerPodSpec
		want    Target
		wantErr string
	}{
		"legacy org with ID annotation": {
			pod: fixture.MakeLegacyRunnerPod("ci", "pod-a").Org("acme").RunnerID(42).Obj(), spec: legacy,
			want: Target{Scope: org("acme"), Name: "pod-a", IDHint: 42},
		},
		"legacy repo beats org and enterprise": {
			pod: fixture.MakeLegacyRunnerPod("ci", "pod-a").Enterprise("big").Org("acme").Repo("acme/app").Obj(), spec: legacy,
			want: Target{Scope: repo("acme/app"), Name: "pod-a"},
		},
		"legacy enterprise": {
			pod: fixture.MakeLegacyRunnerPod("ci", "pod-a").Enterprise("big").Obj(), spec: legacy,
			want: Target{Scope: ent("big"), Name: "pod-a"},
		},
		"legacy RUNNER_NAME naming another runner is ignored: ARC names runners after pods": {
			pod: fixture.MakeLegacyRunnerPod("ci", "pod-a").Env("RUNNER_NAME", "custom").Org("acme").Obj(), spec: legacy,
			want: Target{Scope: org("acme"), Name: "pod-a"},
		},
		"a spec that names runnerNameEnv reads it": {
			pod: fixture.MakeLegacyRunnerPod("ci", "pod-a").Env("RUNNER_NAME", "custom").Org("acme").Obj(), spec: named,
			want: Target{Scope: org("acme"), Name: "custom"},
		},
		"a spec that names runnerNameEnv falls back to the pod name when it is empty": {
			pod: fixture.MakeLegacyRunnerPod("ci", "pod-a").Env("RUNNER_NAME", "").Org("acme").Obj(), spec: named,
			want: Target{Scope: org("acme"), Name: "pod-a"},
		},
		"legacy bad ID annotation is no hint": {
			pod: fixture.MakeLegacyRunnerPod("ci", "pod-a").Org("acme").Annotation("actions-runner/id", "abc").Obj(), spec: legacy,
			want: Target{Scope: org("acme"), Name: "pod-a"},
		},
		"legacy env from a secret is unknown": {
			pod: func() *corev1.Pod {
				p := fixture.MakeLegacyRunnerPod("ci", "pod-a").Obj()
				p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "RUNNER_ORG", ValueFrom: &corev1.EnvVarSource{}})
				return p
			}(), spec: legacy,
			wantErr: "RUNNER_REPO, RUNNER_ORG, RUNNER_ENTERPRISE",
		},
		"legacy no scope": {
			pod: fixture.MakeLegacyRunnerPod("ci", "pod-a").Obj(), spec: legacy,
			wantErr: `no runner scope found: pod sets none of env RUNNER_REPO, RUNNER_ORG, RUNNER_ENTERPRISE in container "runner"`,
		},
		"legacy malformed repo": {
			pod: fixture.MakeLegacyRunnerPod("ci", "pod-a").Repo("justrepo").Obj(), spec: legacy,
			wantErr: "owner/repo",
		},
		"scale set org": {
			pod: fixture.MakeScaleSetRunnerPod("ci", "set-abc").Label("actions.github.com/organization", "acme").Obj(), spec: scaleSet,
			want: Target{Scope: org("acme"), Name: "set-abc"},
		},
		"scale set repo joins organization as owner": {
			pod: fixture.MakeScaleSetRunnerPod("ci", "set-abc").Label("actions.github.com/organization", "acme").
				Label("actions.github.com/repository", "app").Obj(), spec: scaleSet,
			want: Target{Scope: repo("acme/app"), Name: "set-abc"},
		},
		"scale set enterprise": {
			pod: fixture.MakeScaleSetRunnerPod("ci", "set-abc").Label("actions.github.com/enterprise", "big").Obj(), spec: scaleSet,
			want: Target{Scope: ent("big"), Name: "set-abc"},
		},
		"scale set truncated organization is unknown": {
			pod: fixture.MakeScaleSetRunnerPod("ci", "set-abc").Label("actions.github.com/organization", long).Obj(), spec: scaleSet,
			wantErr: "truncated",
		},
		"scale set truncated repository is unknown": {
			pod: fixture.MakeScaleSetRunnerPod("ci", "set-abc").Label("actions.github.com/organization", "acme").
				Label("actions.github.com/repository", long).Obj(), spec: scaleSet,
			wantErr: "truncated",
		},
		"scale set repository without owner": {
			pod: fixture.MakeScaleSetRunnerPod("ci", "set-abc").Label("actions.github.com/repository", "app").Obj(), spec: scaleSet,
			wantErr: "names no owner",
		},
		"scale set no labels": {
			pod: fixture.MakeScaleSetRunnerPod("ci", "set-abc").Obj(), spec: scaleSet,
			wantErr: "labels actions.github.com/repository, actions.github.com/organization, actions.github.com/enterprise",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := podTarget(tc.pod, tc.spec)
			if checkErr(t, err, tc.wantErr) {
				return
			}
			if got.Scope != tc.want.Scope || got.Name != tc.want.Name || got.IDHint != tc.want.IDHint {
				t.Fatalf("target = %+v, want %+v", got, tc.want)
			}
			// Everything read from the pod is untrusted but the flags' credentials.
			if got.From.Name.Trusted || got.From.Scope.Trusted || got.From.ID.Trusted || !got.From.Creds.Trusted {
				t.Errorf("provenance %+v: facts from the pod must be untrusted", got.From)
			}
		})
	}
}

func TestTruncated(t *testing.T) {
	tests := map[string]struct {
		v    string
		want bool
	}{
		"63 with suffix":    {strings.Repeat("x", 58) + "-trim", true},
		"short with suffix": {"org-trim", false},
		"63 without suffix": {strings.Repeat("x", 63), false},
		"empty":             {"", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := truncated(tc.v); got != tc.want {
				t.Fatalf("truncated(%q) = %v, want %v", tc.v, got, tc.want)
			}
		})
	}
}
