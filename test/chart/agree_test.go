package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/runner-guard/runner-guard/test/render"
	"github.com/runner-guard/runner-guard/webhook"
)

// The objects only one side has, and why: the Namespace with its Pod Security
// labels. Helm installs into a namespace the user creates (helm install
// --create-namespace). The chart's pre-delete hook removes runner-guard's job
// budgets on uninstall; kustomize has no uninstall step (docs/karpenter.md
// gives the kubectl command).
var (
	kustomizeOnly = []string{"Namespace/" + namespace}
	chartOnly     = []string{"Job/runner-guard-remove-job-budgets"}
)

// The only flags the chart adds to the default install, and the one flag whose
// value differs: the chart takes GitHub's listing for legacy runners' hints and
// job budgets by default (disruption.hintsFromListing), which manifests/default
// leaves at the binary's default; the chart's Secret uses ARC's key names
// (github_token), the kustomize example Secret the key `token`.
var (
	chartOnlyFlags = []string{"--hint-from-listing"}
	tokenFileFlag  = "--github-token-file"
)

// TestChartAgreesWithKustomize renders the chart with values that mean what
// manifests/default means (its scope binding included) and requires every
// object both have to be the same, field for field, except for labels (Helm's
// own) and label selectors, which must each select the webhook pods of their
// own render, and the --config files, which must mean the same to the binary.
func TestChartAgreesWithKustomize(t *testing.T) {
	kust := render.MustParse(t, render.Kustomize(t, "default"))
	chart := render.MustTemplate(t, "--values", "testdata/values/certmanager-token.yaml", "--values", bindingsOf(t, kust), "--set", "image.tag=latest")

	kNames, cNames := kust.Names(), chart.Names()
	for _, n := range kNames {
		if !slices.Contains(cNames, n) && !slices.Contains(kustomizeOnly, n) {
			t.Errorf("the chart lacks %s of manifests/default", n)
		}
	}
	for _, n := range cNames {
		if !slices.Contains(kNames, n) && !slices.Contains(chartOnly, n) {
			t.Errorf("the chart has %s, which manifests/default lacks", n)
		}
	}

	kPods := podLabels(t, kust)
	cPods := podLabels(t, chart)
	for _, k := range kust {
		name := k.GetKind() + "/" + k.GetName()
		c := chart.Find(k.GetKind(), k.GetName())
		if c == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			if k.GetNamespace() != c.GetNamespace() {
				t.Errorf("namespace: kustomize %q, chart %q", k.GetNamespace(), c.GetNamespace())
			}
			compareAnnotations(t, k, c)
			kn := comparable(t, k, kPods)
			cn := comparable(t, c, cPods)
			switch k.GetKind() {
			case "Deployment":
				compareDeploymentArgs(t, kn, cn)
			case "ConfigMap":
				compareConfigFiles(t, kn, cn)
			}
			if !reflect.DeepEqual(kn, cn) {
				t.Errorf("kustomize and chart differ:\n%s", mapDiff("", kn, cn))
			}
		})
	}
}

