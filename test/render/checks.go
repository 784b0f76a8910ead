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
