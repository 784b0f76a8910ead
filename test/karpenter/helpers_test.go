package karpenter

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

// scenario is one test's namespace, NodePool (both named after it), GitHub
// organization and NodeLog. Its cleanup deletes the NodePool, so Karpenter
// removes its nodes, and the namespace.
type scenario struct {
	t       *testing.T
	ctx     context.Context
	name    string // namespace and NodePool
	scope   ghclient.Scope
	nodes   *NodeLog
	runners []ScaleSetRunner
}

// newScenario skips without a cluster, then creates the namespace and a
// NodePool from spec (its Name is set to the scenario's).
func newScenario(t *testing.T, name string, spec NodePoolSpec) *scenario {
	t.Helper()
	if cluster == nil {
		t.Skip("no Karpenter cluster on this machine (see TestMain's message)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	scope, err := ghclient.OrgScope("org-" + name)
	if err != nil {
		t.Fatal(err)
	}
	s := &scenario{t: t, ctx: ctx, name: "karpenter-" + name, scope: scope}
	cluster.GitHub.AddScope(scope)
	if err := cluster.CreateNamespace(ctx, s.name); err != nil {
		t.Fatal(err)
	}
	if s.nodes, err = cluster.WatchNodes(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.nodes.Stop)
	spec.Name = s.name
	if err := cluster.CreateNodePool(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cleanup)
	return s
}

// cleanup runs whatever the test's outcome: every runner idle and every pod
// deleted (a do-not-disrupt pod would hold its node's drain), then the
// NodePool and its nodes go, then the namespace.
func (s *scenario) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, r := range s.runners {
		cluster.GitHub.SetBusy(r.Scope, r.Name, false)
	}
	if err := cluster.DeleteAllPods(ctx, s.name); err != nil {
		s.t.Errorf("cleanup: %v", err)
	}
	if err := cluster.ReleaseEphemeralRunners(ctx, s.name); err != nil {
		s.t.Errorf("cleanup: %v", err)
	}
	if err := cluster.DeleteNodePool(ctx, s.name); err != nil {
		s.t.Errorf("cleanup: %v", err)
	}
	if err := cluster.Client.CoreV1().Namespaces().Delete(ctx, s.name, metav1.DeleteOptions{}); err != nil {
		s.t.Logf("cleanup: delete namespace %s: %v", s.name, err)
	}
}

// webhookFlags restarts the webhook with flags for this scenario, and with
// the default flags again when it ends.
func (s *scenario) webhookFlags(flags ...string) {
	s.t.Helper()
	if err := cluster.RestartWebhook(s.ctx, flags...); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cluster.RestartWebhook(ctx); err != nil {
			s.t.Errorf("cleanup: restart the webhook with its default flags: %v", err)
		}
	})
}

// launch makes Karpenter launch n nodes and returns the filler pods that
// hold them and the nodes.
func (s *scenario) launch(n int) (fillers, nodes []string) {
	s.t.Helper()
	fillers, nodes, err := cluster.LaunchNodes(s.ctx, s.name, s.name, n)
	if err != nil {
		s.t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if seen[n] {
			s.t.Fatalf("fillers share node %s (nodes %v): the instance type holds more than one", n, nodes)
		}
		seen[n] = true
	}
	s.t.Logf("Karpenter launched %v", nodes)
	return fillers, nodes
}

// pod creates a plain pod bound to node, with annotations, and waits until it runs.
func (s *scenario) pod(name, node string, annotations map[string]string) {
	s.t.Helper()
	if err := cluster.CreatePod(s.ctx, s.name, name, s.name, node, annotations); err != nil {
		s.t.Fatal(err)
	}
	if _, err := cluster.WaitRunning(s.ctx, s.name, name); err != nil {
		s.t.Fatal(err)
	}
}

// runner creates a scale-set runner bound to node, without job fields, and
// waits until its pod runs.
func (s *scenario) runner(name, node string, busy bool) ScaleSetRunner {
	s.t.Helper()
	return s.runnerWith(name, node, busy, nil)
}

// jobRunner creates a scale-set runner busy on GitHub whose EphemeralRunner
// carries the job fields of job id, bound to node, and waits until its pod runs.
func (s *scenario) jobRunner(name, node string, id int64) ScaleSetRunner {
	s.t.Helper()
	return s.runnerWith(name, node, true, WithJob(id))
}

func (s *scenario) runnerWith(name, node string, busy bool, edit func(*fixture.EphemeralRunnerWrapper)) ScaleSetRunner {
	s.t.Helper()
	r, err := cluster.CreateScaleSetRunner(s.ctx, s.name, name, s.scope, busy, s.name, node, edit)
	return s.started(r, err)
}

