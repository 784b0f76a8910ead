package chart

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/runner-guard/runner-guard/test/render"
	"github.com/runner-guard/runner-guard/webhook"
)

// policyValues is the part of a values file the config test reads.
type policyValues struct {
	Policy struct {
		OnError           string                 `json:"onError"`
		TimeoutSeconds    int32                  `json:"timeoutSeconds"`
		GitHubTimeout     string                 `json:"githubTimeout"`
		GuardedNamespaces []string               `json:"guardedNamespaces"`
		ScopeBindings     []webhook.ScopeBinding `json:"scopeBindings"`
		AllowAnyScope     bool                   `json:"allowAnyScope"`
		// EvictionsInAllNamespaces widens the evictions entry to unlabelled namespaces.
		EvictionsInAllNamespaces bool `json:"evictionsInAllNamespaces"`
	} `json:"policy"`
}

func readPolicy(t *testing.T, valuesFile string) policyValues {
	t.Helper()
	var v policyValues
	for _, f := range []string{render.ChartDir(t) + "/values.yaml", valuesFile} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// Later files override earlier ones field by field, as in Helm.
		if err := yaml.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	return v
}

// TestConfigMatchesWebhooks parses each matrix case's --config file with the
// webhook's own strict parser, checks it carries the values' scope bindings
// and, as runnerNamespaces, the guarded namespaces, and checks the webhook
// configuration sends the API server's reviews for exactly the pods that
// config recognizes.
func TestConfigMatchesWebhooks(t *testing.T) {
	for _, vf := range matrix(t) {
		t.Run(caseName(vf), func(t *testing.T) {
			objs := render.MustTemplate(t, "--values", vf)
			cm := render.Get[corev1.ConfigMap](t, objs, "ConfigMap", "runner-guard-config")
			cfg, err := webhook.ParseConfig([]byte(cm.Data["config.yaml"]))
			if err != nil {
				t.Fatalf("the webhook rejects the chart's config: %v\n%s", err, cm.Data["config.yaml"])
			}
			want := readPolicy(t, vf)
			if string(cfg.OnError) != want.Policy.OnError {
				t.Errorf("onError %q, values say %q", cfg.OnError, want.Policy.OnError)
			}
			if d, _ := time.ParseDuration(want.Policy.GitHubTimeout); cfg.GitHubTimeout.Duration != d {
				t.Errorf("githubTimeout %s, values say %s", cfg.GitHubTimeout.Duration, want.Policy.GitHubTimeout)
			}
			if len(want.Policy.ScopeBindings) == 0 && !want.Policy.AllowAnyScope {
				t.Errorf("%s has neither policy.scopeBindings nor policy.allowAnyScope, yet renders", vf)
			}
			if !render.EqualJSON(cfg.ScopeBindings, want.Policy.ScopeBindings) && len(cfg.ScopeBindings)+len(want.Policy.ScopeBindings) > 0 {
				t.Errorf("scopeBindings %s, values say %s", render.JSON(t, cfg.ScopeBindings), render.JSON(t, want.Policy.ScopeBindings))
			}
			if !slices.Equal(cfg.RunnerNamespaces, want.Policy.GuardedNamespaces) {
				t.Errorf("runnerNamespaces %v, values' guardedNamespaces %v", cfg.RunnerNamespaces, want.Policy.GuardedNamespaces)
			}
			if !slices.Contains(cfg.ExemptNamespaces, namespace) || !slices.Contains(cfg.ExemptNamespaces, "kube-system") {
				t.Errorf("exemptNamespaces %v lack kube-system or the release namespace", cfg.ExemptNamespaces)
			}
			vwc := render.Get[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "runner-guard")
			checkDeleteWebhooks(t, vwc, cfg.RunnerPods)
			checkNamespaces(t, vwc, cfg.ExemptNamespaces, want.Policy.GuardedNamespaces, want.Policy.EvictionsInAllNamespaces)
			for _, wh := range vwc.Webhooks {
				if deref(wh.TimeoutSeconds) != want.Policy.TimeoutSeconds {
					t.Errorf("%s timeoutSeconds %d, values say %d", wh.Name, deref(wh.TimeoutSeconds), want.Policy.TimeoutSeconds)
				}
			}
		})
	}
}

