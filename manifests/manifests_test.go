package manifests_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/activation"
)

const (
	namespace   = "runner-guard-system"
	webhookPath = "/validate-runner-pods"
	configDir   = "/etc/runner-guard/config"
)

var overlays = []string{"base", "certmanager", "default", "local", "e2e-kind"}

// requireFile returns an env-named or default path of a tool, or skips (fails
// under CI) when it is missing.
func requireFile(t *testing.T, env, def, hint string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = def
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (%s): %v; %s", env, p, err, hint)
		}
		t.Skipf("%s not found (%v): %s", p, err, hint)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func kustomize(t *testing.T) string {
	return requireFile(t, "KUSTOMIZE", "../bin/kustomize", "run make manifests (builds bin/kustomize) or set KUSTOMIZE")
}

var renderCache = map[string][]byte{}

func render(t *testing.T, overlay string) []byte {
	t.Helper()
	if out, ok := renderCache[overlay]; ok {
		return out
	}
	var stderr bytes.Buffer
	cmd := exec.Command(kustomize(t), "build", overlay)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", overlay, err, stderr.String())
	}
	renderCache[overlay] = out
	return out
}

type objects []*unstructured.Unstructured

func parse(t *testing.T, data []byte) objects {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs objects
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
}

func (objs objects) find(kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func (objs objects) kinds() []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(ks)
	return ks
}

// get converts the named object into a typed one.
func get[T any](t *testing.T, objs objects, kind, name string) *T {
	t.Helper()
	u := objs.find(kind, name)
	if u == nil {
		t.Fatalf("no %s %q among %v", kind, name, objs.kinds())
	}
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
	return &out
}

func TestOverlaysRender(t *testing.T) {
	want := map[string][]string{
		"base": {
			"ClusterRole/runner-guard", "ClusterRole/runner-guard-activation", "ClusterRole/runner-guard-metrics-auth", "ClusterRole/runner-guard-metrics-reader",
			"ClusterRoleBinding/runner-guard", "ClusterRoleBinding/runner-guard-activation", "ClusterRoleBinding/runner-guard-metrics-auth", "ConfigMap/runner-guard-config", "Deployment/runner-guard-webhook",
			"Namespace/runner-guard-system", "NetworkPolicy/runner-guard-webhook", "PodDisruptionBudget/runner-guard-webhook",
			"ResourceQuota/runner-guard-critical-pods", "Role/runner-guard-activation", "Role/runner-guard-leader-election",
			"RoleBinding/runner-guard-activation", "RoleBinding/runner-guard-leader-election",
			"Service/runner-guard-webhook", "ServiceAccount/runner-guard", "ValidatingWebhookConfiguration/runner-guard",
		},
		"certmanager": {
			"Certificate/runner-guard-ca", "Certificate/runner-guard-serving-cert",
			"Issuer/runner-guard-ca-issuer", "Issuer/runner-guard-selfsigned-issuer",
		},
		"local": {"ValidatingWebhookConfiguration/runner-guard"},
	}
	want["default"] = slices.Sorted(slices.Values(append(slices.Clone(want["base"]), want["certmanager"]...)))
	want["e2e-kind"] = slices.Sorted(slices.Values(append(slices.Clone(want["default"]),
		"Deployment/fakegithub", "Secret/runner-guard-github", "Service/fakegithub")))
	for _, o := range overlays {
		t.Run(o, func(t *testing.T) {
			objs := parse(t, render(t, o))
			if got := objs.kinds(); !reflect.DeepEqual(got, want[o]) {
				t.Errorf("objects:\n got %v\nwant %v", got, want[o])
			}
			for _, obj := range objs {
				ns := obj.GetNamespace()
				switch obj.GetKind() {
				case "Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration":
					if ns != "" {
						t.Errorf("cluster-scoped %s/%s has namespace %q", obj.GetKind(), obj.GetName(), ns)
					}
				default:
					if ns != namespace {
						t.Errorf("%s/%s is in namespace %q, want %s", obj.GetKind(), obj.GetName(), ns, namespace)
					}
				}
			}
		})
	}
}

func TestInstallYAMLUpToDate(t *testing.T) {
	data, err := os.ReadFile("../dist/install.yaml")
	if err != nil {
		t.Fatalf("%v: run make manifests", err)
	}
	if !bytes.HasPrefix(data, []byte("# Generated by `make manifests`")) {
		t.Errorf("dist/install.yaml lacks the generated-file header")
	}
	body := data
	for bytes.HasPrefix(body, []byte("#")) {
		_, body, _ = bytes.Cut(body, []byte("\n"))
	}
	if want := render(t, "default"); !bytes.Equal(body, want) {
		t.Errorf("dist/install.yaml is stale: run make manifests")
	}
}

// webhooks returns the webhook configuration of an overlay.
func webhooks(t *testing.T, overlay string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return get[admissionregistrationv1.ValidatingWebhookConfiguration](t, parse(t, render(t, overlay)), "ValidatingWebhookConfiguration", "runner-guard")
}

