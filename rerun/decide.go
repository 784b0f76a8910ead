package rerun

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// AnnotationJob names a legacy runner pod's job: the events endpoint writes
// it from a signed workflow_job delivery (package jobannotation).
const AnnotationJob = jobannotation.Annotation

// jobOf names the job a runner pod held: its EphemeralRunner's job fields
// (jobRepositoryName "owner/repo", workflowRunId, runnerName), else the
// pod's AnnotationJob, verified with the events secret. A runner whose job
// is not named cannot be re-run. The caller checks that er is the pod's
// controller (controlledBy). attempt is the annotation's (0: found when
// GitHub is first asked).
func jobOf(pod *corev1.Pod, er *unstructured.Unstructured, jobKeys *jobannotation.Keyring) (job Job, attempt int, ok bool) {
	if job, ok := erJob(er); ok {
		return job, 0, true
	}
	return legacyJob(pod, jobKeys)
}

// erJob is the job an EphemeralRunner's status names.
func erJob(er *unstructured.Unstructured) (Job, bool) {
	if er == nil {
		return Job{}, false
	}
	repo, _, _ := unstructured.NestedString(er.Object, "status", "jobRepositoryName")
	runID, _, _ := unstructured.NestedInt64(er.Object, "status", "workflowRunId")
	runner, _, _ := unstructured.NestedString(er.Object, "status", "runnerName")
	if runner == "" {
		runner = er.GetName()
	}
	if strings.Count(repo, "/") == 1 && runID > 0 {
		return Job{Repository: repo, RunID: runID, Runner: runner}, true
	}
	return Job{}, false
}

// legacyJob is the job a workflow_job delivery put on a legacy (summerwind)
// runner pod: its REST job ID and attempt, so a persistent runner's lost job
// is the one it held, never an earlier one of the same runner. Its runner is
// named after the pod, as ARC names it. An annotation that does not verify
// (forged, copied from another pod, or written under another secret) names
// nothing: a tenant who can edit pods cannot make runner-guard re-run a job
// of their choosing.
func legacyJob(pod *corev1.Pod, jobKeys *jobannotation.Keyring) (Job, int, bool) {
	if pod == nil {
		return Job{}, 0, false
	}
	j, ok := jobKeys.JobFromPod(pod)
	if !ok || strings.Count(j.Repository, "/") != 1 || j.RunID <= 0 || j.JobID <= 0 {
		return Job{}, 0, false
	}
	return Job{Repository: j.Repository, RunID: j.RunID, Runner: pod.Name, ID: j.JobID}, int(j.Attempt), true
}

// sameRun reports whether two names of a job agree on its repository and run.
func sameRun(a, b Job) bool {
	return strings.EqualFold(a.Repository, b.Repository) && a.RunID == b.RunID
}

// controlledBy reports whether er is the pod's controller: the pod's
// controller reference names an EphemeralRunner of er's name and UID. A
// pod that only shares a name with an EphemeralRunner, or whose reference
// is stale or copied, does not take its job.
func controlledBy(pod *corev1.Pod, er *unstructured.Unstructured) bool {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || er == nil {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == arc.Group && ref.Kind == arc.Kind &&
		ref.Name == er.GetName() && ref.UID != "" && ref.UID == er.GetUID()
}

// claimsEphemeralRunner reports whether the pod's controller reference
// names an EphemeralRunner.
func claimsEphemeralRunner(pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == arc.Group && ref.Kind == arc.Kind
}

// repoCovered reports whether a runner registered at scope can have run a
// job of repository ("owner/repo"): a repository runner its repository's, an
// organization runner its repositories'. An enterprise runner's
// organizations are not known without asking GitHub: the namespace's scope
// binding decides alone then.
func repoCovered(scope ghclient.Scope, repository string) bool {
	owner, _, _ := strings.Cut(repository, "/")
	switch scope.Kind {
	case ghclient.ScopeRepo:
		return strings.EqualFold(scope.Name, repository)
	case ghclient.ScopeOrg:
		return strings.EqualFold(scope.Name, owner)
	case ghclient.ScopeEnterprise:
		return true
	}
	return false
}

// finishedNormally reports whether the pod ended its job itself: it
// succeeded, or its runner container exited 0 (an ephemeral runner exits
// after its one job, whatever the job's result, a cancelled one too).
func finishedNormally(pod *corev1.Pod, container string) bool {
	if pod.Status.Phase == corev1.PodSucceeded {
		return true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0 {
			return true
		}
	}
	return false
}

// runnerDone reports whether ARC saw the runner end (EphemeralRunner phase
// Succeeded): its job finished.
func runnerDone(er *unstructured.Unstructured) bool {
	if er == nil {
		return false
	}
	phase, _, _ := unstructured.NestedString(er.Object, "status", "phase")
	return phase == "Succeeded"
}

// lossCause says why the pod went: its node's state first (node is nil when
// the node is gone), then how it was deleted. pastDeadline says the pod was
// deleted past its node's NodeClaim deadline (deletedPastDeadline).
func lossCause(pod *corev1.Pod, node *corev1.Node, nodeKnown, pastDeadline bool) Cause {
	switch {
	case pod.Spec.NodeName != "" && nodeKnown && node == nil:
		return CauseNodeGone
	case node != nil && !nodeReady(node):
		return CauseNodeNotReady
	case pastDeadline:
		return CauseNodeDeadline
	case node != nil && nodeDraining(node):
		return CauseNodeDraining
	case disruptedFor(pod, "DeletionByPodGC"):
		// The pod GC deletes the pods of a node that is gone (or out of
		// service): the node went first.
		return CauseNodeGone
	case disruptedFor(pod, "DeletionByTaintManager"):
		// A NoExecute taint (a node not ready past its toleration) took it.
		return CauseNodeNotReady
	case evicted(pod):
		return CauseEvicted
	case pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0:
		return CauseForceDeleted
	case pod.Status.Phase == corev1.PodFailed:
		return CausePodFailed
	}
	return CauseDeleted
}

// deletedPastDeadline reports whether the pod's deletion was asked for once
// its node's deadline, less the pod's terminationGracePeriodSeconds, had
// passed: when Karpenter deletes it whatever budgets say, and when
// --honor-node-deadlines lets that DELETE go (webhook rule 4i). The request's
// time is the deletionTimestamp less deletionGracePeriodSeconds, which the
// API server keeps when a later delete shortens the grace period.
func deletedPastDeadline(pod *corev1.Pod, dl webhook.NodeDeadline) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	asked := pod.DeletionTimestamp.Time
	if g := pod.DeletionGracePeriodSeconds; g != nil {
		asked = asked.Add(-time.Duration(*g) * time.Second)
	}
	// deletionTimestamp has whole seconds: the request may be up to a second later.
	return webhook.NodeDeadlinePassed(dl, pod, asked.Add(time.Second))
}