// checkDeleteWebhooks requires one DELETE entry per runner-pod spec, whose
// objectSelector is that spec's selector, and the evictions entry.
func checkDeleteWebhooks(t *testing.T, vwc *admissionregistrationv1.ValidatingWebhookConfiguration, specs []webhook.RunnerPodSpec) {
	t.Helper()
	var deletes []admissionregistrationv1.ValidatingWebhook
	evictions := 0
	for _, wh := range vwc.Webhooks {
		switch ops := wh.Rules[0].Operations; {
		case slices.Equal(ops, []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}):
			deletes = append(deletes, wh)
		case wh.Rules[0].Resources[0] == "pods/eviction":
			evictions++
			if len(wh.MatchConditions) != 0 {
				t.Errorf("evictions webhook has matchConditions: an Eviction has no pod fields")
			}
		}
	}
	if evictions != 1 {
		t.Errorf("%d evictions webhooks, want 1", evictions)
	}
	if len(deletes) != len(specs) {
		t.Fatalf("%d DELETE webhooks for %d runner-pod specs", len(deletes), len(specs))
	}
	for i, spec := range specs {
		wh := deletes[i]
		if !strings.HasSuffix(wh.Name, "-runner-pods.runner-guard.io") {
			t.Errorf("DELETE webhook %q", wh.Name)
		}
		got, want := canonical(t, wh.ObjectSelector), canonical(t, &spec.Selector)
		if got != want {
			t.Errorf("%s objectSelector %q, runner pods %q are %q", wh.Name, got, spec.Name, want)
		}
		if names := matchConditionNames(wh); !reflect.DeepEqual(names, []string{"not-terminating", "running-or-disrupted"}) {
			t.Errorf("%s matchConditions %v", wh.Name, names)
		}
	}
}

// canonical renders a selector with matchLabels spelled as In expressions, so
// equivalent selectors compare equal.
func canonical(t *testing.T, s *metav1.LabelSelector) string {
	t.Helper()
	c := metav1.LabelSelector{MatchExpressions: slices.Clone(s.MatchExpressions)}
	for k, v := range s.MatchLabels {
		c.MatchExpressions = append(c.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
	}
	sel, err := metav1.LabelSelectorAsSelector(&c)
	if err != nil {
		t.Fatal(err)
	}
	return sel.String()
}

func matchConditionNames(wh admissionregistrationv1.ValidatingWebhook) []string {
	var names []string
	for _, mc := range wh.MatchConditions {
		names = append(names, mc.Name)
	}
	return names
}

// guardLabel opts a namespace in to the evictions entry when
// policy.guardedNamespaces is empty.
var guardLabel = labels.Set{"runner-guard.io/guard": "enabled"}

// checkNamespaces requires every entry to skip the exempt namespaces, labelled
// or not, and, when the values list guarded namespaces, to match those only.
// Without a list the DELETE entries match every other namespace (their
// objectSelector keeps other pods away) and the evictions entry only those
// carrying guardLabel, unless evictionsInAllNamespaces.
func checkNamespaces(t *testing.T, vwc *admissionregistrationv1.ValidatingWebhookConfiguration, exempt, guarded []string, evictionsEverywhere bool) {
	t.Helper()
	for _, wh := range vwc.Webhooks {
		sel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
		if err != nil {
			t.Fatal(err)
		}
		matches := func(ns string, extra labels.Set) bool {
			return sel.Matches(labels.Merge(labels.Set{"kubernetes.io/metadata.name": ns}, extra))
		}
		for _, ns := range exempt {
			if matches(ns, nil) || matches(ns, guardLabel) {
				t.Errorf("%s reviews exempt namespace %s", wh.Name, ns)
			}
		}
		for _, ns := range guarded {
			if !matches(ns, nil) {
				t.Errorf("%s skips guarded namespace %s", wh.Name, ns)
			}
		}
		other := "some-other-namespace"
		if got, want := matches(other, guardLabel), len(guarded) == 0; got != want {
			t.Errorf("%s matches %s labelled %v: %v, want %v", wh.Name, other, guardLabel, got, want)
		}
		wantUnlabelled := len(guarded) == 0 && (wh.Rules[0].Resources[0] != "pods/eviction" || evictionsEverywhere)
		if got := matches(other, nil); got != wantUnlabelled {
			t.Errorf("%s matches %s without a label: %v, want %v", wh.Name, other, got, wantUnlabelled)
		}
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// TestKarpenterUsers: disruption.karpenterUsers becomes karpenterUsers in
// the --config file, which the webhook parses; left empty, the file names
// none and the binary's default (Karpenter's ServiceAccount) holds.
func TestKarpenterUsers(t *testing.T) {
	cases := map[string]struct {
		set  []string
		want []string
	}{
		"default":       {want: webhook.DefaultKarpenterUsers()},
		"its own names": {set: []string{"--set", "disruption.karpenterUsers={system:serviceaccount:autoscaling:karpenter}"}, want: []string{"system:serviceaccount:autoscaling:karpenter"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"--values", "testdata/values/certmanager-token.yaml"}, c.set...)
			cm := render.Get[corev1.ConfigMap](t, render.MustTemplate(t, args...), "ConfigMap", "runner-guard-config")
			cfg, err := webhook.ParseConfig([]byte(cm.Data["config.yaml"]))
			if err != nil {
				t.Fatalf("the webhook rejects the chart's config: %v\n%s", err, cm.Data["config.yaml"])
			}
			if !slices.Equal(cfg.KarpenterUsers, c.want) {
				t.Errorf("karpenterUsers %v, want %v", cfg.KarpenterUsers, c.want)
			}
		})
	}
}