func TestWebhookConfiguration(t *testing.T) {
	vwc := webhooks(t, "default")
	if got := vwc.Annotations["cert-manager.io/inject-ca-from"]; got != "runner-guard-system/runner-guard-serving-cert" {
		t.Errorf("inject-ca-from = %q", got)
	}
	type entry struct {
		op       admissionregistrationv1.OperationType
		resource string
		selector string // objectSelector as a label selector string, "" for none
	}
	// The DELETE entries' objectSelectors are the binary's default runner pod
	// selectors: read them from the code, never from a copied string.
	defaults := map[string]string{}
	for _, spec := range webhook.DefaultRunnerPods() {
		sel, err := metav1.LabelSelectorAsSelector(&spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		defaults[spec.Name] = sel.String()
	}
	want := map[string]entry{
		"legacy-runner-pods.runner-guard.io":    {admissionregistrationv1.Delete, "pods", defaults["legacy"]},
		"ephemeral-runner-pods.runner-guard.io": {admissionregistrationv1.Delete, "pods", defaults["scale-set"]},
		"evictions.runner-guard.io":             {admissionregistrationv1.Create, "pods/eviction", ""},
	}
	if len(defaults) != 2 || defaults["legacy"] == "" || defaults["scale-set"] == "" {
		t.Fatalf("DefaultRunnerPods() = %v: update this test's webhook entries to match", defaults)
	}
	if len(vwc.Webhooks) != len(want) {
		t.Fatalf("%d webhooks, want %d", len(vwc.Webhooks), len(want))
	}
	for _, wh := range vwc.Webhooks {
		t.Run(wh.Name, func(t *testing.T) {
			w, ok := want[wh.Name]
			if !ok {
				t.Fatalf("unexpected webhook %q", wh.Name)
			}
			if len(wh.Rules) != 1 {
				t.Fatalf("rules = %+v, want one", wh.Rules)
			}
			r := wh.Rules[0]
			if !reflect.DeepEqual(r.Operations, []admissionregistrationv1.OperationType{w.op}) ||
				!reflect.DeepEqual(r.APIGroups, []string{""}) || !reflect.DeepEqual(r.APIVersions, []string{"v1"}) ||
				!reflect.DeepEqual(r.Resources, []string{w.resource}) || r.Scope == nil || *r.Scope != admissionregistrationv1.NamespacedScope {
				t.Errorf("rule = %+v, want %s on core/v1 %s, Namespaced", r, w.op, w.resource)
			}
			if w.selector == "" {
				if wh.ObjectSelector != nil && (len(wh.ObjectSelector.MatchLabels) > 0 || len(wh.ObjectSelector.MatchExpressions) > 0) {
					t.Errorf("objectSelector = %+v, want none (an Eviction has no labels)", wh.ObjectSelector)
				}
			} else {
				sel := mustSelector(t, wh.ObjectSelector)
				want, err := labels.Parse(w.selector)
				if err != nil {
					t.Fatal(err)
				}
				// Same pods selected, however the selector is spelled.
				for _, set := range []labels.Set{
					{"actions-runner": ""}, {"actions-ephemeral-runner": "True"}, {"actions-ephemeral-runner": "true"},
					{"actions-ephemeral-runner": ""}, {"app": "web"}, {},
				} {
					if sel.Matches(set) != want.Matches(set) {
						t.Errorf("objectSelector %q and the default runner pod selector %q disagree on labels %v", sel, want, set)
					}
				}
			}
			// DELETE entries select runner pods by label, so they cover every
			// namespace but the excluded ones; an Eviction has no labels, so
			// that entry covers only the namespaces opted in with the label.
			checkNamespaces(t, wh.NamespaceSelector, w.op == admissionregistrationv1.Delete)
			if wh.SideEffects == nil || *wh.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun {
				t.Errorf("sideEffects = %v, want NoneOnDryRun", deref(wh.SideEffects))
			}
			// Ignore as shipped (the install window), Fail once a replica
			// serves: the DELETE entries see only running runner pods, the
			// evictions entry only the namespaces the user labelled.
			if got := activatedPolicy(t, vwc, wh); got != admissionregistrationv1.Fail {
				t.Errorf("failurePolicy once activated = %v, want Fail", got)
			}
			if wh.MatchPolicy == nil || *wh.MatchPolicy != admissionregistrationv1.Equivalent {
				t.Errorf("matchPolicy = %v, want Equivalent", deref(wh.MatchPolicy))
			}
			// docs/DESIGN.md: timeoutSeconds >= the handler's GitHub deadline (5s) + 2s.
			if wh.TimeoutSeconds == nil || *wh.TimeoutSeconds != 10 {
				t.Errorf("timeoutSeconds = %v, want 10", deref(wh.TimeoutSeconds))
			}
			checkMatchConditions(t, wh, w.op)
			if !reflect.DeepEqual(wh.AdmissionReviewVersions, []string{"v1"}) {
				t.Errorf("admissionReviewVersions = %v", wh.AdmissionReviewVersions)
			}
			s := wh.ClientConfig.Service
			if s == nil || s.Name != "runner-guard-webhook" || s.Namespace != namespace || deref(s.Path) != webhookPath || deref(s.Port) != any(int32(443)) {
				t.Errorf("clientConfig.service = %+v", s)
			}
			if wh.ClientConfig.URL != nil || len(wh.ClientConfig.CABundle) != 0 {
				t.Errorf("clientConfig has url/caBundle in the cert-manager variant")
			}
		})
	}

	// The local variant differs only in clientConfig and, for the e2e tests
	// that evict in namespaces without the label, the evictions entry's
	// namespaceSelector: every namespace but the excluded ones.
	local := webhooks(t, "local")
	if len(local.Webhooks) != len(vwc.Webhooks) {
		t.Fatalf("local has %d webhooks, default %d", len(local.Webhooks), len(vwc.Webhooks))
	}
	for i, wh := range local.Webhooks {
		if deref(wh.ClientConfig.URL) != "https://127.0.0.1:9443"+webhookPath || wh.ClientConfig.Service != nil {
			t.Errorf("local %s clientConfig = %+v", wh.Name, wh.ClientConfig)
		}
		if string(wh.ClientConfig.CABundle) != "CA_BUNDLE_PLACEHOLDER" {
			t.Errorf("local %s caBundle = %q, want the placeholder", wh.Name, wh.ClientConfig.CABundle)
		}
		base := vwc.Webhooks[i].DeepCopy()
		wh.ClientConfig, base.ClientConfig = admissionregistrationv1.WebhookClientConfig{}, admissionregistrationv1.WebhookClientConfig{}
		checkNamespaces(t, wh.NamespaceSelector, true)
		wh.NamespaceSelector, base.NamespaceSelector = nil, nil
		// Nothing activates the local variant (the webhook runs outside,
		// started first): it ships with the activated policy.
		if want := activatedPolicy(t, vwc, vwc.Webhooks[i]); deref(wh.FailurePolicy) != want {
			t.Errorf("local %s failurePolicy = %v, want %v", wh.Name, deref(wh.FailurePolicy), want)
		}
		wh.FailurePolicy, base.FailurePolicy = nil, nil
		if !reflect.DeepEqual(&wh, base) {
			t.Errorf("local webhook %d differs from default beyond clientConfig:\n%+v\n%+v", i, wh, *base)
		}
	}
	if _, ok := local.Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Error("local variant asks cert-manager for CA injection")
	}
}

