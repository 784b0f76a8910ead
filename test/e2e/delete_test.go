package e2e

import (
	"strings"
	"testing"
)

// Scenario 1: kubectl delete of a busy runner's pod fails with "runner busy";
// the pod and the registration remain.
func TestKubectlDeleteBusyRunnerRefused(t *testing.T) {
	s := newScenario(t, "busy")
	s.runnerPod("runner-busy", true, true)

	_, stderr, err := s.kubectl("delete", "pod", "runner-busy", "--wait=false")
	if err == nil {
		t.Fatal("kubectl delete of a busy runner's pod succeeded")
	}
	for _, want := range []string{"runner busy", `"runner-busy"`, `org "org-busy"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("kubectl stderr %q lacks %q", stderr, want)
		}
	}
	s.requireAlive("runner-busy")
	if !s.registered("runner-busy") {
		t.Error("busy runner was unregistered on GitHub")
	}
	// The unregister attempt; or, while the budget is pressed (earlier
	// scenarios spent it within the minute), the scope's listing showing the
	// runner busy, which answers instead of a DELETE.
	if d, l := s.count("DELETE"), s.listings(); d < 1 && l < 1 {
		t.Errorf("GitHub saw %d DELETEs and %d listings, want the unregister attempt (or, budget pressed, the listing)", d, l)
	}
	s.waitForEvent("runner-busy", "RunnerBusy")
}

// Scenario 2: kubectl delete of an idle runner's pod succeeds; exactly one
// DELETE reached GitHub and the runner is gone there.
func TestKubectlDeleteIdleRunnerUnregisters(t *testing.T) {
	s := newScenario(t, "idle")
	pod := s.runnerPod("runner-idle", false, true)

	if _, stderr, err := s.kubectl("delete", "pod", "runner-idle", "--wait=false"); err != nil {
		t.Fatalf("kubectl delete failed: %v: %s", err, stderr)
	}
	s.requireDeleting("runner-idle")
	if s.registered("runner-idle") {
		t.Error("runner still registered on GitHub")
	}
	// The runner ID is on the pod. Whoever may create pods there could have
	// written it, Runner or not, so it is checked first against GitHub's
	// record: the scope's listing (one GET, which answers every decision in
	// the scope for 15s), or a GET of the ID in a scope of several pages.
	// Then one deletion (however many reviews the API server sends) costs
	// exactly one DELETE.
	got := s.github()
	if len(got) > 1 && got[0].Method == "GET" && strings.HasSuffix(got[0].Path, "/actions/runners") {
		got = got[1:]
	} else if len(got) > 1 && got[0].Method == "GET" && strings.HasSuffix(got[0].Path, "/actions/runners/"+pod.Annotations["actions-runner/id"]) {
		got = got[1:]
	}
	if len(got) != 1 || got[0].Method != "DELETE" || got[0].Status != 204 {
		t.Errorf("GitHub requests = %+v, want exactly one DELETE answered 204", s.github())
	}
	s.waitForEvent("runner-idle", "RunnerUnregistered")

	// Without the ID annotation, a look-up by name and the DELETE: at most 2.
	s.runnerPod("runner-idle-noid", false, false)
	before := len(s.github())
	if _, stderr, err := s.kubectl("delete", "pod", "runner-idle-noid", "--wait=false"); err != nil {
		t.Fatalf("kubectl delete failed: %v: %s", err, stderr)
	}
	s.requireDeleting("runner-idle-noid")
	if n := len(s.github()) - before; n < 1 || n > 2 {
		t.Errorf("GitHub requests for a runner without ID = %d, want 1..2", n)
	}
	if s.registered("runner-idle-noid") {
		t.Error("runner still registered on GitHub")
	}
}

// Scenario 3: a runner pod whose runner is not registered is deleted.
func TestKubectlDeleteUnregisteredRunner(t *testing.T) {
	s := newScenario(t, "unregistered")
	s.create(legacyRunnerPod(s.ns, "runner-ghost", s.scope))

	if _, stderr, err := s.kubectl("delete", "pod", "runner-ghost", "--wait=false"); err != nil {
		t.Fatalf("kubectl delete failed: %v: %s", err, stderr)
	}
	s.requireDeleting("runner-ghost")
	if n := s.count("DELETE"); n != 0 {
		t.Errorf("GitHub saw %d DELETEs for an unknown runner, want 0", n)
	}
	if n := s.count("GET"); n < 1 {
		t.Errorf("GitHub saw no look-up")
	}
}