// bindingsOf writes a values file giving the chart the scope bindings of the
// kustomize render's --config file.
func bindingsOf(t *testing.T, kust render.Objects) string {
	t.Helper()
	cm := render.Get[corev1.ConfigMap](t, kust, "ConfigMap", "runner-guard-config")
	cfg, err := webhook.ParseConfig([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("manifests/default's config.yaml: %v", err)
	}
	if len(cfg.ScopeBindings) == 0 {
		t.Fatal("manifests/default's config.yaml binds no scope")
	}
	data, err := yaml.Marshal(map[string]any{"policy": map[string]any{"scopeBindings": cfg.ScopeBindings}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "kustomize-bindings.yaml")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// compareConfigFiles requires both --config files to mean the same to the
// binary once it has filled in its defaults, then drops them. The chart spells
// out its values' defaults and lists the release namespace among the exempt
// ones, which the binary adds from POD_NAMESPACE anyway.
func compareConfigFiles(t *testing.T, k, c map[string]any) {
	t.Helper()
	parsed := func(side string, obj map[string]any) string {
		data, _ := obj["data"].(map[string]any)
		text, _ := data["config.yaml"].(string)
		delete(data, "config.yaml")
		cfg, err := webhook.ParseConfig([]byte(text))
		if err != nil {
			t.Fatalf("%s config.yaml: %v\n%s", side, err, text)
		}
		if !slices.Contains(cfg.ExemptNamespaces, namespace) {
			cfg.ExemptNamespaces = append(cfg.ExemptNamespaces, namespace)
		}
		return render.JSON(t, cfg)
	}
	if kc, cc := parsed("kustomize", k), parsed("chart", c); kc != cc {
		t.Errorf("the --config files mean different things:\nkustomize %s\nchart     %s", kc, cc)
	}
}

// podLabels are the labels of the webhook pods in a render.
func podLabels(t *testing.T, objs render.Objects) labels.Set {
	t.Helper()
	d := render.Get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	return labels.Set(d.Spec.Template.Labels)
}

// selectorPaths are the label selectors of each kind that select the webhook pods.
var selectorPaths = map[string][][]string{
	"Deployment": {
		{"spec", "selector"},
		{"spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", "0", "podAffinityTerm", "labelSelector"},
	},
	"PodDisruptionBudget": {{"spec", "selector"}},
	"NetworkPolicy":       {{"spec", "podSelector"}},
}

// comparable is the object without metadata beyond its name, and with each
// pod selector checked against the pods and then removed.
func comparable(t *testing.T, u *unstructured.Unstructured, pods labels.Set) map[string]any {
	t.Helper()
	obj := runtime.DeepCopyJSON(u.Object)
	obj["metadata"] = map[string]any{"name": u.GetName()}
	for _, path := range selectorPaths[u.GetKind()] {
		sel, ok := removeAt(obj, path)
		if !ok {
			t.Errorf("%s has no %s", u.GetKind(), strings.Join(path, "."))
			continue
		}
		requireSelects(t, u.GetKind()+" "+strings.Join(path, "."), sel, pods)
	}
	switch u.GetKind() {
	case "Service":
		spec := obj["spec"].(map[string]any)
		sel, _ := spec["selector"].(map[string]any)
		requireSelects(t, "Service spec.selector", map[string]any{"matchLabels": sel}, pods)
		delete(spec, "selector")
	case "Deployment":
		// The pod labels were checked through the selectors; the pod template's
		// shared labels must agree.
		tmpl := obj["spec"].(map[string]any)["template"].(map[string]any)
		meta := tmpl["metadata"].(map[string]any)
		delete(meta, "labels")
		if ann, ok := meta["annotations"].(map[string]any); ok {
			delete(ann, "checksum/config")
		}
	}
	return obj
}

// removeAt deletes the value at a path of map keys and list indexes.
func removeAt(obj map[string]any, path []string) (any, bool) {
	var cur any = obj
	for i, p := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[p]
			if !ok {
				return nil, false
			}
			if last {
				delete(c, p)
				return v, true
			}
			cur = v
		case []any:
			var idx int
			if _, err := fmt.Sscan(p, &idx); err != nil || idx >= len(c) {
				return nil, false
			}
			cur = c[idx]
		default:
			return nil, false
		}
	}
	return nil, false
}

func requireSelects(t *testing.T, what string, sel any, pods labels.Set) {
	t.Helper()
	var ls metav1.LabelSelector
	m, _ := sel.(map[string]any)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &ls); err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	s, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil || s.Empty() || !s.Matches(pods) {
		t.Errorf("%s %v does not select the webhook pods %v (err %v)", what, s, pods, err)
	}
}

// compareAnnotations requires the chart to carry every kustomize annotation
// (the CA injection request among them).
func compareAnnotations(t *testing.T, k, c *unstructured.Unstructured) {
	t.Helper()
	for key, v := range k.GetAnnotations() {
		if got := c.GetAnnotations()[key]; got != v {
			t.Errorf("annotation %s: kustomize %q, chart %q", key, v, got)
		}
	}
}

// compareDeploymentArgs requires the same flags with the same values, except
// the chart-only flags and the token file name; then drops the args.
func compareDeploymentArgs(t *testing.T, k, c map[string]any) {
	t.Helper()
	kArgs := takeArgs(t, k)
	cArgs := takeArgs(t, c)
	for flag, v := range kArgs {
		cv, ok := cArgs[flag]
		switch {
		case !ok:
			t.Errorf("the chart's Deployment lacks %s=%s", flag, v)
		case flag == tokenFileFlag:
			if !strings.HasPrefix(v, "/etc/runner-guard/github/") || !strings.HasPrefix(cv, "/etc/runner-guard/github/") {
				t.Errorf("%s: kustomize %q, chart %q; want both in the GitHub Secret's mount", flag, v, cv)
			}
		case cv != v:
			t.Errorf("%s: kustomize %q, chart %q", flag, v, cv)
		}
	}
	for flag, v := range cArgs {
		if _, ok := kArgs[flag]; !ok && !slices.Contains(chartOnlyFlags, flag) {
			t.Errorf("the chart passes %s=%s, which manifests/default does not", flag, v)
		}
	}
}

// takeArgs removes the webhook container's args and returns them as flag -> value.
func takeArgs(t *testing.T, d map[string]any) map[string]string {
	t.Helper()
	c := webhookContainer(t, d)
	raw, _ := c["args"].([]any)
	delete(c, "args")
	out := map[string]string{}
	for _, a := range raw {
		s, _ := a.(string)
		flag, v, _ := strings.Cut(s, "=")
		if _, dup := out[flag]; dup {
			t.Errorf("flag %s given twice", flag)
		}
		out[flag] = v
	}
	return out
}

func webhookContainer(t *testing.T, d map[string]any) map[string]any {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	// NestedSlice copies: write the container back through the original map.
	c := d["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	return c
}

// mapDiff lists the paths where two JSON-like values differ.
func mapDiff(path string, a, b any) string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		var out strings.Builder
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		for _, k := range sorted {
			out.WriteString(mapDiff(path+"."+k, av[k], bv[k]))
		}
		return out.String()
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			break
		}
		var out strings.Builder
		for i := range av {
			out.WriteString(mapDiff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i]))
		}
		return out.String()
	}
	if reflect.DeepEqual(a, b) {
		return ""
	}
	return fmt.Sprintf("  %s: kustomize %v, chart %v\n", path, a, b)
}