// checkNamespaces checks which namespaces an entry's namespaceSelector
// covers: never kube-system nor runner-guard's own, and any other namespace
// when everywhere, else only those labelled runner-guard.io/guard=enabled.
func checkNamespaces(t *testing.T, s *metav1.LabelSelector, everywhere bool) {
	t.Helper()
	ns := mustSelector(t, s)
	optIn := map[string]string{"runner-guard.io/guard": "enabled"}
	for _, c := range []struct {
		name  string
		label map[string]string
		match bool
	}{
		{"kube-system", nil, false}, {"kube-system", optIn, false},
		{namespace, nil, false}, {namespace, optIn, false},
		{"default", nil, everywhere}, {"runners", nil, everywhere}, {"runners", map[string]string{"runner-guard.io/guard": "disabled"}, everywhere},
		{"runners", optIn, true},
	} {
		set := labels.Set{"kubernetes.io/metadata.name": c.name}
		for k, v := range c.label {
			set[k] = v
		}
		if got := ns.Matches(set); got != c.match {
			t.Errorf("namespaceSelector %q matches namespace %v: %v, want %v", ns, set, got, c.match)
		}
	}
}

// checkMatchConditions: DELETE entries skip terminating and not-running pods
// (item 6); an Eviction has no pod fields, so its entry has none.
func checkMatchConditions(t *testing.T, wh admissionregistrationv1.ValidatingWebhook, op admissionregistrationv1.OperationType) {
	t.Helper()
	if op != admissionregistrationv1.Delete {
		if len(wh.MatchConditions) != 0 {
			t.Errorf("matchConditions = %+v on the evictions entry", wh.MatchConditions)
		}
		return
	}
	exprs := map[string]string{}
	for _, mc := range wh.MatchConditions {
		exprs[mc.Name] = mc.Expression
	}
	for name, parts := range map[string][]string{
		"not-terminating":      {"!has(oldObject.metadata.deletionTimestamp)"},
		"running-or-disrupted": {"oldObject.status.phase == 'Running'", "'DisruptionTarget'"},
	} {
		for _, p := range parts {
			if !strings.Contains(exprs[name], p) {
				t.Errorf("matchCondition %s = %q, want it to contain %q", name, exprs[name], p)
			}
		}
	}
	if len(exprs) != 2 {
		t.Errorf("matchConditions = %v, want not-terminating and running-or-disrupted", exprs)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func mustSelector(t *testing.T, s *metav1.LabelSelector) labels.Selector {
	t.Helper()
	if s == nil {
		t.Fatal("nil label selector")
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func TestRBACIsMinimal(t *testing.T) {
	objs := parse(t, render(t, "default"))
	role := get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard")
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch", "delete"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"actions.github.com"}, Resources: []string{"ephemeralrunners"}, Verbs: []string{"get", "list", "watch", "delete"}},
		{APIGroups: []string{"actions.summerwind.dev"}, Resources: []string{"runners"}, Verbs: []string{"get"}},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"karpenter.sh"}, Resources: []string{"nodeclaims"}, Verbs: []string{"get", "list"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("ClusterRole rules = %+v\nwant %+v", role.Rules, want)
	}
	if role.AggregationRule != nil {
		t.Error("ClusterRole aggregates other roles")
	}
	binding := get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "runner-guard")
	if binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "runner-guard"}) {
		t.Errorf("roleRef = %+v", binding.RoleRef)
	}
	if !reflect.DeepEqual(binding.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "runner-guard", Namespace: namespace}}) {
		t.Errorf("subjects = %+v", binding.Subjects)
	}
	// The leader election Role may touch Leases (and their Events) in
	// runner-guard's own namespace only.
	lease := get[rbacv1.Role](t, objs, "Role", "runner-guard-leader-election")
	wantLease := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		{APIGroups: []string{"events.k8s.io", ""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	if !reflect.DeepEqual(lease.Rules, wantLease) || lease.Namespace != namespace {
		t.Errorf("leader election Role in %q: rules = %+v\nwant %+v in %s", lease.Namespace, lease.Rules, wantLease, namespace)
	}
	// Activation reads, watches and patches runner-guard's own webhook
	// configuration only.
	act := get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard-activation")
	wantAct := []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"},
		ResourceNames: []string{"runner-guard"}, Verbs: []string{"get", "list", "watch", "patch"}}}
	if !reflect.DeepEqual(act.Rules, wantAct) {
		t.Errorf("activation ClusterRole rules = %+v\nwant %+v", act.Rules, wantAct)
	}
	actBinding := get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "runner-guard-activation")
	if actBinding.RoleRef.Name != "runner-guard-activation" ||
		!reflect.DeepEqual(actBinding.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "runner-guard", Namespace: namespace}}) {
		t.Errorf("activation ClusterRoleBinding = %+v %+v", actBinding.RoleRef, actBinding.Subjects)
	}
	svc := get[rbacv1.Role](t, objs, "Role", "runner-guard-activation")
	wantSvc := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, ResourceNames: []string{"runner-guard-webhook"}, Verbs: []string{"get"}}}
	if !reflect.DeepEqual(svc.Rules, wantSvc) || svc.Namespace != namespace {
		t.Errorf("activation Role in %q: rules = %+v\nwant %+v in %s", svc.Namespace, svc.Rules, wantSvc, namespace)
	}
	metricsRBAC := []string{"runner-guard-activation", "runner-guard-metrics-auth", "runner-guard-metrics-reader"}
	for _, o := range objs {
		if k := o.GetKind(); ((k == "Role" || k == "RoleBinding") && o.GetName() != "runner-guard-leader-election" && o.GetName() != "runner-guard-activation") ||
			(strings.HasPrefix(k, "Cluster") && o.GetName() != "runner-guard" && !slices.Contains(metricsRBAC, o.GetName())) {
			t.Errorf("unexpected RBAC object %s/%s", k, o.GetName())
		}
	}
	checkMetricsRBAC(t, objs)
}

