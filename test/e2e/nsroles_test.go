package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// grantEphemeralRunnersByRole takes EphemeralRunners out of the webhook's
// ClusterRole and grants them by a Role in the scenario's namespace only, as
// the chart does with policy.guardedNamespaces; the ClusterRole is restored
// when the test ends.
func (s *scaleSet) grantEphemeralRunnersByRole() string {
	s.t.Helper()
	const clusterRole = "runner-guard"
	cr, err := env.Client.RbacV1().ClusterRoles().Get(s.ctx, clusterRole, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	saved := cr.DeepCopy()
	cr.Rules = slices.DeleteFunc(cr.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "ephemeralrunners") })
	if _, err := env.Client.RbacV1().ClusterRoles().Update(s.ctx, cr, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cur, err := env.Client.RbacV1().ClusterRoles().Get(ctx, clusterRole, metav1.GetOptions{})
		if err == nil {
			cur.Rules = saved.Rules
			_, err = env.Client.RbacV1().ClusterRoles().Update(ctx, cur, metav1.UpdateOptions{})
		}
		if err != nil {
			s.t.Errorf("restore ClusterRole %s: %v", clusterRole, err)
		}
	})
	const role = "runner-guard-ephemeralrunners"
	s.role(role, rbacv1.PolicyRule{APIGroups: []string{"actions.github.com"}, Resources: []string{"ephemeralrunners"}, Verbs: []string{"get", "list", "watch", "delete"}})
	return role
}

// A namespace being deleted whose Roles go before its pods, with
// credentials read only from ARC: the EphemeralRunner can no longer be read,
// so nothing can ask GitHub, and the idle runner's pod goes loudly
// (namespace-deleting) instead of being refused for want of credentials,
// which kept the namespace Terminating forever.
func TestNamespaceDeletionWithRoles(t *testing.T) {
	s := newScaleSet(t, "nsdel-roles")
	s.allowSecrets()
	s.allowNamespaceRead()
	s.secret("arc-creds", map[string]string{"github_token": e2eGitHubToken})
	role := s.grantEphemeralRunnersByRole()
	restartWebhook(t, "--credentials-mode=arc", "--github-token-file=")
	scope := mustScope(ghclient.OrgScope("org-nsdel-roles"))
	idle := s.runner("nsdel-roles-idle", env.GitHubURL+scope.Name, scope, false, func(w *fixture.EphemeralRunnerWrapper) { w.ConfigSecret("arc-creds") })

	// The namespace controller may delete the Roles before the pods: do so
	// first, then delete the namespace.
	if err := env.Client.RbacV1().Roles(s.ns).Delete(s.ctx, role, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.CoreV1().Namespaces().Delete(s.ctx, s.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually("the idle runner's pod admitted for deletion", 90*time.Second, func() error {
		if err := s.deletionAdmitted(idle.name); err != nil {
			return err
		}
		return env.FinishTermination(s.ctx, s.ns, idle.name)
	})
	if !idle.registered() {
		t.Errorf("runner %s unregistered with no credentials to ask GitHub with", idle.name)
	}
	// The decisions metric counts the reason (labels in the exposition's order).
	n, err := env.WebhookMetric(s.ctx, `runner_guard_decisions_total{decision="allow",operation="delete",reason="namespace-deleting"}`)
	if err != nil || n < 1 {
		t.Errorf("decisions with reason namespace-deleting: %v (%v), want at least 1", n, err)
	}
}
