package explain

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

var now = time.Date(2026, 12, 4, 20, 0, 0, 0, time.UTC)

func TestDryRunLine(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	busy := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusTooManyRequests, Reason: metav1.StatusReasonTooManyRequests,
		Message: `admission webhook "pods.runner-guard.io" denied the request: runner busy: runner "r1" of org "acme" is running a job; retry after it ends [reason: dry-run-runner-busy]`}}
	denied := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: `admission webhook "pods.runner-guard.io" denied the request: runner busy [reason: dry-run-runner-busy]`}}
	cases := map[string]struct {
		err                           error
		wantAllowed, wantUnknown      bool
		wantCode                      int32
		wantReason, wantNeeds, wantIn string
	}{
		"allowed":             {err: nil, wantAllowed: true, wantIn: "allowed"},
		"refused by a 429":    {err: busy, wantCode: 429, wantReason: "dry-run-runner-busy", wantIn: "refused (429, dry-run-runner-busy): runner busy"},
		"refused by a 403":    {err: denied, wantCode: 403, wantReason: "dry-run-runner-busy", wantIn: "refused (403, dry-run-runner-busy)"},
		"RBAC says no":        {err: apierrors.NewForbidden(pods, "r1", errors.New(`User "alice" cannot delete resource "pods"`)), wantUnknown: true, wantNeeds: "delete pods in namespace ns", wantIn: "unknown: needs delete pods in namespace ns"},
		"not an API response": {err: errors.New("connection refused"), wantUnknown: true, wantIn: "connection refused"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := dryRunLine(tc.err, needs("delete", "pods", "ns"))
			if got.Allowed != tc.wantAllowed || got.Unknown != tc.wantUnknown || got.Code != tc.wantCode || got.Reason != tc.wantReason || got.Needs != tc.wantNeeds {
				t.Errorf("dryRunLine = %+v", got)
			}
			if !strings.Contains(got.Text, tc.wantIn) {
				t.Errorf("text %q lacks %q", got.Text, tc.wantIn)
			}
			if strings.Contains(got.Text, "admission webhook") {
				t.Errorf("text %q keeps the API server's prefix", got.Text)
			}
		})
	}
}

func TestDecisionLine(t *testing.T) {
	ev := func(reporter, reason, msg string, at time.Time) corev1.Event {
		return corev1.Event{ReportingController: reporter, Reason: reason, Action: "Delete", Message: msg, EventTime: metav1.NewMicroTime(at)}
	}
	cases := map[string]struct {
		events                        []corev1.Event
		wantEvent, wantReason, wantIn string
	}{
		"none":                {wantIn: "none recorded"},
		"only others' Events": {events: []corev1.Event{ev("kubelet", "Killing", "stopping", now)}, wantIn: "none recorded"},
		"the latest of runner-guard's": {
			events: []corev1.Event{
				ev(Reporter, "RunnerBusy", "runner busy [reason: runner-busy]", now.Add(-5*time.Minute)),
				ev("kubelet", "Killing", "stopping", now.Add(-time.Second)),
				ev(Reporter, "RunnerUnregistered", "runner removed [reason: unregistered]", now.Add(-time.Minute)),
			},
			wantEvent: "RunnerUnregistered", wantReason: "unregistered", wantIn: "RunnerUnregistered 1m0s ago on delete: runner removed",
		},
		"an Event of the core API": {
			events:    []corev1.Event{{Source: corev1.EventSource{Component: Reporter}, Reason: "RunnerBusy", Action: "Evict", Message: "busy [reason: runner-busy]", LastTimestamp: metav1.NewTime(now.Add(-2 * time.Second))}},
			wantEvent: "RunnerBusy", wantReason: "runner-busy", wantIn: "RunnerBusy 2s ago on evict",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := decisionLine(tc.events, now)
			if got.EventReason != tc.wantEvent || got.Reason != tc.wantReason || !strings.Contains(got.Text, tc.wantIn) {
				t.Errorf("decisionLine = %+v, want event %q reason %q text with %q", got, tc.wantEvent, tc.wantReason, tc.wantIn)
			}
		})
	}
}