// checkMetricsRBAC: the secure metrics endpoint may create TokenReviews and
// SubjectAccessReviews and nothing else; scrapers get the reader role.
func checkMetricsRBAC(t *testing.T, objs objects) {
	t.Helper()
	auth := get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard-metrics-auth")
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if !reflect.DeepEqual(auth.Rules, want) {
		t.Errorf("metrics-auth rules = %+v\nwant %+v", auth.Rules, want)
	}
	binding := get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "runner-guard-metrics-auth")
	if binding.RoleRef.Name != "runner-guard-metrics-auth" ||
		!reflect.DeepEqual(binding.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "runner-guard", Namespace: namespace}}) {
		t.Errorf("metrics-auth binding = %+v %+v", binding.RoleRef, binding.Subjects)
	}
	reader := get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard-metrics-reader")
	if !reflect.DeepEqual(reader.Rules, []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}) {
		t.Errorf("metrics-reader rules = %+v", reader.Rules)
	}
}

func TestDeployment(t *testing.T) {
	objs := parse(t, render(t, "default"))
	d := get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	spec := d.Spec.Template.Spec
	if deref(d.Spec.Replicas) != int32(2) {
		t.Errorf("replicas = %v, want 2", deref(d.Spec.Replicas))
	}
	if spec.ServiceAccountName != "runner-guard" || spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("serviceAccountName %q priorityClassName %q", spec.ServiceAccountName, spec.PriorityClassName)
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	if sel := mustSelector(t, d.Spec.Selector); !sel.Matches(podLabels) {
		t.Errorf("selector %v does not match the pod labels %v", sel, podLabels)
	}
	if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Errorf("affinity = %+v, want one preferred pod anti-affinity term", a)
	} else {
		term := a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
		if term.TopologyKey != "kubernetes.io/hostname" || !mustSelector(t, term.LabelSelector).Matches(podLabels) {
			t.Errorf("anti-affinity term = %+v", term)
		}
	}
	psc := spec.SecurityContext
	if psc == nil || deref(psc.RunAsNonRoot) != true || deref(psc.RunAsUser) != int64(65532) ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext = %+v", psc)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != "runner-guard:latest" {
		t.Errorf("image = %q", c.Image)
	}
	sc := c.SecurityContext
	if sc == nil || deref(sc.RunAsNonRoot) != true || deref(sc.RunAsUser) != int64(65532) || deref(sc.ReadOnlyRootFilesystem) != true ||
		deref(sc.AllowPrivilegeEscalation) != false || sc.AllowPrivilegeEscalation == nil || deref(sc.Privileged) == true ||
		sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext = %+v", sc)
	}
	wantArgs := []string{
		"--cert-dir=/tmp/k8s-webhook-server/serving-certs",
		"--github-token-file=/etc/runner-guard/github/token",
		"--metrics-bind-address=:8443",
		"--health-probe-bind-address=:8081",
		"--webhook-configuration-name=runner-guard",
		"--config=" + configDir + "/config.yaml",
	}
	if !reflect.DeepEqual(c.Args, wantArgs) {
		t.Errorf("args = %q\nwant %q", c.Args, wantArgs)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if !reflect.DeepEqual(ports, map[string]int32{"webhook": 9443, "metrics": 8443, "health": 8081}) {
		t.Errorf("ports = %v", ports)
	}
	// The pause must end before the grace period with room for the longest
	// review (timeoutSeconds 10) still in flight.
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 5 {
		t.Errorf("preStop = %+v, want a sleep action of at least 5s", c.Lifecycle)
	} else if grace := deref(spec.TerminationGracePeriodSeconds); grace == nil || grace.(int64) < c.Lifecycle.PreStop.Sleep.Seconds+10 {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %ds + timeoutSeconds 10", grace, c.Lifecycle.PreStop.Sleep.Seconds)
	}
	for name, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != name || probe.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %s = %+v", name, probe)
		}
	}
	// GOMEMLIMIT is 90 % of the memory limit (whole MiB, rounded down): the
	// Go runtime needs room above it before the OOM killer.
	var goMemLimit string
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			goMemLimit = e.Value
		}
	}
	if want := fmt.Sprintf("%dMiB", c.Resources.Limits.Memory().Value()*9/10>>20); goMemLimit != want {
		t.Errorf("GOMEMLIMIT = %q, want %s (90 %% of limits.memory %s)", goMemLimit, want, c.Resources.Limits.Memory())
	}
	wantRes := map[string]string{"requests.cpu": "50m", "requests.memory": "64Mi", "limits.cpu": "500m", "limits.memory": "256Mi"}
	gotRes := map[string]string{
		"requests.cpu": c.Resources.Requests.Cpu().String(), "requests.memory": c.Resources.Requests.Memory().String(),
		"limits.cpu": c.Resources.Limits.Cpu().String(), "limits.memory": c.Resources.Limits.Memory().String(),
	}
	if !reflect.DeepEqual(gotRes, wantRes) {
		t.Errorf("resources = %v, want %v", gotRes, wantRes)
	}

	// Volumes: the GitHub Secret (required) and the serving certificate at the cert dir.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	check := func(secret, mountPath string, optional bool) {
		t.Helper()
		for name, v := range vols {
			if v.Secret == nil || v.Secret.SecretName != secret {
				continue
			}
			if deref(v.Secret.Optional) == true != optional {
				t.Errorf("secret %s optional = %v", secret, deref(v.Secret.Optional))
			}
			m, ok := mounts[name]
			if !ok || m.MountPath != mountPath || !m.ReadOnly {
				t.Errorf("secret %s mounted as %+v, want read-only at %s", secret, m, mountPath)
			}
			return
		}
		t.Errorf("no volume for Secret %s", secret)
	}
	check("runner-guard-github", "/etc/runner-guard/github", false)
	if v := vols["github"]; v.Secret == nil || v.Secret.Optional == nil {
		t.Errorf("the GitHub Secret volume must say optional: false explicitly")
	}
	check("runner-guard-webhook-cert", "/tmp/k8s-webhook-server/serving-certs", false)
	if v, m := vols["config"], mounts["config"]; v.ConfigMap == nil || v.ConfigMap.Name != "runner-guard-config" || m.MountPath != configDir || !m.ReadOnly {
		t.Errorf("config volume %+v mounted as %+v, want ConfigMap runner-guard-config read-only at %s (--config)", v.VolumeSource, m, configDir)
	}

	svc := get[corev1.Service](t, objs, "Service", "runner-guard-webhook")
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, podLabels)
	}
	found := false
	for _, p := range svc.Spec.Ports {
		if p.Name == "metrics" && (p.Port != 8443 || p.TargetPort.IntValue() != 8443) {
			t.Errorf("Service metrics port %d -> %s, want 8443 (HTTPS)", p.Port, p.TargetPort.String())
		}
		if p.Port == 443 {
			found = true
			if p.TargetPort.IntValue() != 9443 {
				t.Errorf("Service port 443 targets %v, want 9443", p.TargetPort.String())
			}
		}
	}
	if !found {
		t.Error("Service has no port 443")
	}

	pdb := get[policyv1.PodDisruptionBudget](t, objs, "PodDisruptionBudget", "runner-guard-webhook")
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || !mustSelector(t, pdb.Spec.Selector).Matches(podLabels) {
		t.Errorf("PDB spec = %+v", pdb.Spec)
	}
	// A budget keeping every replica would block their nodes' drains forever.
	if pdb.Spec.MinAvailable != nil && int32(pdb.Spec.MinAvailable.IntValue()) >= deref(d.Spec.Replicas).(int32) {
		t.Errorf("PDB minAvailable %s >= replicas %v: no runner-guard pod could be evicted", pdb.Spec.MinAvailable, deref(d.Spec.Replicas))
	}
}

