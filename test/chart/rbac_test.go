package chart

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/runner-guard/runner-guard/test/render"
	"github.com/runner-guard/runner-guard/webhook"
)

// TestWebhookRBAC: without guarded namespaces the webhook's grants are a
// ClusterRole; with them, a Role and RoleBinding in each guarded namespace and
// nothing cluster-wide on runner pods or ARC's objects, while the metrics
// authentication stays cluster-wide (TokenReviews and SubjectAccessReviews
// are cluster-scoped).
func TestWebhookRBAC(t *testing.T) {
	t.Run("every namespace guarded: ClusterRole", func(t *testing.T) {
		objs := render.MustTemplate(t, "--values", "testdata/values/certmanager-token.yaml")
		role := render.Get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard")
		if want := append(render.WebhookRules(), render.NodeRules()...); !render.EqualJSON(role.Rules, want) {
			t.Errorf("ClusterRole rules %s\nwant %s", render.JSON(t, role.Rules), render.JSON(t, want))
		}
		b := render.Get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "runner-guard")
		render.CheckBinding(t, "ClusterRoleBinding runner-guard", b.RoleRef, b.Subjects, "ClusterRole", "runner-guard")
		for _, r := range objs.OfKind("Role") {
			if r.GetName() != "runner-guard-leader-election" && r.GetName() != "runner-guard-activation" && r.GetName() != "runner-guard-certificates" {
				t.Errorf("Role %s/%s without guarded namespaces", r.GetNamespace(), r.GetName())
			}
		}
		render.CheckMetricsRBAC(t, objs)
	})
	t.Run("guarded namespaces: a Role in each", func(t *testing.T) {
		vf := "testdata/values/guarded-namespaces.yaml"
		guarded := readPolicy(t, vf).Policy.GuardedNamespaces
		objs := render.MustTemplate(t, "--values", vf)
		var nss []string
		for _, r := range objs.OfKind("Role") {
			if r.GetName() == "runner-guard-leader-election" || r.GetName() == "runner-guard-node-events" || r.GetName() == "runner-guard-activation" || r.GetName() == "runner-guard-certificates" {
				continue
			}
			role := render.Get[rbacv1.Role](t, objs.InNamespace(r.GetNamespace()), "Role", r.GetName())
			nss = append(nss, role.Namespace)
			if role.Name != "runner-guard" || !render.EqualJSON(role.Rules, render.WebhookRules()) {
				t.Errorf("Role %s/%s rules %s\nwant %s", role.Namespace, role.Name, render.JSON(t, role.Rules), render.JSON(t, render.WebhookRules()))
			}
			b := render.Get[rbacv1.RoleBinding](t, objs.InNamespace(r.GetNamespace()), "RoleBinding", "runner-guard")
			render.CheckBinding(t, "RoleBinding "+role.Namespace+"/runner-guard", b.RoleRef, b.Subjects, "Role", "runner-guard")
		}
		slices.Sort(nss)
		want := slices.Sorted(slices.Values(guarded))
		if !slices.Equal(nss, want) {
			t.Errorf("Roles in %v, want one in each guarded namespace %v", nss, want)
		}
		for _, name := range []string{"runner-guard"} {
			if objs.Find("ClusterRole", name) != nil || objs.Find("ClusterRoleBinding", name) != nil {
				t.Errorf("ClusterRole(Binding) %s with guarded namespaces", name)
			}
		}
		for _, cr := range objs.OfKind("ClusterRole") {
			rules, _, _ := nestedSlice(cr.Object, "rules")
			for _, r := range rules {
				text := render.JSON(t, r)
				for _, res := range []string{`"pods"`, `"pods/eviction"`, `"ephemeralrunners"`, `"runners"`, `"poddisruptionbudgets"`, `"events"`} {
					if strings.Contains(text, res) {
						t.Errorf("ClusterRole %s grants %s cluster-wide with guarded namespaces: %s", cr.GetName(), res, text)
					}
				}
			}
		}
		// Whether a guarded namespace is being deleted, once its Role is gone:
		// those namespaces only, read only.
		nsRole := render.Get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard-guarded-namespaces")
		wantNS := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: guarded, Verbs: []string{"get"}}}
		if !render.EqualJSON(nsRole.Rules, wantNS) {
			t.Errorf("ClusterRole runner-guard-guarded-namespaces rules %s\nwant %s", render.JSON(t, nsRole.Rules), render.JSON(t, wantNS))
		}
		nsBinding := render.Get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "runner-guard-guarded-namespaces")
		render.CheckBinding(t, "ClusterRoleBinding runner-guard-guarded-namespaces", nsBinding.RoleRef, nsBinding.Subjects, "ClusterRole", "runner-guard-guarded-namespaces")
		render.CheckMetricsRBAC(t, objs)
		cfg := chartConfig(t, objs)
		if !slices.Equal(cfg.RunnerNamespaces, guarded) {
			t.Errorf("config.yaml runnerNamespaces %v, want the guarded namespaces %v (the webhook may read pods only there)", cfg.RunnerNamespaces, guarded)
		}
	})
}

// chartConfig parses a render's --config file with the webhook's own parser.
func chartConfig(t *testing.T, objs render.Objects) webhook.Config {
	t.Helper()
	cm := render.Get[corev1.ConfigMap](t, objs, "ConfigMap", "runner-guard-config")
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
	objs := render.MustTemplate(t, append(append(slices.Clone(valid), noBinding...), "--set", "policy.allowAnyScope=true")...)
	cm := render.Get[corev1.ConfigMap](t, objs, "ConfigMap", "runner-guard-config")
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
			objs := render.MustTemplate(t, c.args...)
			np := render.Get[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "runner-guard-webhook")
			checkPortRules(t, np, "webhook", 9443, c.from)
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
			objs := render.MustTemplate(t, args...)
			cr := render.Get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard-activation")
			wantCR := []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"},
				ResourceNames: []string{"runner-guard"}, Verbs: []string{"get", "list", "watch", "patch"}}}
			if !render.EqualJSON(cr.Rules, wantCR) {
				t.Errorf("ClusterRole runner-guard-activation rules %s\nwant %s", render.JSON(t, cr.Rules), render.JSON(t, wantCR))
			}
			crb := render.Get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "runner-guard-activation")
			render.CheckBinding(t, "ClusterRoleBinding runner-guard-activation", crb.RoleRef, crb.Subjects, "ClusterRole", "runner-guard-activation")
			role := render.Get[rbacv1.Role](t, objs.InNamespace(namespace), "Role", "runner-guard-activation")
			wantRole := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, ResourceNames: []string{"runner-guard-webhook"}, Verbs: []string{"get"}}}
			if !render.EqualJSON(role.Rules, wantRole) {
				t.Errorf("Role runner-guard-activation rules %s\nwant %s", render.JSON(t, role.Rules), render.JSON(t, wantRole))
			}
			rb := render.Get[rbacv1.RoleBinding](t, objs.InNamespace(namespace), "RoleBinding", "runner-guard-activation")
			render.CheckBinding(t, "RoleBinding runner-guard-activation", rb.RoleRef, rb.Subjects, "Role", "runner-guard-activation")
		})
	}
}
