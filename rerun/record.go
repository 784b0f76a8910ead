package rerun

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels of a lost job's ConfigMap: LabelLostJob selects them all,
// LabelRun those of one workflow run.
const (
	LabelLostJob = "runner-guard.io/lost-job"
	LabelRun     = "runner-guard.io/lost-job-run"
	namePrefix   = "runner-guard-lost-job-"
)

// State is where a record stands.
type State string

const (
	// StateWaiting: the run has not completed yet.
	StateWaiting State = "waiting"
	// StateRerun: GitHub accepted the re-run (201).
	StateRerun State = "rerun"
	// StateLost: the job did not succeed and was not re-run; Message says why.
	StateLost State = "lost"
	// StateFinished: the job succeeded, was cancelled or skipped: nothing to do.
	StateFinished State = "finished"
	// StateSuperseded: the run has a newer attempt than the job's.
	StateSuperseded State = "superseded"
	// StateUnknown: the run or the job is not on GitHub (any more).
	StateUnknown State = "unknown"
)

// Done reports whether nothing more is asked of GitHub for the record.
func (s State) Done() bool { return s != StateWaiting }

// Cause is why the pod went: the node's state or how it was deleted. Causes
// are metric labels and Event words.
type Cause string

const (
	CauseNodeGone     Cause = "node-gone"
	CauseNodeNotReady Cause = "node-not-ready"
	CauseNodeDraining Cause = "node-draining"
	CauseEvicted      Cause = "evicted"
	CauseForceDeleted Cause = "force-deleted"
	CausePodFailed    Cause = "pod-failed"
	CauseDeleted      Cause = "deleted"
)

// Causes are every Cause, for metrics.
var Causes = []Cause{CauseNodeGone, CauseNodeNotReady, CauseNodeDraining, CauseEvicted, CauseForceDeleted, CausePodFailed, CauseDeleted}

// Job names a workflow job a runner pod held.
type Job struct {
	// Repository is "owner/repo".
	Repository string
	RunID      int64
	Runner     string
}

// Record is one lost job as its ConfigMap keeps it.
type Record struct {
	Job
	Cause Cause
	// Pod is where the Events go (the pod may be long gone).
	PodNamespace, PodName string
	PodUID                string
	// Attempt is the run's attempt when the job was recorded (0: not asked yet).
	Attempt int
	State   State
	// JobID is the REST job found by runner_name, once found.
	JobID    int64
	JobName  string
	Message  string
	Recorded time.Time
}

// Name is the record's ConfigMap name: one per job, so recording it twice
// (a replayed delete, a new leader) finds the first.
func (j Job) Name() string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", j.Repository, j.RunID, j.Runner)))
	return namePrefix + hex.EncodeToString(sum[:10])
}

func (j Job) String() string {
	return fmt.Sprintf("the job of runner %q in workflow run %d of %s", j.Runner, j.RunID, j.Repository)
}

// ConfigMap renders r in namespace.
func (r Record) ConfigMap(namespace string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.Name(), Namespace: namespace,
			Labels: map[string]string{LabelLostJob: "true", LabelRun: strconv.FormatInt(r.RunID, 10)},
		},
	}
	r.into(cm)
	return cm
}

// into writes r's fields into cm's data.
func (r Record) into(cm *corev1.ConfigMap) {
	cm.Data = map[string]string{
		"repository": r.Repository, "runID": strconv.FormatInt(r.RunID, 10), "runner": r.Runner,
		"cause": string(r.Cause), "podNamespace": r.PodNamespace, "podName": r.PodName, "podUID": r.PodUID,
		"attempt": strconv.Itoa(r.Attempt), "state": string(r.State),
		"jobID": strconv.FormatInt(r.JobID, 10), "jobName": r.JobName, "message": r.Message,
		"recorded": r.Recorded.UTC().Format(time.RFC3339),
	}
}

// parseRecord reads a record's ConfigMap, naming the field at fault.
func parseRecord(cm *corev1.ConfigMap) (Record, error) {
	d := cm.Data
	r := Record{
		Job:          Job{Repository: d["repository"], Runner: d["runner"]},
		Cause:        Cause(d["cause"]),
		PodNamespace: d["podNamespace"], PodName: d["podName"], PodUID: d["podUID"],
		State: State(d["state"]), JobName: d["jobName"], Message: d["message"],
	}
	var err error
	if r.RunID, err = strconv.ParseInt(d["runID"], 10, 64); err != nil || r.RunID <= 0 {
		return Record{}, fmt.Errorf("ConfigMap %s/%s: data.runID %q is no workflow run ID", cm.Namespace, cm.Name, d["runID"])
	}
	if r.Attempt, err = strconv.Atoi(orZero(d["attempt"])); err != nil {
		return Record{}, fmt.Errorf("ConfigMap %s/%s: data.attempt: %w", cm.Namespace, cm.Name, err)
	}
	if r.JobID, err = strconv.ParseInt(orZero(d["jobID"]), 10, 64); err != nil {
		return Record{}, fmt.Errorf("ConfigMap %s/%s: data.jobID: %w", cm.Namespace, cm.Name, err)
	}
	if r.Recorded, err = time.Parse(time.RFC3339, d["recorded"]); err != nil {
		return Record{}, fmt.Errorf("ConfigMap %s/%s: data.recorded: %w", cm.Namespace, cm.Name, err)
	}
	switch {
	case r.Repository == "" || r.Runner == "":
		return Record{}, fmt.Errorf("ConfigMap %s/%s: data.repository and data.runner are required", cm.Namespace, cm.Name)
	case r.State == "":
		r.State = StateWaiting
	}
	return r, nil
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