// TestConfigFile: the --config file of the install parses with the binary's
// own strict parser and binds the runner namespace to a placeholder scope the
// user must replace (never an open config); the kind e2e overlay, whose
// suites register runners of many scopes, allows any scope.
func TestConfigFile(t *testing.T) {
	parseConfig := func(overlay string) webhook.Config {
		t.Helper()
		cm := get[corev1.ConfigMap](t, parse(t, render(t, overlay)), "ConfigMap", "runner-guard-config")
		cfg, err := webhook.ParseConfig([]byte(cm.Data["config.yaml"]))
		if err != nil {
			t.Fatalf("%s: the webhook rejects its config.yaml: %v\n%s", overlay, err, cm.Data["config.yaml"])
		}
		return cfg
	}
	cfg := parseConfig("default")
	if len(cfg.ScopeBindings) != 1 {
		t.Fatalf("scopeBindings = %+v, want the one binding to fill in", cfg.ScopeBindings)
	}
	b := cfg.ScopeBindings[0]
	if !reflect.DeepEqual(b.Namespaces, []string{"arc-runners"}) || !reflect.DeepEqual(b.Scopes, []string{"org:REPLACE-WITH-YOUR-ORG"}) {
		t.Errorf("binding = %+v, want arc-runners bound to the placeholder org:REPLACE-WITH-YOUR-ORG", b)
	}
	if len(cfg.RunnerNamespaces) != 0 {
		t.Errorf("runnerNamespaces = %v: the install's ClusterRole watches runner pods cluster-wide", cfg.RunnerNamespaces)
	}
	// The budget is split between the Deployment's replicas.
	dep := get[appsv1.Deployment](t, parse(t, render(t, "default")), "Deployment", "runner-guard-webhook")
	if dep.Spec.Replicas == nil || cfg.GitHubBudget.Replicas != int(*dep.Spec.Replicas) {
		t.Errorf("githubBudget.replicas = %d, want the Deployment's replicas %v", cfg.GitHubBudget.Replicas, dep.Spec.Replicas)
	}
	// The rest is the binary's defaults: only the binding is the user's to set.
	def := webhook.DefaultConfig()
	cfg.ScopeBindings, cfg.GitHubBudget.Replicas = nil, def.GitHubBudget.Replicas
	if !reflect.DeepEqual(toJSON(t, cfg), toJSON(t, def)) {
		t.Errorf("config beyond scopeBindings differs from the binary's defaults:\n got %s\nwant %s", toJSON(t, cfg), toJSON(t, def))
	}
	text := string(mustRead(t, "base/config.yaml"))
	for _, w := range []string{"REPLACE", "rollout restart"} {
		if !strings.Contains(text, w) {
			t.Errorf("base/config.yaml does not say %q", w)
		}
	}
	if kind := parseConfig("e2e-kind"); len(kind.ScopeBindings) != 0 {
		t.Errorf("e2e-kind scopeBindings = %+v, want none (every scope open for the suites)", kind.ScopeBindings)
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCertManagerWiring(t *testing.T) {
	objs := parse(t, render(t, "default"))
	cert := objs.find("Certificate", "runner-guard-serving-cert")
	if cert == nil {
		t.Fatal("no Certificate")
	}
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	if secretName != "runner-guard-webhook-cert" {
		t.Errorf("Certificate secretName = %q", secretName)
	}
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	want := []string{"runner-guard-webhook.runner-guard-system.svc", "runner-guard-webhook.runner-guard-system.svc.cluster.local"}
	if !reflect.DeepEqual(dnsNames, want) {
		t.Errorf("Certificate dnsNames = %v, want %v", dnsNames, want)
	}
	issuerKind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
	issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	issuer := objs.find(issuerKind, issuerName)
	if issuer == nil {
		t.Fatalf("issuerRef %s/%s not in the manifests", issuerKind, issuerName)
	}
	// A stable CA (issue 8 item 8): the serving certificate is signed by a CA
	// Issuer whose CA Certificate comes from a self-signed Issuer, so renewing
	// the serving certificate never changes the CA the API server trusts.
	caSecret, ok, _ := unstructured.NestedString(issuer.Object, "spec", "ca", "secretName")
	if !ok {
		t.Fatalf("the serving certificate's Issuer is not a CA Issuer: %v", issuer.Object["spec"])
	}
	var ca *unstructured.Unstructured
	for _, o := range objs {
		if name, _, _ := unstructured.NestedString(o.Object, "spec", "secretName"); o.GetKind() == "Certificate" && name == caSecret {
			ca = o
		}
	}
	if ca == nil {
		t.Fatalf("no Certificate writes the CA Issuer's Secret %s", caSecret)
	}
	if isCA, _, _ := unstructured.NestedBool(ca.Object, "spec", "isCA"); !isCA {
		t.Errorf("Certificate %s is not isCA", ca.GetName())
	}
	if policy, _, _ := unstructured.NestedString(ca.Object, "spec", "privateKey", "rotationPolicy"); policy != "Never" {
		t.Errorf("CA key rotationPolicy %q, want Never (a renewed CA keeps verifying issued certificates)", policy)
	}
	rootKind, _, _ := unstructured.NestedString(ca.Object, "spec", "issuerRef", "kind")
	rootName, _, _ := unstructured.NestedString(ca.Object, "spec", "issuerRef", "name")
	root := objs.find(rootKind, rootName)
	if root == nil {
		t.Fatalf("the CA's issuerRef %s/%s is not in the manifests", rootKind, rootName)
	}
	if _, ok, _ := unstructured.NestedMap(root.Object, "spec", "selfSigned"); !ok {
		t.Errorf("the CA's Issuer is not selfSigned: %v", root.Object["spec"])
	}
	caDur, _, _ := unstructured.NestedString(ca.Object, "spec", "duration")
	servingDur, _, _ := unstructured.NestedString(cert.Object, "spec", "duration")
	if a, b := mustDuration(t, caDur), mustDuration(t, servingDur); a < 5*b {
		t.Errorf("CA lives %s, serving certificate %s: the CA must outlive many renewals", a, b)
	}
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

// TestNetworkPolicy: only the webhook port from anywhere (the API server's
// address is unknown) and the metrics port from the monitoring namespace.
func TestNetworkPolicy(t *testing.T) {
	objs := parse(t, render(t, "default"))
	np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "runner-guard-webhook")
	d := get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	if !mustSelector(t, &np.Spec.PodSelector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("podSelector %+v does not select the webhook pods", np.Spec.PodSelector)
	}
	if !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policyTypes = %v, want Ingress only (the webhook must reach GitHub and the API server)", np.Spec.PolicyTypes)
	}
	type rule struct {
		port int
		from string
	}
	var got []rule
	for _, in := range np.Spec.Ingress {
		from := "anywhere"
		if len(in.From) > 0 {
			from = mustSelector(t, in.From[0].NamespaceSelector).String()
		}
		for _, p := range in.Ports {
			got = append(got, rule{p.Port.IntValue(), from})
		}
	}
	want := []rule{{9443, "anywhere"}, {8443, "kubernetes.io/metadata.name=monitoring"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ingress = %+v, want %+v", got, want)
	}
}

// TestPriorityClassQuota: the system-cluster-critical pods are covered by a
// ResourceQuota scoped to that class, with room for the replicas and a surge.
func TestPriorityClassQuota(t *testing.T) {
	objs := parse(t, render(t, "default"))
	d := get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	q := get[corev1.ResourceQuota](t, objs, "ResourceQuota", "runner-guard-critical-pods")
	sel := q.Spec.ScopeSelector
	if sel == nil || len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].ScopeName != corev1.ResourceQuotaScopePriorityClass ||
		sel.MatchExpressions[0].Operator != corev1.ScopeSelectorOpIn ||
		!reflect.DeepEqual(sel.MatchExpressions[0].Values, []string{d.Spec.Template.Spec.PriorityClassName}) {
		t.Errorf("scopeSelector = %+v, want PriorityClass In [%s]", sel, d.Spec.Template.Spec.PriorityClassName)
	}
	pods := q.Spec.Hard[corev1.ResourcePods]
	if need := int64(deref(d.Spec.Replicas).(int32)) + 1; pods.Value() < need {
		t.Errorf("quota allows %d pods, a rollout needs %d", pods.Value(), need)
	}
}

func TestE2EKindOverlay(t *testing.T) {
	objs := parse(t, render(t, "e2e-kind"))
	d := get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
	args := d.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--github-url=http://fakegithub.runner-guard-system.svc:8080/") {
		t.Errorf("webhook args %q do not point at the fake GitHub", args)
	}
	if !slices.Contains(args, "--github-allow-http") {
		t.Errorf("webhook args %q lack --github-allow-http: the binary refuses the fake's http:// URL without it", args)
	}
	// The suites run here evict runner pods in namespaces without the opt-in
	// label: every entry guards every namespace but the excluded ones.
	vwc := get[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", "runner-guard")
	for _, wh := range vwc.Webhooks {
		checkNamespaces(t, wh.NamespaceSelector, true)
		if got := activatedPolicy(t, vwc, wh); got != admissionregistrationv1.Fail {
			t.Errorf("%s failurePolicy once activated = %v, want Fail", wh.Name, got)
		}
	}
	svc := get[corev1.Service](t, objs, "Service", "fakegithub")
	fake := get[appsv1.Deployment](t, objs, "Deployment", "fakegithub")
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(fake.Spec.Template.Labels)) {
		t.Error("fakegithub Service does not select the fake's pods")
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("fakegithub Service ports = %+v, want 8080", svc.Spec.Ports)
	}
	secret := get[corev1.Secret](t, objs, "Secret", "runner-guard-github")
	if secret.StringData["token"] == "" {
		t.Error("e2e Secret has no token")
	}
	for _, c := range append(d.Spec.Template.Spec.Containers, fake.Spec.Template.Spec.Containers...) {
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("container %s pulls %s: kind-loaded images need IfNotPresent", c.Name, c.ImagePullPolicy)
		}
	}
}

