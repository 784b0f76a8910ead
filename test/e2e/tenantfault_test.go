package e2e

import (
	"strings"
	"testing"

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