func TestHintsLine(t *testing.T) {
	cases := map[string]struct {
		pod    *corev1.Pod
		wantIn string
		owned  int
	}{
		"no hints": {pod: fixture.MakeScaleSetRunnerPod("ns", "r").Obj(), wantIn: "none"},
		"runner-guard's hints": {pod: fixture.MakeScaleSetRunnerPod("ns", "r").Annotation("karpenter.sh/do-not-disrupt", "true").
			Annotation("cluster-autoscaler.kubernetes.io/safe-to-evict", "false").Annotation("runner-guard.io/hints", "do-not-disrupt,safe-to-evict").Obj(),
			wantIn: "karpenter.sh/do-not-disrupt=true (set by runner-guard while the job runs), cluster-autoscaler.kubernetes.io/safe-to-evict=false (set by runner-guard", owned: 2},
		"a user's hint": {pod: fixture.MakeScaleSetRunnerPod("ns", "r").Annotation("karpenter.sh/do-not-disrupt", "true").Obj(),
			wantIn: "karpenter.sh/do-not-disrupt=true (set by someone else)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := hintsLine(tc.pod)
			if !strings.Contains(got.Text, tc.wantIn) || len(got.Owned) != tc.owned {
				t.Errorf("hintsLine = %+v, want text with %q and %d owned", got, tc.wantIn, tc.owned)
			}
		})
	}
}

func TestBindingLine(t *testing.T) {
	org, _ := ghclient.OrgScope("acme")
	cases := map[string]struct {
		ex          webhook.Explained
		open        bool
		wantAllowed bool
		wantIn      string
	}{
		"open":                            {ex: webhook.Explained{RunnerPodSpec: "scale-set"}, open: true, wantAllowed: true, wantIn: "no scopeBindings"},
		"not guarded":                     {ex: webhook.Explained{NotGuarded: "exempt"}, wantIn: "not guarded"},
		"bound":                           {ex: webhook.Explained{RunnerPodSpec: "scale-set", Target: webhook.Target{Scope: org}, Binding: `scope binding "team-a"`, BindingScopes: []string{"org:acme"}}, wantAllowed: true, wantIn: `scope binding "team-a" allows org:acme; the runner's org "acme" is one of them`},
		"not bound":                       {ex: webhook.Explained{RunnerPodSpec: "scale-set", Target: webhook.Target{Scope: org}, Binding: `scope binding "team-a"`, BindingScopes: []string{"org:other"}, NotBound: "outside"}, wantIn: "not among them"},
		"no binding covers the namespace": {ex: webhook.Explained{RunnerPodSpec: "scale-set", NotBound: `no scopeBindings entry covers namespace "x"`}, wantIn: "no scopeBindings entry covers"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := bindingLine(tc.ex, tc.open)
			if got.Allowed != tc.wantAllowed || !strings.Contains(got.Text, tc.wantIn) {
				t.Errorf("bindingLine = %+v, want allowed %v and text with %q", got, tc.wantAllowed, tc.wantIn)
			}
		})
	}
}

func TestCredsLineNamesSecretsOnly(t *testing.T) {
	scaleSet := webhook.Explained{RunnerPodSpec: "scale-set", ARC: &arc.Runner{Kind: arc.Kind, EphemeralRunner: types.NamespacedName{Namespace: "team", Name: "r1"}}}
	cases := map[string]struct {
		ex          webhook.Explained
		mode        webhook.CredentialsMode
		inst        Install
		arcSecret   ARCSecret
		wantSecrets []string
		wantNeeds   string
		wantIn      string
	}{
		"static, from the Deployment":     {ex: scaleSet, mode: webhook.CredentialsStatic, inst: Install{Deployment: "rg/rg", Secrets: []string{"rg/github"}}, wantSecrets: []string{"rg/github"}},
		"static, Deployment unreadable":   {ex: scaleSet, mode: webhook.CredentialsStatic, inst: Install{Needs: "list deployments in namespace rg"}, wantNeeds: "list deployments in namespace rg"},
		"arc":                             {ex: scaleSet, mode: webhook.CredentialsARC, arcSecret: ARCSecret{Name: "arc-secret"}, wantSecrets: []string{"team/arc-secret"}},
		"arc, Secret missing":             {ex: scaleSet, mode: webhook.CredentialsARC, arcSecret: ARCSecret{Name: "arc-secret", Missing: true}, wantSecrets: []string{"team/arc-secret"}, wantIn: "does not exist"},
		"arc, Secret unreadable":          {ex: scaleSet, mode: webhook.CredentialsARC, arcSecret: ARCSecret{Name: "arc-secret", Needs: "get secrets in namespace team"}, wantSecrets: []string{"team/arc-secret"}, wantNeeds: "get secrets in namespace team"},
		"arc, EphemeralRunner unreadable": {ex: scaleSet, mode: webhook.CredentialsARC, wantNeeds: "get ephemeralrunners.actions.github.com in namespace team"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := credsLine(tc.ex, tc.mode, tc.inst, tc.arcSecret)
			if strings.Join(got.Secrets, ",") != strings.Join(tc.wantSecrets, ",") || got.Needs != tc.wantNeeds || !strings.Contains(got.Text, tc.wantIn) {
				t.Errorf("credsLine = %+v, want secrets %v needs %q", got, tc.wantSecrets, tc.wantNeeds)
			}
		})
	}
}

