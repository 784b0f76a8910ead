package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// Scenario 6: kubectl delete --dry-run=server answers truthfully and never
// unregisters.
func TestServerDryRun(t *testing.T) {
	s := newBusyAndIdle(t, "dryrun")

	_, stderr, err := s.kubectl("delete", "pod", "runner-busy", "--dry-run=server")
	if err == nil || !strings.Contains(stderr, "runner busy") {
		t.Errorf("dry-run delete of a busy runner's pod: err %v, stderr %q; want refused with 'runner busy'", err, stderr)
	}
	stdout, stderr, err := s.kubectl("delete", "pod", "runner-idle", "--dry-run=server")
	if err != nil || !strings.Contains(stdout, "server dry run") {
		t.Errorf("dry-run delete of an idle runner's pod: err %v, stdout %q, stderr %q", err, stdout, stderr)
	}
	s.requireAlive("runner-busy")
	s.requireAlive("runner-idle")
	if n := s.count("DELETE"); n != 0 {
		t.Errorf("dry runs sent %d DELETEs to GitHub, want 0", n)
	}
	if !s.registered("runner-busy") || !s.registered("runner-idle") {
		t.Error("a dry run unregistered a runner")
	}
	if ev := s.events("runner-busy"); len(ev) != 0 {
		t.Errorf("dry run recorded Events (side effects): %q", ev)
	}
}

// Scenario 7: non-runner pods, pending runner pods and runner pods whose
// runner container has terminated go with zero GitHub requests.
func TestFastPathsAskGitHubNothing(t *testing.T) {
	s := newScenario(t, "fastpath")
	for _, name := range []string{"web", "runner-pending", "runner-done"} {
		env.GitHub.AddRunner(s.scope, name)
		env.GitHub.SetBusy(s.scope, name, true)
	}
	// A pod with the runner's env but without the runner label.
	web := legacyRunnerPod(s.ns, "web", s.scope)
	web.Labels = map[string]string{"app": "web"}
	s.create(web)
	// Pending: never scheduled, no status.
	pending := legacyRunnerPod(s.ns, "runner-pending", s.scope)
	if _, err := env.Client.CoreV1().Pods(s.ns).Create(s.ctx, pending, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Running pod whose runner container exited.
	done := s.create(legacyRunnerPod(s.ns, "runner-done", s.scope))
	for i := range done.Status.ContainerStatuses {
		if done.Status.ContainerStatuses[i].Name == "runner" {
			done.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: metav1.Now(), FinishedAt: metav1.Now()}}
			done.Status.ContainerStatuses[i].Ready = false
		}
	}
	if _, err := env.Client.CoreV1().Pods(s.ns).UpdateStatus(s.ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"web", "runner-pending", "runner-done"} {
		if _, stderr, err := s.kubectl("delete", "pod", name, "--wait=false"); err != nil {
			t.Errorf("delete %s: %v: %s", name, err, stderr)
			continue
		}
		s.requireDeleting(name)
	}
	if got := s.github(); len(got) != 0 {
		t.Errorf("fast paths sent %d GitHub requests, want 0: %+v", len(got), got)
	}
}

// Scenario 8: GitHub failing (500s, then not reachable at all): --on-error=deny
// refuses with a message naming the error, --on-error=allow lets the pod go.
func TestGitHubFailure(t *testing.T) {
	s := newScenario(t, "ghfail")
	s.runnerPod("runner-a", false, true)
	s.runnerPod("runner-b", false, true)
	t.Cleanup(func() {
		env.GitHub.ClearFaults()
		if !env.Local() {
			return
		}
		if err := env.StartGitHub(); err != nil {
			t.Logf("restart fake GitHub: %v", err)
		}
		if err := env.RestartWebhook(s.ctx); err != nil {
			t.Errorf("restore webhook: %v", err)
		}
	})

	env.GitHub.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 500, PathContains: scopePath(s.scope)})
	_, stderr, err := s.kubectl("delete", "pod", "runner-a", "--wait=false")
	// The refusal names the setting as it was given: the flag (the local
	// webhook, manifests/e2e-kind) or the --config file (the chart).
	if err == nil || !strings.Contains(stderr, "500") || !(strings.Contains(stderr, "--on-error=deny") || strings.Contains(stderr, "onError: deny in --config")) {
		t.Errorf("delete with GitHub answering 500: err %v, stderr %q; want refused naming the 500 and onError deny", err, stderr)
	}
	s.requireAlive("runner-a")
	if !env.Local() {
		t.Log("existing cluster: GitHub down and --on-error=allow need a local webhook; checked by the local run")
		return
	}

	env.StopGitHub()
	// The pod's last decision failed: it is answered from memory (GitHub's
	// 500) for a backoff of a second before GitHub is asked again.
	s.waitRefusedWith("delete with GitHub down refused naming it", "runner-a", "connection refused", 30*time.Second, 0)
	s.requireAlive("runner-a")

	if err := env.RestartWebhook(s.ctx, "--on-error=allow"); err != nil {
		t.Fatal(err)
	}
	_, stderr, err = s.kubectl("delete", "pod", "runner-b", "--wait=false")
	if err != nil {
		t.Fatalf("delete with GitHub down and --on-error=allow: %v: %s", err, stderr)
	}
	if !strings.Contains(stderr, "Warning:") || !strings.Contains(stderr, "--on-error=allow") {
		t.Errorf("no admission warning for the allowed delete: %q", stderr)
	}
	s.requireDeleting("runner-b")
}

