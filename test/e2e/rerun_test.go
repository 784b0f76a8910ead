package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/rerun"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
)

// recordNamespace holds the lost-job records: runner-guard's own namespace
// (the leader election's, without POD_NAMESPACE).
const recordNamespace = "runner-guard-system"

// lostJob is a busy scale-set runner holding job "build" of a workflow run
// of ORG/app on the fake GitHub, its EphemeralRunner naming the job.
type lostJob struct {
	runner   scaleSetRunner
	run, job int64
	repo     string
	fake     *ghfake.Fake
}

func (s *scaleSet) lostJob(name string) lostJob { return s.lostJobIn(name, 0, "build") }

// lostJobIn is lostJob for job jobName of run (0: a new run).
func (s *scaleSet) lostJobIn(name string, run int64, jobName string) lostJob {
	s.t.Helper()
	f := fakeGitHub(s.t)
	org := s.scope.Name
	scope := mustScope(ghclient.OrgScope(org))
	r := s.runner(name, "https://github.com/"+org, scope, true, nil)
	repo := org + "/app"
	if run == 0 {
		run = f.AddRun(repo, "ci")
	}
	job, err := f.AddJob(run, jobName, name)
	if err != nil {
		s.t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"jobRequestId": 7, "jobId": "7", "jobRepositoryName": repo, "workflowRunId": run, "jobDisplayName": jobName,
	}})
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.dyn.Resource(framework.EphemeralRunnerResource()).Namespace(s.ns).Patch(s.ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		s.t.Fatalf("set the job fields of EphemeralRunner %s: %v", name, err)
	}
	// The hint on the pod says the controllers' caches saw the job fields.
	s.eventually("the job hint on pod "+name, 20*time.Second, func() error {
		if s.annotations(name)["karpenter.sh/do-not-disrupt"] != "true" {
			return fmt.Errorf("annotations %v", s.annotations(name))
		}
		return nil
	})
	return lostJob{runner: r, run: run, job: job, repo: repo, fake: f}
}

// forceDelete deletes the pod at once, as an operator would (the force
// annotation gets it past runner-guard).
func (s *scaleSet) forceDelete(name string) {
	s.t.Helper()
	if _, stderr, err := s.kubectl("annotate", "pod", name, "runner-guard.io/force-delete=true"); err != nil {
		s.t.Fatalf("annotate %s: %v: %s", name, err, stderr)
	}
	zero := int64(0)
	if err := env.Client.CoreV1().Pods(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		s.t.Fatalf("force-delete pod %s: %v", name, err)
	}
}

// record waits for the lost-job record of the run and returns its data.
func (s *scaleSet) record(run int64, state rerun.State) map[string]string {
	s.t.Helper()
	return s.records(run, 1, state)[0]
}

// records waits for n lost-job records of the run, all in state (any when
// empty), and returns their data.
func (s *scaleSet) records(run int64, n int, state rerun.State) []map[string]string {
	s.t.Helper()
	var out []map[string]string
	s.eventually(fmt.Sprintf("%d lost-job records of run %d in state %q", n, run, state), 90*time.Second, func() error {
		list, err := env.Client.CoreV1().ConfigMaps(recordNamespace).List(s.ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("%s=%d", rerun.LabelRun, run)})
		if err != nil {
			return err
		}
		if len(list.Items) != n {
			return fmt.Errorf("%d records", len(list.Items))
		}
		out = out[:0]
		for _, cm := range list.Items {
			if state != "" && cm.Data["state"] != string(state) {
				return fmt.Errorf("record %v", cm.Data)
			}
			out = append(out, cm.Data)
		}
		return nil
	})
	return out
}

// rerunLostJobs is the flag that turns re-runs of lost jobs on.
const rerunLostJobs = "--rerun-lost-jobs"

// newLostJob is a scale set, with runner-guard re-running lost jobs until t
// ends, and one job of its, <name>-1, running on its runner.
func newLostJob(t *testing.T, name string) (*scaleSet, lostJob) {
	t.Helper()
	s := newScaleSet(t, name)
	restartWebhook(t, rerunLostJobs)
	return s, s.lostJob(name + "-1")
}

