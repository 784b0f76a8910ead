package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

// Issue 27: a pod naming a repository GitHub does not know (a typo in
// RUNNER_REPO), deleted in a loop, costs the shared credential one request
// about that repository, not one a delete; each delete is refused and the
// pod kept; and another namespace's idle runner is released meanwhile.
func TestMissingRepositoryFloodLeavesOtherNamespacesAlone(t *testing.T) {
	typo := newScenario(t, "typo")
	typo.scope = ghclient.Scope{Kind: ghclient.ScopeRepo, Name: "acme-typo/does-not-exist"}
	env.GitHub.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 404, PathContains: scopePath(typo.scope)})
	t.Cleanup(env.GitHub.ClearFaults)
	typo.create(legacyRunnerPod(typo.ns, "runner-typo", typo.scope))

	neighbour := newScenario(t, "neighbour")
	neighbour.runnerPod("runner-idle", false, true)

	for i := range 30 {
		_, stderr, err := typo.kubectl("delete", "pod", "runner-typo", "--wait=false")
		if err == nil || !strings.Contains(stderr, "404") {
			t.Fatalf("delete %d of a pod in a missing repository: err %v, stderr %q; want refused naming GitHub's 404", i, err, stderr)
		}
		if i == 15 {
			// The other namespace's release, in the middle of the flood.
			if _, stderr, err := neighbour.kubectl("delete", "pod", "runner-idle", "--wait=false"); err != nil {
				t.Fatalf("the other namespace's idle release during the flood: %v: %s", err, stderr)
			}
		}
	}
	typo.requireAlive("runner-typo")
	neighbour.requireDeleting("runner-idle")
	if neighbour.registered("runner-idle") {
		t.Error("the other namespace's runner is still registered on GitHub")
	}
	if got := len(typo.github()); got > 2 {
		t.Errorf("GitHub requests about the missing repository for 30 deletes = %d, want at most 2", got)
	}
}

// Issue 27: under 5 % of GitHub's hourly limit left, runner-guard holds a
// busy runner's re-check for releases. That hold is its own choice: with
// onError: allow the pod is refused (github-budget-spent) once the
// remembered "busy" is no longer trusted, never let go without a request.
func TestHourlyReserveIsRefusedUnderOnErrorAllow(t *testing.T) {
	fake, ok := env.GitHub.(*ghfake.Fake)
	if !env.Local() || !ok {
		t.Skip("needs the in-process fake GitHub (its hourly limit) and a local webhook (its flags)")
	}
	s := newScenario(t, "reserve")
	s.runnerPod("runner-busy", true, true)
	t.Cleanup(func() { fake.SetRateLimit(5000, 5000, time.Now().Add(time.Hour)) })
	// A "busy" trusted for at most 20 s, and known for 40 s: the wait for
	// the remembered "busy" to lapse stays short.
	file := filepath.Join(t.TempDir(), "runner-guard.yaml")
	if err := os.WriteFile(file, []byte("busyRetryAfter: 1s\nbusyRetryMax: 20s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	restartWebhook(t, "--config="+file, "--on-error=allow")
	fake.SetRateLimit(5000, 100, time.Now().Add(time.Hour))

	if _, stderr, err := s.kubectl("delete", "pod", "runner-busy", "--wait=false"); err == nil || !strings.Contains(stderr, "runner busy") {
		t.Fatalf("first delete of a busy runner: err %v, stderr %q; want refused as busy", err, stderr)
	}
	// A delete a second, as a retrying drain; one let go would be onError:
	// allow letting a busy runner's pod go without asking GitHub.
	s.waitRefusedWith("the re-check held for the hourly reserve", "runner-busy", "github-budget-spent", 2*time.Minute, time.Second)
	s.requireAlive("runner-busy")
	if !s.registered("runner-busy") {
		t.Error("the busy runner was unregistered")
	}
}

// Issue 27: a bypass user's delete (pod GC cleaning up after a dead node)
// is let go on GitHub's word only. When runner-guard's own budget holds the
// look-up back, nothing was asked: the delete is refused
// (github-budget-spent), not let go as if the runner were offline.
func TestBypassUserWhileTheBudgetIsSpent(t *testing.T) {
	if !env.Local() {
		t.Skip("existing cluster: the webhook's --config cannot be changed from here")
	}
	s := newScenario(t, "bypass-spent")
	// 5 points a minute for each replica, the budget shared as the chart
	// shares it (replicas: its replicaCount): five look-ups (a GET each) per
	// replica, then none. Two deletes more than that for each.
	replicas := len(env.ReplicaAddrs())
	pods := 7 * replicas
	for i := range pods {
		s.runnerPod(fmt.Sprintf("runner-%d", i), false, false)
	}
	file := filepath.Join(t.TempDir(), "runner-guard.yaml")
	budget := fmt.Sprintf("githubBudget: {pointsPerMinute: %d, replicas: %d}\n", 5*replicas, replicas)
	if err := os.WriteFile(file, []byte(budget), 0o600); err != nil {
		t.Fatal(err)
	}
	restartWebhook(t, "--config="+file, "--on-error=allow")
	gc := "--as=system:serviceaccount:kube-system:pod-garbage-collector"
	refused := ""
	for i := range pods {
		name := fmt.Sprintf("runner-%d", i)
		_, stderr, err := s.kubectl("delete", "pod", name, "--wait=false", gc)
		if err != nil {
			if !strings.Contains(stderr, "github-budget-spent") {
				t.Fatalf("bypass delete of %s refused for another reason: %s", name, stderr)
			}
			refused = name
			break
		}
		if !strings.Contains(stderr, "offline, idle or unknown") {
			t.Errorf("bypass delete of %s let go without GitHub's word: %s", name, stderr)
		}
	}
	if refused == "" {
		t.Fatal(errors.New("every bypass delete was let go: the budget never held one back"))
	}
	s.requireAlive(refused)
}