// Scenario 9: the force annotation and a bypass user let a busy runner's pod
// go, each with a Warning Event and an admission warning.
func TestForceAndBypass(t *testing.T) {
	s := newScenario(t, "force")
	s.runnerPod("runner-forced", true, true)
	s.runnerPod("runner-gc", true, true)

	if _, stderr, err := s.kubectl("annotate", "pod", "runner-forced", "runner-guard.io/force-delete=true"); err != nil {
		t.Fatalf("annotate: %v: %s", err, stderr)
	}
	_, stderr, err := s.kubectl("delete", "pod", "runner-forced", "--wait=false")
	if err != nil {
		t.Fatalf("forced delete: %v: %s", err, stderr)
	}
	if !strings.Contains(stderr, "Warning:") || !strings.Contains(stderr, "runner-guard.io/force-delete=true") {
		t.Errorf("forced delete without admission warning: %q", stderr)
	}
	s.requireDeleting("runner-forced")
	if ev := s.waitForEvent("runner-forced", "GuardBypassed"); !strings.HasPrefix(ev, "Warning") {
		t.Errorf("event %q is not a Warning", ev)
	}

	if got := s.github(); len(got) != 0 {
		t.Errorf("the forced delete asked GitHub %d times, want 0", len(got))
	}

	// A bypass user (here the controller that evicts pods from tainted nodes)
	// deleting a pod whose runner GitHub reports online and busy is refused:
	// the node is alive and a job runs there.
	_, stderr, err = s.kubectl("delete", "pod", "runner-gc", "--wait=false", "--as=system:serviceaccount:kube-system:node-controller")
	if err == nil || !strings.Contains(stderr, "runner busy") || !strings.Contains(stderr, "bypass list") {
		t.Fatalf("bypass user's delete of a live busy runner: err %v, stderr %q; want refused with runner busy", err, stderr)
	}
	s.requireAlive("runner-gc")
	if ev := s.waitForEvent("runner-gc", "GuardBypassRefused"); !strings.HasPrefix(ev, "Warning") {
		t.Errorf("event %q is not a Warning", ev)
	}
	if n := s.count("DELETE"); n != 0 {
		t.Errorf("bypass look-ups sent %d DELETEs, want 0 (read-only)", n)
	}
	// Once GitHub sees the runner offline (its node died), the pod goes. Pod
	// GC retries a refused delete; runner-guard answers the retries from the
	// read-only look-up it remembers (readOnlyMemoryTTL) until that expires.
	env.GitHub.SetOnline(s.scope, "runner-gc", false)
	stderr = deleteUntilAdmitted(s, "runner-gc", "--as=system:serviceaccount:kube-system:pod-garbage-collector")
	if !strings.Contains(stderr, "bypass list") {
		t.Errorf("bypass delete without admission warning: %q", stderr)
	}
	s.requireDeleting("runner-gc")
	s.waitForEvent("runner-gc", "GuardBypassed")
}

