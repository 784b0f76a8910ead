package chart

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/runner-guard/runner-guard/webhook"
)

// webhookRules are the webhook's grants, cluster-wide or in each guarded namespace.
var webhookRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch", "delete"}},
	{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	{APIGroups: []string{"actions.github.com"}, Resources: []string{"ephemeralrunners"}, Verbs: []string{"get", "list", "watch", "delete"}},
	{APIGroups: []string{"actions.summerwind.dev"}, Resources: []string{"runners"}, Verbs: []string{"get"}},
	{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"list"}},
}

// nodeRules are the disruption controller's cluster-scoped grants: Nodes and
// Karpenter's NodeClaims.
var nodeRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"karpenter.sh"}, Resources: []string{"nodeclaims"}, Verbs: []string{"get", "list"}},
}

// TestWebhookRBAC: without guarded namespaces the webhook's grants are a
// ClusterRole; with them, a Role and RoleBinding in each guarded namespace and
// nothing cluster-wide on runner pods or ARC's objects, while the metrics
// authentication stays cluster-wide (TokenReviews and SubjectAccessReviews
// are cluster-scoped).
func TestWebhookRBAC(t *testing.T) {
	t.Run("every namespace guarded: ClusterRole", func(t *testing.T) {
		objs := mustTemplate(t, "--values", "testdata/values/certmanager-token.yaml")
		role := get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard")
		if want := append(slices.Clone(webhookRules), nodeRules...); !equalJSON(role.Rules, want) {
			t.Errorf("ClusterRole rules %s\nwant %s", toJSON(t, role.Rules), toJSON(t, want))
		}
		b := get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "runner-guard")
		checkBinding(t, "ClusterRoleBinding runner-guard", b.RoleRef, b.Subjects, "ClusterRole")
		for _, r := range objs.ofKind("Role") {
			if r.GetName() != "runner-guard-leader-election" && r.GetName() != "runner-guard-activation" {
				t.Errorf("Role %s/%s without guarded namespaces", r.GetNamespace(), r.GetName())
			}
		}
		checkMetricsAuth(t, objs)
	})
	t.Run("guarded namespaces: a Role in each", func(t *testing.T) {
		vf := "testdata/values/guarded-namespaces.yaml"
		guarded := readPolicy(t, vf).Policy.GuardedNamespaces
		objs := mustTemplate(t, "--values", vf)
		var nss []string
		for _, r := range objs.ofKind("Role") {
			if r.GetName() == "runner-guard-leader-election" || r.GetName() == "runner-guard-node-events" || r.GetName() == "runner-guard-activation" {
				continue
			}
			role := get[rbacv1.Role](t, objs.inNamespace(r.GetNamespace()), "Role", r.GetName())
			nss = append(nss, role.Namespace)
			if role.Name != "runner-guard" || !equalJSON(role.Rules, webhookRules) {
				t.Errorf("Role %s/%s rules %s\nwant %s", role.Namespace, role.Name, toJSON(t, role.Rules), toJSON(t, webhookRules))
			}
			b := get[rbacv1.RoleBinding](t, objs.inNamespace(r.GetNamespace()), "RoleBinding", "runner-guard")
			checkBinding(t, "RoleBinding "+role.Namespace+"/runner-guard", b.RoleRef, b.Subjects, "Role")
		}
		slices.Sort(nss)
		want := slices.Sorted(slices.Values(guarded))
		if !slices.Equal(nss, want) {
			t.Errorf("Roles in %v, want one in each guarded namespace %v", nss, want)
		}
		for _, name := range []string{"runner-guard"} {
			if objs.find("ClusterRole", name) != nil || objs.find("ClusterRoleBinding", name) != nil {
				t.Errorf("ClusterRole(Binding) %s with guarded namespaces", name)
			}
		}
		for _, cr := range objs.ofKind("ClusterRole") {
			rules, _, _ := nestedSlice(cr.Object, "rules")
			for _, r := range rules {
				text := toJSON(t, r)
				for _, res := range []string{`"pods"`, `"ephemeralrunners"`, `"runners"`, `"poddisruptionbudgets"`, `"events"`} {
					if strings.Contains(text, res) {
						t.Errorf("ClusterRole %s grants %s cluster-wide with guarded namespaces: %s", cr.GetName(), res, text)
					}
				}
			}
		}
		checkMetricsAuth(t, objs)
		cfg := chartConfig(t, objs)
		if !slices.Equal(cfg.RunnerNamespaces, guarded) {
			t.Errorf("config.yaml runnerNamespaces %v, want the guarded namespaces %v (the webhook may read pods only there)", cfg.RunnerNamespaces, guarded)
		}
	})
}

func checkBinding(t *testing.T, what string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, kind string) {
	t.Helper()
	if ref != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: "runner-guard"}) {
		t.Errorf("%s roleRef %+v", what, ref)
	}
	if !equalJSON(subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "runner-guard", Namespace: namespace}}) {
		t.Errorf("%s subjects %+v", what, subjects)
	}
}

// checkMetricsAuth: the secure metrics endpoint's cluster-wide grants stay.
func checkMetricsAuth(t *testing.T, objs objects) {
	t.Helper()
	auth := get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard-metrics-auth")
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if !equalJSON(auth.Rules, want) {
		t.Errorf("metrics-auth rules %+v", auth.Rules)
	}
	get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "runner-guard-metrics-auth")
}

