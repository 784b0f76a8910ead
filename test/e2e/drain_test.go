package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/test/process"
)

// Scenario 5: kubectl drain of a node with a busy runner: the eviction is
// refused with 429 and drain keeps retrying; once the runner is idle the drain
// finishes and the runner is unregistered.
func TestDrainWaitsForBusyRunner(t *testing.T) {
	s := newScenario(t, "drain")
	const node = "e2e-node-drain"
	if err := env.EnsureNode(s.ctx, node); err != nil {
		t.Fatal(err)
	}
	id := env.GitHub.AddRunner(s.scope, "runner-drain")
	env.GitHub.SetBusy(s.scope, "runner-drain", true)
	pod := legacyRunnerPod(s.ns, "runner-drain", s.scope)
	pod.Spec.NodeName = node
	pod.Annotations = map[string]string{"actions-runner/id": fmt.Sprint(id)}
	s.create(pod)

	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
	defer cancel()
	var out process.LockedBuffer
	drain := exec.CommandContext(ctx, env.KubectlPath(), "--kubeconfig="+env.ControlPlane.Kubeconfig,
		"drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=150s")
	drainProc, err := process.StartChild("kubectl drain", drain, &out)
	if err != nil {
		t.Fatal(err)
	}

	// kubectl drain retries a 429 quietly; GitHub's log shows the retries:
	// the first decision sends the DELETE (after a listing that vouches for
	// the pod's runner ID), and a later one asks again, with a DELETE or a
	// fresh listing of the scope that shows the runner busy.
	s.eventually("drain retries the refused eviction", 60*time.Second, func() error {
		if n := s.count("DELETE") + s.count("GET"); s.count("DELETE") < 1 || n < 3 {
			return fmt.Errorf("%d GitHub requests for the eviction attempts; drain output: %q", n, out.String())
		}
		return nil
	})
	if ev := s.waitForEvent("runner-drain", "RunnerBusy"); !strings.Contains(ev, "Evict") || !strings.Contains(ev, "runner busy") {
		t.Errorf("event %q, want a RunnerBusy Evict event", ev)
	}
	if drainProc.Exited() {
		t.Fatalf("drain ended while the runner was busy: %v\n%s", drainProc.Err(), out.String())
	}
	s.requireAlive("runner-drain")
	if !s.registered("runner-drain") {
		t.Fatal("busy runner unregistered during drain")
	}

	env.GitHub.SetBusy(s.scope, "runner-drain", false)
	s.waitDeletionAdmitted("eviction admitted once idle", 60*time.Second, "runner-drain")
	// Play the kubelet so drain sees the pod gone.
	s.requireDeleting("runner-drain")
	if err := drainProc.Wait(90 * time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "drained") {
		t.Errorf("drain output lacks 'drained': %s", out.String())
	}
	if s.registered("runner-drain") {
		t.Error("runner still registered after drain")
	}
	if _, _, err := env.Kubectl(s.ctx, "uncordon", node); err != nil {
		t.Logf("uncordon: %v", err)
	}
}