// Scenario 10: deleting a namespace that holds a busy runner's pod leaves it
// Terminating until the runner is idle, then it finishes. The pod's Runner is
// deleted with the namespace; ARC's finalizer keeps it until ARC has
// unregistered the runner (a pod whose Runner is gone is ARC's clean-up, let
// go without asking GitHub), so the test's finalizer plays ARC's and is
// dropped once the pod is gone.
func TestNamespaceDeletionWaitsForBusyRunner(t *testing.T) {
	s := newScenario(t, "nsdelete")
	pod := s.runnerPod("runner-busy", true, true)
	owned := metav1.GetControllerOf(pod) != nil
	if owned {
		if err := s.setLegacyRunnerFinalizers(s.ctx, "runner-busy", keepFinalizer); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.setLegacyRunnerFinalizers(ctx, "runner-busy"); err != nil && !apierrors.IsNotFound(err) {
				t.Logf("release Runner runner-busy: %v", err)
			}
		})
	}
	if err := env.Client.CoreV1().Namespaces().Delete(s.ctx, s.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.eventually("namespace controller refused", 60*time.Second, func() error {
		if n := s.count("DELETE"); n < 1 {
			return fmt.Errorf("no unregister attempt yet")
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	ns, err := env.Client.CoreV1().Namespaces().Get(s.ctx, s.ns, metav1.GetOptions{})
	if err != nil || ns.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("namespace: %v, phase %v; want Terminating", err, ns.Status.Phase)
	}
	s.requireAlive("runner-busy")

	env.GitHub.SetBusy(s.scope, "runner-busy", false)
	s.waitDeletionAdmitted("pod admitted for deletion once idle", 120*time.Second, "runner-busy")
	s.requireDeleting("runner-busy")
	if owned {
		// ARC drops its finalizer once it has unregistered the runner.
		if err := s.setLegacyRunnerFinalizers(s.ctx, "runner-busy"); err != nil {
			t.Fatal(err)
		}
	}
	s.eventually("namespace gone", 120*time.Second, func() error {
		_, err := env.Client.CoreV1().Namespaces().Get(s.ctx, s.ns, metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("namespace still there")
		}
		return nil
	})
	if s.registered("runner-busy") {
		t.Error("runner still registered")
	}
}

// Scenario 11: repository, organization and enterprise scopes, and ARC's
// scale-set mode, each end to end.
func TestScopes(t *testing.T) {
	repo, _ := ghclient.RepoScope("acme/app-scopes")
	org := fixture.Org("org-scopes")
	ent, _ := ghclient.EnterpriseScope("ent-scopes")
	tests := map[string]struct {
		scope    ghclient.Scope
		scaleSet bool
	}{
		"repo":           {scope: repo},
		"org":            {scope: org},
		"enterprise":     {scope: ent},
		"scale-set org":  {scope: mustOrg("org-scaleset"), scaleSet: true},
		"scale-set repo": {scope: mustRepo("acme/app-scaleset"), scaleSet: true},
	}
	s := newScenario(t, "scopes")
	i := 0
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			i++
			sc := *s
			sc.t, sc.scope = t, tc.scope
			busyName, idleName := fmt.Sprintf("busy-%d", i), fmt.Sprintf("idle-%d", i)
			for _, n := range []string{busyName, idleName} {
				env.GitHub.AddRunner(tc.scope, n)
				pod := legacyRunnerPod(s.ns, n, tc.scope)
				if tc.scaleSet {
					pod = scaleSetRunnerPod(s.ns, n, tc.scope)
				}
				sc.create(pod)
			}
			env.GitHub.SetBusy(tc.scope, busyName, true)

			_, stderr, err := sc.kubectl("delete", "pod", busyName, "--wait=false")
			if err == nil || !strings.Contains(stderr, "runner busy") || !strings.Contains(stderr, tc.scope.String()) {
				t.Errorf("busy: err %v, stderr %q; want refused naming %s", err, stderr, tc.scope)
			}
			sc.requireAlive(busyName)
			if _, stderr, err := sc.kubectl("delete", "pod", idleName, "--wait=false"); err != nil {
				t.Fatalf("idle: %v: %s", err, stderr)
			}
			sc.requireDeleting(idleName)
			if sc.registered(idleName) || !sc.registered(busyName) {
				t.Errorf("registered: idle %v busy %v; want false true", sc.registered(idleName), sc.registered(busyName))
			}
			// The idle runner's DELETE, and GitHub's busy answer for the
			// other: its DELETE's 422, or (while the credential's budget
			// is pressed by earlier scenarios) a listing showing it busy.
			if n := sc.count("DELETE"); n < 1 || n > 2 {
				t.Errorf("DELETEs under %s = %d, want the idle runner's and at most one for the busy runner", scopePath(tc.scope), n)
			}
		})
	}
}

func mustOrg(n string) ghclient.Scope  { s, _ := ghclient.OrgScope(n); return s }
func mustRepo(n string) ghclient.Scope { s, _ := ghclient.RepoScope(n); return s }

// scaleSetRunnerPod looks like a pod of ARC's scale-set mode (EphemeralRunner).
func scaleSetRunnerPod(ns, name string, scope ghclient.Scope) *corev1.Pod {
	labels := map[string]string{"actions-ephemeral-runner": "True", "app.kubernetes.io/component": "runner"}
	switch scope.Kind {
	case ghclient.ScopeRepo:
		owner, repo, _ := strings.Cut(scope.Name, "/")
		labels["actions.github.com/organization"], labels["actions.github.com/repository"] = owner, repo
	case ghclient.ScopeOrg:
		labels["actions.github.com/organization"] = scope.Name
	case ghclient.ScopeEnterprise:
		labels["actions.github.com/enterprise"] = scope.Name
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "actions-runner:e2e"}}},
	}
}