// legacyRunner creates an ARC legacy runner, idle on GitHub, bound to node,
// and waits until its pod runs.
func (s *scenario) legacyRunner(name, node string) LegacyRunner {
	s.t.Helper()
	r, err := cluster.CreateLegacyRunner(s.ctx, s.name, name, s.scope, false, s.name, node)
	return s.started(r, err)
}

// started records a runner just created (err: its creation's) for the
// clean-up and waits until its pod runs.
func (s *scenario) started(r ScaleSetRunner, err error) ScaleSetRunner {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
	s.runners = append(s.runners, r)
	if _, err := cluster.WaitRunning(s.ctx, s.name, r.Name); err != nil {
		s.t.Fatal(err)
	}
	return r
}

// scaleDown deletes pods and waits until they are gone.
func (s *scenario) scaleDown(pods ...string) {
	s.t.Helper()
	if err := cluster.DeletePods(s.ctx, s.name, pods...); err != nil {
		s.t.Fatal(err)
	}
}

// requireKept fails unless node was never tainted DisruptedTaint and still
// runs pod.
func (s *scenario) requireKept(node, pod string) {
	s.t.Helper()
	if r := s.nodes.Record(node); !r.Tainted.IsZero() || !r.Deleting.IsZero() {
		s.t.Errorf("node %s (pod %s) was chosen: tainted at %v, deleted at %v", node, pod, r.Tainted, r.Deleting)
	}
	on, err := cluster.PodOn(s.ctx, s.name, pod, node)
	if err != nil {
		s.t.Fatal(err)
	}
	if !on {
		s.t.Errorf("pod %s no longer runs on node %s", pod, node)
	}
}

// requireConsolidated waits until Karpenter has removed node and pod, and
// fails unless the node was tainted DisruptedTaint before it went.
func (s *scenario) requireConsolidated(node, pod string) NodeRecord {
	s.t.Helper()
	if err := cluster.WaitNodeGone(s.ctx, node, 3*time.Minute); err != nil {
		s.t.Fatal(err)
	}
	if err := cluster.WaitPodGone(s.ctx, s.name, pod, time.Minute); err != nil {
		s.t.Fatal(err)
	}
	// The watch may see the removal a moment after the API server says so.
	var r NodeRecord
	if err := process.Poll(s.ctx, "node log sees "+node+" gone", 30*time.Second, func(context.Context) error {
		if r = s.nodes.Record(node); r.Gone.IsZero() {
			return errNotYet
		}
		return nil
	}); err != nil {
		s.t.Fatal(err)
	}
	if r.Tainted.IsZero() {
		s.t.Errorf("node %s went without the %s taint", node, DisruptedTaint)
	}
	return r
}

// requireIdleNodeTaken is the outcome of a busy runner's node laid out
// beside an idle one and an anchored one: Karpenter consolidated idleNode
// and released its runners through runner-guard, and kept busyNode and
// anchorNode, the busy runner still registered on GitHub.
func (s *scenario) requireIdleNodeTaken(idleNode, busyNode, anchorNode string, busy ScaleSetRunner, idle []ScaleSetRunner) {
	s.t.Helper()
	r := s.requireConsolidated(idleNode, idle[0].Name)
	for _, ir := range idle {
		s.requireReleased(ir)
	}
	s.requireKept(busyNode, busy.Name)
	s.requireKept(anchorNode, "anchor")
	if !cluster.Registered(busy) {
		s.t.Errorf("busy runner %s was unregistered on GitHub while its job runs", busy.Name)
	}
	s.t.Logf("node %s consolidated (tainted until gone %.1f s); node %s of busy runner %s held chosen but blocked for %.1f node-seconds",
		idleNode, r.Gone.Sub(r.Tainted).Seconds(), busyNode, busy.Name, heldSeconds(s.nodes.Record(busyNode)))
}

// requireReleased waits until the runner's pod is gone and fails unless
// runner-guard unregistered the runner on GitHub (a DELETE answered 204)
// before the pod was seen gone.
func (s *scenario) requireReleased(r ScaleSetRunner) {
	s.t.Helper()
	if err := cluster.WaitPodGone(s.ctx, s.name, r.Name, 2*time.Minute); err != nil {
		s.t.Fatal(err)
	}
	gone := time.Now()
	del, ok := cluster.Unregistered(r)
	switch {
	case !ok || cluster.Registered(r):
		s.t.Errorf("runner %s: pod gone, but not unregistered on GitHub (registered: %v)", r.Name, cluster.Registered(r))
	case del.Time.After(gone):
		s.t.Errorf("runner %s unregistered at %v, after its pod was seen gone at %v", r.Name, del.Time, gone)
	}
}