// loseAndFail force-deletes the job's pod, waits for its record, then fails
// the job and completes its run.
func (s *scaleSet) loseAndFail(j lostJob) {
	s.t.Helper()
	s.forceDelete(j.runner.name)
	s.record(j.run, rerun.StateWaiting)
	if err := j.fake.FinishJob(j.job, ghfake.ConclusionFailure); err != nil {
		s.t.Fatal(err)
	}
	if err := j.fake.CompleteRun(j.run, ghfake.ConclusionFailure); err != nil {
		s.t.Fatal(err)
	}
}

// reruns counts the re-run requests for j's job or run: the fake's log is
// the whole suite's.
func (j lostJob) reruns() int {
	return j.rerunsAnswered(0)
}

// rerunsAnswered counts them answered status (0: any).
func (j lostJob) rerunsAnswered(status int) int {
	n := 0
	for _, r := range j.fake.Requests() {
		mine := r.Op == ghfake.OpRerunJob && strings.Contains(r.Path, fmt.Sprintf("/jobs/%d/", j.job)) ||
			r.Op == ghfake.OpRerunFailedJobs && strings.Contains(r.Path, fmt.Sprintf("/runs/%d/", j.run))
		if mine && (status == 0 || r.Status == status) {
			n++
		}
	}
	return n
}

// A busy runner's pod force-deleted, runner-guard restarted while the run
// goes on, then the run completes failed: the job is re-run once and an
// Event on the pod says why.
func TestLostJobRerunOnce(t *testing.T) {
	s, j := newLostJob(t, "lost-rerun")
	s.forceDelete(j.runner.name)
	rec := s.record(j.run, rerun.StateWaiting)
	if rec["runner"] != j.runner.name || rec["repository"] != j.repo || rec["cause"] != string(rerun.CauseForceDeleted) {
		t.Errorf("record %v", rec)
	}

	if err := env.RestartWebhook(s.ctx, rerunLostJobs); err != nil {
		t.Fatal(err)
	}
	if err := j.fake.FinishJob(j.job, ghfake.ConclusionFailure); err != nil {
		t.Fatal(err)
	}
	if err := j.fake.CompleteRun(j.run, ghfake.ConclusionFailure); err != nil {
		t.Fatal(err)
	}
	ev := s.waitForEventWithin(j.runner.name, rerun.ReasonJobRerun, 90*time.Second)
	if !strings.Contains(ev, `job "build"`) || !strings.Contains(ev, j.repo) {
		t.Errorf("event %q does not name the job and its repository", ev)
	}
	s.record(j.run, rerun.StateRerun)
	if n := j.reruns(); n != 1 {
		t.Errorf("%d re-run requests, want 1", n)
	}
	if r, _ := j.fake.Run(j.run); r.RunAttempt != 2 {
		t.Errorf("run attempt %d, want 2", r.RunAttempt)
	}
}

// A legacy runner's pod, whose job GitHub's in_progress delivery named,
// force-deleted while the job runs; the run then completes failed: the job
// is re-run once, as a scale-set runner's is.
func TestLostLegacyJobRerunOnce(t *testing.T) {
	s := newScaleSet(t, "lost-legacy")
	eventsOn(s.scenario, ghfake.Events{}, rerunLostJobs)
	f := fakeGitHub(t)
	const name = "lost-legacy-1"
	s.runnerPod(name, false, true)
	repo := s.scope.Name + "/app"
	run := f.AddRun(repo, "ci")
	job, err := f.AddJob(run, "build", name)
	if err != nil {
		t.Fatal(err)
	}
	env.GitHub.SetBusy(s.scope, name, true) // the fake delivers in_progress for the run's job
	if got, ok := s.jobOf(name); !ok || got.JobID != job || got.RunID != run || got.Repository != repo {
		t.Fatalf("after in_progress the pod carries job %+v (verified %v), want job %d of run %d", got, ok, job, run)
	}
	j := lostJob{runner: scaleSetRunner{name: name, scope: s.scope}, run: run, job: job, repo: repo, fake: f}
	s.loseAndFail(j)
	ev := s.waitForEventWithin(name, rerun.ReasonJobRerun, 90*time.Second)
	if !strings.Contains(ev, `job "build"`) || !strings.Contains(ev, repo) {
		t.Errorf("event %q does not name the job and its repository", ev)
	}
	s.record(run, rerun.StateRerun)
	if n := j.reruns(); n != 1 {
		t.Errorf("%d re-run requests, want 1", n)
	}
}

