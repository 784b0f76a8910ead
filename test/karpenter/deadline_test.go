package karpenter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/rerun"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
	"github.com/runner-guard/runner-guard/webhook"
)

// recordNamespace holds the lost-job records: runner-guard's own namespace
// (the leader election's, without POD_NAMESPACE).
const recordNamespace = "runner-guard-system"

// nodeClaims is Karpenter's NodeClaim resource.
var nodeClaims = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}

// deadlineJob is a busy scale-set runner on a node of a NodePool whose
// NodeClaims have a terminationGracePeriod of 60s, holding job "build" of a
// workflow run of the scenario's organization on the fake GitHub (its
// EphemeralRunner's job fields name it), with the hints and job budget on.
type deadlineJob struct {
	runner    ScaleSetRunner
	node      string
	nodeClaim string
	run, job  int64
	fake      *ghfake.Fake
}

func (s *scenario) deadlineJob(id int64) deadlineJob {
	s.t.Helper()
	f, ok := cluster.GitHub.(*ghfake.Fake)
	if !ok {
		s.t.Skip("needs the in-process fake GitHub (not E2E_GITHUB_CONTROL=http)")
	}
	_, nodes := s.launch(1)
	node := nodes[0]
	repo := s.scope.Name + "/app"
	run := f.AddRun(repo, "ci")
	name := "busy"
	job, err := f.AddJob(run, "build", name)
	if err != nil {
		s.t.Fatal(err)
	}
	r := s.runnerWith(name, node, true, func(w *fixture.EphemeralRunnerWrapper) {
		w.JobID(fmt.Sprint(id)).Field(id, "status", "jobRequestId").
			Field(repo, "status", "jobRepositoryName").
			Field(int64(run), "status", "workflowRunId").Field("build", "status", "jobDisplayName")
	})
	uid, err := cluster.PodUID(s.ctx, s.name, r.Name)
	if err != nil {
		s.t.Fatal(err)
	}
	// The job budget says the controllers' caches saw the job fields.
	if err := cluster.WaitJobBudget(s.ctx, s.name, string(uid), time.Minute); err != nil {
		s.t.Fatal(err)
	}
	n, err := cluster.Client.CoreV1().Nodes().Get(s.ctx, node, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	claim := webhook.NodeClaimOwner(n)
	if claim == "" {
		s.t.Fatalf("node %s has no NodeClaim owner: %v", node, n.OwnerReferences)
	}
	return deadlineJob{runner: r, node: node, nodeClaim: claim, run: run, job: job, fake: f}
}

// deleteNodeClaim deletes the job's NodeClaim, as an operator (or
// Karpenter's expiry) would, and returns when.
func (s *scenario) deleteNodeClaim(j deadlineJob) time.Time {
	s.t.Helper()
	at := time.Now()
	if err := cluster.Dynamic.Resource(nodeClaims).Delete(s.ctx, j.nodeClaim, metav1.DeleteOptions{}); err != nil {
		s.t.Fatalf("delete NodeClaim %s: %v", j.nodeClaim, err)
	}
	return at
}

// lostJobRecord waits for the lost-job record of run and returns its data.
func (s *scenario) lostJobRecord(run int64, state rerun.State) map[string]string {
	s.t.Helper()
	var rec map[string]string
	if err := process.Poll(s.ctx, fmt.Sprintf("lost-job record of run %d in state %s", run, state), 90*time.Second, func(ctx context.Context) error {
		list, err := cluster.Client.CoreV1().ConfigMaps(recordNamespace).List(ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("%s=%d", rerun.LabelRun, run)})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Data["state"] != string(state) {
			return fmt.Errorf("%w: %d records", errNotYet, len(list.Items))
		}
		rec = list.Items[0].Data
		return nil
	}); err != nil {
		s.t.Fatal(err)
	}
	return rec
}