func TestGitHubSecretsFromDeployment(t *testing.T) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "rg", Name: "runner-guard"}}
	dep.Spec.Template.Spec.Volumes = []corev1.Volume{
		{Name: "github", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "runner-guard-github"}}},
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "rg-config"}}}},
	}
	dep.Spec.Template.Spec.Containers = []corev1.Container{
		{Name: "sidecar"},
		{Name: "webhook", Args: []string{"--github-app-private-key-file=/etc/github/key", "--config=/etc/runner-guard/config.yaml", "--credentials-mode=arc"},
			VolumeMounts: []corev1.VolumeMount{{Name: "github", MountPath: "/etc/github"}, {Name: "config", MountPath: "/etc/runner-guard/"}},
			Env: []corev1.EnvVar{{Name: "GITHUB_APP_ID", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "app-ids"}, Key: "id"}}}}},
	}
	if got := strings.Join(githubSecrets(dep), ","); got != "rg/runner-guard-github,rg/app-ids" {
		t.Errorf("githubSecrets = %s", got)
	}
	if got := flagValue(dep, "credentials-mode"); got != "arc" {
		t.Errorf("credentials-mode = %q", got)
	}
	if v := mountedVolume(dep, flagValue(dep, "config")); v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "rg-config" {
		t.Errorf("config volume = %+v", v)
	}
}

func TestRunnerLineNamesEachSource(t *testing.T) {
	org, _ := ghclient.OrgScope("acme")
	obj := webhook.Source{Kind: webhook.SourceARCObject, Detail: "EphemeralRunner team/r1", Trusted: true}
	labels := webhook.Source{Kind: webhook.SourcePodLabels, Detail: "actions.github.com/organization"}
	cases := map[string]struct {
		ex      webhook.Explained
		erNeeds string
		want    string
	}{
		"every fact from ARC's object": {
			ex:   webhook.Explained{RunnerPodSpec: "scale-set", Target: webhook.Target{Name: "r1", Scope: org, IDHint: 7, From: webhook.Provenance{Name: obj, Scope: obj, ID: obj}}},
			want: `runner pod spec "scale-set": name r1, scope org:acme, ID 7, all from arc-object EphemeralRunner team/r1 (trusted)`,
		},
		"from the pod, ARC's object unreadable": {
			ex: webhook.Explained{RunnerPodSpec: "scale-set", Fallback: "read from labels: forbidden",
				Target: webhook.Target{Name: "r1", Scope: org, From: webhook.Provenance{Name: webhook.Source{Kind: webhook.SourcePodName}, Scope: labels}}},
			erNeeds: "get ephemeralrunners.actions.github.com in namespace team",
			want: `runner pod spec "scale-set": name r1 from pod-name (untrusted); scope org:acme from pod-labels actions.github.com/organization (untrusted); ` +
				`ID unknown (looked up on GitHub by name); ARC's object unknown: needs get ephemeralrunners.actions.github.com in namespace team`,
		},
		"not guarded": {ex: webhook.Explained{NotGuarded: "namespace kube-system is exempt (exemptNamespaces)"}, want: "not a guarded runner pod: namespace kube-system is exempt"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := runnerLine(tc.ex, tc.erNeeds).Text; !strings.HasPrefix(got, tc.want) {
				t.Errorf("runnerLine text\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