func nodeReady(n *corev1.Node) bool {
	return webhook.ConditionTrue(n.Status.Conditions, corev1.NodeReady, func(c corev1.NodeCondition) (corev1.NodeConditionType, corev1.ConditionStatus) {
		return c.Type, c.Status
	})
}

func nodeDraining(n *corev1.Node) bool {
	if n.Spec.Unschedulable || n.DeletionTimestamp != nil {
		return true
	}
	for _, t := range n.Spec.Taints {
		switch t.Key {
		case "karpenter.sh/disrupted", "ToBeDeletedByClusterAutoscaler", corev1.TaintNodeUnschedulable:
			return true
		}
	}
	return false
}

// disruptedFor reports whether the pod carries a DisruptionTarget condition
// with reason, which the API server's controllers set before they delete it.
func disruptedFor(pod *corev1.Pod, reason string) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == reason {
			return true
		}
	}
	return false
}

func evicted(pod *corev1.Pod) bool {
	if pod.Status.Reason == "Evicted" {
		return true
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// conclusionKind sorts a job's conclusion: did it succeed, was it cancelled
// or skipped (never re-run), or did it fail (lost with its runner).
type conclusionKind int

const (
	concluded conclusionKind = iota // success, neutral
	cancelled                       // cancelled, skipped
	failedJob                       // failure, timed_out, startup_failure, ...
)

func kindOf(conclusion string) conclusionKind {
	switch conclusion {
	case "success", "neutral":
		return concluded
	case "cancelled", "skipped":
		return cancelled
	}
	return failedJob
}

// actionKind is the one request a completed run's lost jobs need.
type actionKind int

const (
	actNone        actionKind = iota
	actRerunJob               // POST .../jobs/{id}/rerun
	actRerunFailed            // POST .../runs/{id}/rerun-failed-jobs
)

type action struct {
	kind  actionKind
	jobID int64
}

// outcome is what becomes of one record.
type outcome struct {
	index      int // into plan's records
	state      State
	outcome    Outcome
	jobID      int64
	jobName    string
	conclusion string
	message    string
}

// MaxAttempts is how many attempts GitHub lets a workflow run have: a run
// is re-run at most 50 times. A run at it is not asked.
const MaxAttempts = 50

// matchJobs are the jobs of the attempt that can be rec's: the one of the
// job ID a verified annotation gave, else every job of the attempt the job
// ran in whose runner_name is the runner's.
func matchJobs(rec Record, jobs []ghclient.WorkflowJob) []ghclient.WorkflowJob {
	var out []ghclient.WorkflowJob
	for _, j := range jobs {
		switch {
		case rec.ID > 0:
			if j.ID == rec.ID {
				out = append(out, j)
			}
		case j.RunnerName != "" && j.RunnerName == rec.Runner && (j.Attempt == 0 || j.Attempt == rec.Attempt):
			out = append(out, j)
		}
	}
	return out
}

// plan decides a completed run's waiting records of its latest attempt:
// which jobs were lost, and the one request that re-runs them. A re-run
// starts a new attempt of the whole run, after which no other job of the
// old attempt can be re-run; so two or more lost jobs are re-run together
// with rerun-failed-jobs when they are the attempt's only failed or
// cancelled jobs (it re-runs both), and otherwise only the first is. room
// is how many more re-runs the run may have (maxPerRun less those done). A
// record no job or several jobs match is not re-run: runner-guard re-runs
// the job that was lost, or none.
func plan(run ghclient.WorkflowRun, jobs []ghclient.WorkflowJob, recs []Record, enabled bool, room, maxPerRun int) (action, []outcome) {
	var outs []outcome
	var lost []int // into outs
	lostIDs := map[int64]bool{}
	for i, r := range recs {
		m := matchJobs(r, jobs)
		var j ghclient.WorkflowJob
		if len(m) == 1 {
			j = m[0]
		}
		switch {
		case len(m) == 0 && r.ID > 0:
			outs = append(outs, outcome{index: i, state: StateUnknown, outcome: OutcomeUnnamed,
				message: fmt.Sprintf("GitHub's jobs of attempt %d have no job %d (the job its annotation names): nothing re-run", run.Attempt, r.ID)})
		case len(m) == 0:
			outs = append(outs, outcome{index: i, state: StateUnknown, outcome: OutcomeUnnamed,
				message: fmt.Sprintf("GitHub's jobs of attempt %d name no job run by %q: nothing re-run", run.Attempt, r.Runner)})
		case len(m) > 1:
			outs = append(outs, outcome{index: i, state: StateUnknown, outcome: OutcomeUnnamed,
				message: fmt.Sprintf("%d jobs of attempt %d ran on runner %q and runner-guard cannot tell which was lost: none is re-run", len(m), run.Attempt, r.Runner)})
		case kindOf(j.Conclusion) != failedJob:
			outs = append(outs, outcome{index: i, state: StateFinished, outcome: OutcomeEnded, jobID: j.ID, jobName: j.Name, conclusion: j.Conclusion,
				message: fmt.Sprintf("job %q ended %s: nothing to re-run", j.Name, j.Conclusion)})
		default:
			lost = append(lost, len(outs))
			lostIDs[j.ID] = true
			outs = append(outs, outcome{index: i, state: StateLost, jobID: j.ID, jobName: j.Name, conclusion: j.Conclusion})
		}
	}
	notRerun := func(o *outcome, out Outcome, why string) {
		o.outcome = out
		o.message = fmt.Sprintf("job %q ended %s after its runner pod went (%s); not re-run: %s", o.jobName, o.conclusion, recs[o.index].Cause, why)
	}
	if len(lost) == 0 {
		return action{}, outs
	}
	if !enabled {
		for _, k := range lost {
			notRerun(&outs[k], OutcomeExcluded, "re-runs are off (--rerun-lost-jobs); re-run it on GitHub")
		}
		return action{}, outs
	}
	if run.Attempt >= MaxAttempts {
		for _, k := range lost {
			notRerun(&outs[k], OutcomeRefused, fmt.Sprintf("the run is at attempt %d, GitHub's cap of %d", run.Attempt, MaxAttempts))
		}
		return action{}, outs
	}
	if room <= 0 {
		for _, k := range lost {
			notRerun(&outs[k], OutcomeExcluded, fmt.Sprintf("the run had its %d re-runs (--rerun-max-per-run)", maxPerRun))
		}
		return action{}, outs
	}
	// rerun-failed-jobs re-runs the attempt's cancelled jobs too.
	othersFailed := false
	for _, j := range jobs {
		if (kindOf(j.Conclusion) == failedJob || j.Conclusion == "cancelled") && j.Conclusion != "" && !lostIDs[j.ID] {
			othersFailed = true
		}
	}
	rerun := func(o *outcome, how string) {
		o.state, o.outcome = StateRerun, OutcomeRerun
		o.message = fmt.Sprintf("job %q ended %s after its runner pod went (%s): %s", o.jobName, o.conclusion, recs[o.index].Cause, how)
	}
	if len(lost) > 1 && !othersFailed && len(lost) <= room {
		for _, k := range lost {
			rerun(&outs[k], fmt.Sprintf("re-ran the run's failed jobs, the %d lost with their runners", len(lost)))
		}
		return action{kind: actRerunFailed}, outs
	}
	first := &outs[lost[0]]
	rerun(first, "re-ran it and the jobs that need it")
	for _, k := range lost[1:] {
		notRerun(&outs[k], OutcomeRefused, fmt.Sprintf("job %q of the same attempt was re-run, and a run re-runs one attempt at a time", first.jobName))
	}
	return action{kind: actRerunJob, jobID: first.jobID}, outs
}