// A NodeClaim with a terminationGracePeriod of 60s is deleted while a busy
// runner's job holds its node. Karpenter's evictions are refused (the job
// budget, runner-guard) until the deadline less the pod's grace period
// (none: the harness's pods have 0s), then Karpenter deletes the pod, and
// runner-guard lets that DELETE
// go (--honor-node-deadlines, the default): the node is gone within the
// grace period plus 30s, the pod carries a NodeDeadlinePassed Event naming
// the NodeClaim, the loss is recorded node-deadline, and once the run
// fails the job is re-run once. Before this change the node stayed until
// the job ended.
func TestNodeDeadlineEndsBusyRunnersNode(t *testing.T) {
	s := newScenario(t, "deadline", NodePoolSpec{TerminationGracePeriod: "60s"})
	s.webhookFlags("--rerun-lost-jobs")
	j := s.deadlineJob(1906)
	deleted := s.deleteNodeClaim(j)

	if err := cluster.WaitNodeGone(s.ctx, j.node, 90*time.Second); err != nil {
		t.Fatalf("node %s of NodeClaim %s (terminationGracePeriod 60s) not gone 90s after its deletion: %v", j.node, j.nodeClaim, err)
	}
	t.Logf("node %s gone %.1f s after NodeClaim %s was deleted", j.node, time.Since(deleted).Seconds(), j.nodeClaim)
	ev := s.waitPodEvent(j.runner.Name, webhook.EventNodeDeadline)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Note, "NodeClaim "+j.nodeClaim) {
		t.Errorf("%s Event %s %q; want a Warning naming NodeClaim %s", webhook.EventNodeDeadline, ev.Type, ev.Note, j.nodeClaim)
	}
	rec := s.lostJobRecord(j.run, rerun.StateWaiting)
	if rec["cause"] != string(rerun.CauseNodeDeadline) || rec["runner"] != j.runner.Name {
		t.Errorf("lost-job record %v; want cause %s, runner %s", rec, rerun.CauseNodeDeadline, j.runner.Name)
	}

	if err := j.fake.FinishJob(j.job, ghfake.ConclusionFailure); err != nil {
		t.Fatal(err)
	}
	if err := j.fake.CompleteRun(j.run, ghfake.ConclusionFailure); err != nil {
		t.Fatal(err)
	}
	s.lostJobRecord(j.run, rerun.StateRerun)
	n := 0
	for _, r := range j.fake.Requests() {
		if r.Op == ghfake.OpRerunJob && strings.Contains(r.Path, fmt.Sprintf("/jobs/%d/", j.job)) ||
			r.Op == ghfake.OpRerunFailedJobs && strings.Contains(r.Path, fmt.Sprintf("/runs/%d/", j.run)) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d re-run requests for job %d of run %d, want 1", n, j.job, j.run)
	}
}

// With --honor-node-deadlines=false the same NodeClaim's deadline passes
// and the busy runner still holds the node, as before: its pod runs and
// its runner stays registered until the job ends.
func TestNodeDeadlineHeldWhenNotHonored(t *testing.T) {
	s := newScenario(t, "deadline-held", NodePoolSpec{TerminationGracePeriod: "60s"})
	s.webhookFlags("--honor-node-deadlines=false")
	j := s.deadlineJob(1907)
	s.deleteNodeClaim(j)

	// Past the deadline plus 30s, as long as the scenario above allows.
	time.Sleep(90 * time.Second)
	on, err := cluster.PodOn(s.ctx, s.name, j.runner.Name, j.node)
	if err != nil {
		t.Fatal(err)
	}
	if !on {
		t.Errorf("busy runner %s's pod left node %s past the NodeClaim's deadline with --honor-node-deadlines=false", j.runner.Name, j.node)
	}
	if !cluster.Registered(j.runner) {
		t.Errorf("busy runner %s was unregistered while its job runs", j.runner.Name)
	}
	if evs := s.podEvents(j.runner.Name, webhook.EventNodeDeadline); len(evs) > 0 {
		t.Errorf("pod %s has a %s Event with the flag off: %v", j.runner.Name, webhook.EventNodeDeadline, notes(evs))
	}
	if err := cluster.EndJob(s.ctx, j.runner); err != nil {
		t.Fatal(err)
	}
	if err := cluster.WaitNodeGone(s.ctx, j.node, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}