// A job the user cancelled is never re-run, and no Event says it was lost.
func TestLostJobCancelledByUser(t *testing.T) {
	s, j := newLostJob(t, "lost-cancel")
	s.forceDelete(j.runner.name)
	s.record(j.run, rerun.StateWaiting)
	if err := j.fake.CompleteRun(j.run, ghfake.ConclusionCancelled); err != nil {
		t.Fatal(err)
	}
	s.record(j.run, rerun.StateFinished)
	if n := j.reruns(); n != 0 {
		t.Errorf("%d re-run requests for a cancelled job", n)
	}
	for _, e := range s.events(j.runner.name) {
		if strings.Contains(e, rerun.ReasonJobLost) || strings.Contains(e, rerun.ReasonJobRerun) {
			t.Errorf("event %q about a cancelled job", e)
		}
	}
}

// Re-runs off (the default): the Event says the job was lost and what to
// do; nothing is re-run.
func TestLostJobRerunOff(t *testing.T) {
	s := newScaleSet(t, "lost-off")
	j := s.lostJob("lost-off-1")
	s.loseAndFail(j)
	ev := s.waitForEventWithin(j.runner.name, rerun.ReasonJobLost, 90*time.Second)
	if !strings.Contains(ev, "--rerun-lost-jobs") || !strings.Contains(ev, "Warning") {
		t.Errorf("event %q: want a warning naming --rerun-lost-jobs", ev)
	}
	if n := j.reruns(); n != 0 {
		t.Errorf("%d re-run requests with re-runs off", n)
	}
}

// A token whose rights cannot be read: the first refusal says what to grant.
func TestLostJobRerunRefused(t *testing.T) {
	s, j := newLostJob(t, "lost-refused")
	j.fake.SetTokenRights(ghfake.TokenRights{NoActionsWrite: true})
	t.Cleanup(func() { j.fake.SetTokenRights(ghfake.TokenRights{}) })
	s.loseAndFail(j)
	ev := s.waitForEventWithin(j.runner.name, rerun.ReasonJobLost, 90*time.Second)
	if !strings.Contains(ev, "actions: write") || !strings.Contains(ev, "403") {
		t.Errorf("event %q: want it to say GitHub refused and what to grant", ev)
	}
	if n := j.rerunsAnswered(403); n != 1 {
		t.Errorf("%d refused re-runs, want 1", n)
	}
}

// Three jobs of one run lost together, the attempt's only failures: one
// rerun-failed-jobs re-runs them all (a re-run starts a new attempt, after
// which no other job of the old one could be re-run).
func TestLostJobsOfOneRun(t *testing.T) {
	s := newScaleSet(t, "lost-many")
	restartWebhook(t, rerunLostJobs)
	jobs := []lostJob{s.lostJob("lost-many-0")}
	for i := 1; i < 3; i++ {
		jobs = append(jobs, s.lostJobIn(fmt.Sprintf("lost-many-%d", i), jobs[0].run, fmt.Sprintf("matrix-%d", i)))
	}
	for _, j := range jobs {
		s.forceDelete(j.runner.name)
	}
	s.records(jobs[0].run, len(jobs), "")
	for _, j := range jobs {
		if err := j.fake.FinishJob(j.job, ghfake.ConclusionFailure); err != nil {
			t.Fatal(err)
		}
	}
	if err := jobs[0].fake.CompleteRun(jobs[0].run, ghfake.ConclusionFailure); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if ev := s.waitForEventWithin(j.runner.name, rerun.ReasonJobRerun, 90*time.Second); !strings.Contains(ev, "failed jobs") {
			t.Errorf("event %q does not say the run's failed jobs were re-run", ev)
		}
	}
	s.records(jobs[0].run, len(jobs), rerun.StateRerun)
	if n := jobs[0].reruns(); n != 1 {
		t.Errorf("%d re-run requests for the run, want one rerun-failed-jobs", n)
	}
	queued := 0
	for _, j := range jobs[0].fake.Jobs(jobs[0].run, 2) {
		if j.Status == ghfake.StatusQueued {
			queued++
		}
	}
	if queued != len(jobs) {
		t.Errorf("%d jobs queued again in attempt 2, want %d", queued, len(jobs))
	}
}
