package render

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// The checks of this file are what the manifests and the chart tests both
// require of a render.

// CheckBinding requires a (Cluster)RoleBinding to grant the kind (Role or
// ClusterRole) called name to runner-guard's ServiceAccount in Namespace,
// and to no one else.
func CheckBinding(t testing.TB, what string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, kind, name string) {
	t.Helper()
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: name}); ref != want {
		t.Errorf("%s roleRef %+v, want %+v", what, ref, want)
	}
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "runner-guard", Namespace: Namespace}}; !EqualJSON(subjects, want) {
		t.Errorf("%s subjects %+v, want %+v", what, subjects, want)
	}
}

// CheckMetricsRBAC: the secure metrics endpoint may create TokenReviews and
// SubjectAccessReviews and nothing else, cluster-wide (both are
// cluster-scoped); scrapers get the reader role.
func CheckMetricsRBAC(t testing.TB, objs Objects) {
	t.Helper()
	auth := Get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard-metrics-auth")
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
	}
	if !EqualJSON(auth.Rules, want) {
		t.Errorf("metrics-auth rules %s\nwant %s", JSON(t, auth.Rules), JSON(t, want))
	}
	b := Get[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding", "runner-guard-metrics-auth")
	CheckBinding(t, "ClusterRoleBinding runner-guard-metrics-auth", b.RoleRef, b.Subjects, "ClusterRole", "runner-guard-metrics-auth")
	reader := Get[rbacv1.ClusterRole](t, objs, "ClusterRole", "runner-guard-metrics-reader")
	if wantReader := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}; !EqualJSON(reader.Rules, wantReader) {
		t.Errorf("metrics-reader rules %s\nwant %s", JSON(t, reader.Rules), JSON(t, wantReader))
	}
}

// WebhookRules are the grants of the webhook and its disruption controller
// on namespaced objects: cluster-wide, or in each guarded namespace. The
// kustomize manifests and the chart grant the same.
func WebhookRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"actions.github.com"}, Resources: []string{"ephemeralrunners"}, Verbs: []string{"get", "list", "watch", "delete"}},
		{APIGroups: []string{"actions.summerwind.dev"}, Resources: []string{"runners"}, Verbs: []string{"get"}},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"list", "watch", "create", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
}

// NodeRules are the disruption controller's cluster-scoped grants: Nodes and
// Karpenter's NodeClaims.
func NodeRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"karpenter.sh"}, Resources: []string{"nodeclaims"}, Verbs: []string{"get", "list"}},
	}
}