// chartConfig parses a render's --config file with the webhook's own parser.
func chartConfig(t *testing.T, objs objects) webhook.Config {
	t.Helper()
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", "runner-guard-config")
	cfg, err := webhook.ParseConfig([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the webhook rejects the chart's config: %v\n%s", err, cm.Data["config.yaml"])
	}
	return cfg
}

// TestAllowAnyScope: with policy.allowAnyScope and no binding the chart
// renders, and its config file carries no scopeBindings, so the binary runs
// open (and says so at start-up).
func TestAllowAnyScope(t *testing.T) {
	objs := mustTemplate(t, append(append(slices.Clone(valid), noBinding...), "--set", "policy.allowAnyScope=true")...)
	cm := get[corev1.ConfigMap](t, objs, "ConfigMap", "runner-guard-config")
	if text := cm.Data["config.yaml"]; strings.Contains(text, "scopeBindings") {
		t.Errorf("config.yaml names scopeBindings with allowAnyScope and no binding:\n%s", text)
	}
	if cfg := chartConfig(t, objs); len(cfg.ScopeBindings) != 0 {
		t.Errorf("scopeBindings %+v, want none", cfg.ScopeBindings)
	}
}

// TestWebhookSources: networkPolicy.webhookSources and runner-guard's own
// pods (activation checks that the Service answers) become the only peers of
// the webhook port's rule; without them the port admits every source. The
// metrics rule is the same either way.
func TestWebhookSources(t *testing.T) {
	metricsRule := `{"ports":[{"protocol":"TCP","port":8443}],"from":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]}`
	self := `{"podSelector":{"matchLabels":{"app.kubernetes.io/component":"webhook","app.kubernetes.io/instance":"runner-guard","app.kubernetes.io/name":"runner-guard"}}}`
	cases := map[string]struct {
		args []string
		from string // the webhook port rule's from, as JSON
	}{
		"unset: every source": {valid, "null"},
		"an address": {append(slices.Clone(valid), "--set", "networkPolicy.webhookSources[0].ipBlock.cidr=10.0.0.10/32"),
			`[{"ipBlock":{"cidr":"10.0.0.10/32"}},` + self + `]`},
		"a CIDR and in-cluster pods": {[]string{"--values", "testdata/values/generate-app.yaml"},
			`[{"ipBlock":{"cidr":"10.0.0.0/24"}},{"podSelector":{"matchLabels":{"k8s-app":"konnectivity-agent"}},"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kube-system"}}},` + self + `]`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			objs := mustTemplate(t, c.args...)
			np := get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "runner-guard-webhook")
			if len(np.Spec.Ingress) != 2 {
				t.Fatalf("ingress %s, want the webhook and metrics rules", toJSON(t, np.Spec.Ingress))
			}
			wh := np.Spec.Ingress[0]
			if len(wh.Ports) != 1 || wh.Ports[0].Port.IntValue() != 9443 {
				t.Errorf("first rule ports %s, want the webhook port 9443", toJSON(t, wh.Ports))
			}
			if got := toJSON(t, wh.From); got != c.from {
				t.Errorf("webhook port from %s\nwant %s", got, c.from)
			}
			if got := toJSON(t, np.Spec.Ingress[1]); got != metricsRule {
				t.Errorf("metrics rule %s\nwant %s", got, metricsRule)
			}
		})
	}
}

// TestActivationRBAC: activation may read, watch and patch the chart's own
// webhook configuration and read its own Service, nothing else, whatever the
// guarded namespaces.
func TestActivationRBAC(t *testing.T) {
	for name, args := range map[string][]string{
		"every namespace guarded": valid,
		"guarded namespaces":      {"--values", "testdata/values/guarded-namespaces.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := mustTemplate(t, args...)
			cr := get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard-activation")
			wantCR := []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"},
				ResourceNames: []string{"runner-guard"}, Verbs: []string{"get", "list", "watch", "patch"}}}
			if !equalJSON(cr.Rules, wantCR) {
				t.Errorf("ClusterRole runner-guard-activation rules %s\nwant %s", toJSON(t, cr.Rules), toJSON(t, wantCR))
			}
			crb := get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "runner-guard-activation")
			checkActivationBinding(t, "ClusterRoleBinding", crb.RoleRef, crb.Subjects, "ClusterRole")
			role := get[rbacv1.Role](t, objs.inNamespace(namespace), "Role", "runner-guard-activation")
			wantRole := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, ResourceNames: []string{"runner-guard-webhook"}, Verbs: []string{"get"}}}
			if !equalJSON(role.Rules, wantRole) {
				t.Errorf("Role runner-guard-activation rules %s\nwant %s", toJSON(t, role.Rules), toJSON(t, wantRole))
			}
			rb := get[rbacv1.RoleBinding](t, objs.inNamespace(namespace), "RoleBinding", "runner-guard-activation")
			checkActivationBinding(t, "RoleBinding", rb.RoleRef, rb.Subjects, "Role")
		})
	}
}

func checkActivationBinding(t *testing.T, what string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, kind string) {
	t.Helper()
	if ref != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: "runner-guard-activation"}) {
		t.Errorf("%s runner-guard-activation roleRef %+v", what, ref)
	}
	if !equalJSON(subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "runner-guard", Namespace: namespace}}) {
		t.Errorf("%s runner-guard-activation subjects %+v", what, subjects)
	}
}