func TestExampleSecret(t *testing.T) {
	objs := parse(t, mustRead(t, "examples/github-secret.yaml"))
	s := get[corev1.Secret](t, objs, "Secret", "runner-guard-github")
	if s.Namespace != namespace {
		t.Errorf("namespace %q", s.Namespace)
	}
	if _, ok := s.StringData["token"]; !ok {
		t.Error("example Secret has no token key")
	}
	text := string(mustRead(t, "examples/github-secret.yaml"))
	for _, w := range []string{"app-id", "installation-id", "private-key.pem", "--github-app-id", "--github-app-installation-id", "--github-app-private-key-file"} {
		if !strings.Contains(text, w) {
			t.Errorf("example Secret does not document %s", w)
		}
	}
	// No kustomization may pick up the example: it holds a placeholder token.
	for _, o := range overlays {
		if objs := parse(t, render(t, o)); o != "e2e-kind" && objs.find("Secret", "runner-guard-github") != nil {
			t.Errorf("overlay %s contains the GitHub Secret", o)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// --- Against a real API server ----------------------------------------------

// certManagerCRDs finds deploy/crds of the cert-manager version pinned in
// hack/tools/certmanager.
func certManagerCRDs(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("CERT_MANAGER_CRDS"); dir != "" {
		return dir
	}
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/cert-manager/cert-manager")
	cmd.Dir = "../hack/tools/certmanager"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download of the pinned cert-manager: %v\n%s", err, stderr.String())
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Error != "" || mod.Dir == "" {
		t.Fatalf("go mod download: %v %s: %s", err, mod.Error, out)
	}
	return filepath.Join(mod.Dir, "deploy", "crds")
}

func TestServerSideDryRun(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("KUBEBUILDER_ASSETS is not set (make test sets it)")
		}
		t.Skip("KUBEBUILDER_ASSETS is not set: run make test-install")
	}
	kubectl := filepath.Join(assets, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl in KUBEBUILDER_ASSETS: %v", err)
	}
	// Render first: skips (no kustomize) before starting an API server.
	docs := map[string][]byte{
		"dist/install.yaml": mustRead(t, "../dist/install.yaml"),
		"e2e-kind":          render(t, "e2e-kind"),
		"local":             render(t, "local"),
	}

	env := &envtest.Environment{
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              []string{certManagerCRDs(t)},
			ErrorIfPathMissing: true,
		},
		ErrorIfCRDPathMissing: true,
	}
	if _, err := env.Start(); err != nil {
		t.Fatalf("start envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	if len(env.CRDs) < 6 {
		t.Fatalf("installed %d cert-manager CRDs, want 6", len(env.CRDs))
	}
	user, err := env.AddUser(envtest.User{Name: "manifests-test", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigData, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kubeconfigData, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(stdin []byte, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// A dry run creates nothing, so the namespace must exist for real before
	// the namespaced objects can be dry-run into it. Create it from the
	// manifest, with its Pod Security labels: the dry run then warns if a pod
	// template breaks the "restricted" profile.
	var nsDoc bytes.Buffer
	for _, o := range parse(t, docs["dist/install.yaml"]) {
		if o.GetKind() == "Namespace" {
			b, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			nsDoc.Write(b)
		}
	}
	if out, err := run(nsDoc.Bytes(), "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("create namespace: %v\n%s", err, out)
	}

	for _, name := range []string{"dist/install.yaml", "e2e-kind", "local"} {
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			out, err := run(docs[name], "apply", "--server-side", "--dry-run=server", "--field-manager=runner-guard-test", "-f", "-")
			if err != nil {
				t.Fatalf("kubectl apply --server-side --dry-run=server: %v\n%s", err, out)
			}
			if strings.Contains(out, "Warning") {
				t.Errorf("the API server warned:\n%s", out)
			}
			n := 0
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if strings.HasSuffix(line, "(server dry run)") {
					n++
				}
			}
			if want := len(parse(t, docs[name])); n != want {
				t.Errorf("%d objects applied, want %d:\n%s", n, want, out)
			}
			t.Logf("%s", out)
		})
	}

	// Nothing of the dry runs was stored.
	out, err := run(nil, "get", "validatingwebhookconfigurations", "-o", "name")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(out, "runner-guard") {
		t.Errorf("a dry run stored the webhook configuration: %s", out)
	}
}

// TestKindTool checks bin/kind (built by make from hack/tools/kind) runs and is
// the pinned version.
func TestKindTool(t *testing.T) {
	kind := requireFile(t, "KIND", "../bin/kind", "run make kind or set KIND")
	gomod := string(mustRead(t, "../hack/tools/kind/go.mod"))
	var want string
	for _, line := range strings.Split(gomod, "\n") {
		line, _, _ = strings.Cut(line, "//")
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) == 2 && f[0] == "sigs.k8s.io/kind" {
			want = f[1]
		}
	}
	if want == "" {
		t.Fatal("hack/tools/kind/go.mod does not require sigs.k8s.io/kind")
	}
	out, err := exec.Command(kind, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("kind version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "kind "+want+" ") {
		t.Errorf("kind version = %q, want %s (rebuild: make kind)", out, want)
	}
}

// TestMakeE2EKindSteps checks `make -n e2e-kind` lists the steps, without a
// container engine.
func TestMakeE2EKindSteps(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	cmd := exec.Command("make", "-n", "e2e-kind", "CERT_MANAGER_MANIFEST=/nonexistent/cert-manager.yaml",
		"KUBECTL=kubectl", "VERSION=test", "BIN="+mustAbs(t, "../bin"))
	cmd.Dir = ".."
	// Not the flags of a make that runs this test.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n e2e-kind: %v\n%s", err, out)
	}
	steps := []string{
		"kind create cluster --name runner-guard-e2e",
		"kubectl apply --server-side -f /nonexistent/cert-manager.yaml",
		"kind load image-archive " + mustAbs(t, "../bin/runner-guard-image.tar"),
		"kind load image-archive " + mustAbs(t, "../bin/fakegithub-image.tar"),
		"build manifests/e2e-kind",
		"wait --for=condition=Ready certificate/runner-guard-serving-cert",
		"clientConfig.caBundle",
		"rollout status deployment/runner-guard-webhook",
		"E2E_CLUSTER=external go test",
		"./test/e2e/...",
	}
	text, last := string(out), 0
	for _, s := range steps {
		i := strings.Index(text[last:], s)
		if i < 0 {
			t.Errorf("make -n e2e-kind lacks %q after position %d:\n%s", s, last, out)
			continue
		}
		last += i
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// activatedPolicy checks an entry ships with failurePolicy Ignore (nothing
// fails before a replica serves) and returns the policy a serving replica
// sets it to, as package activation reads the configuration's annotations.
func activatedPolicy(t *testing.T, vwc *admissionregistrationv1.ValidatingWebhookConfiguration, wh admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.FailurePolicyType {
	t.Helper()
	if got := deref(wh.FailurePolicy); got != admissionregistrationv1.Ignore {
		t.Errorf("%s ships with failurePolicy %s, want Ignore until a replica serves", wh.Name, got)
	}
	wanted, err := activation.Wanted(vwc)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := wanted[activation.KindOf(wh)]
	if !ok {
		t.Fatalf("%s has no wanted failurePolicy annotation", wh.Name)
	}
	return p
}
