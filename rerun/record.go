package rerun

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// StateUnknown: the run or the job is not on GitHub (any more), or
	// the run's jobs name none or several for the record.
	StateUnknown State = "unknown"
	// StateExcluded: rerun.exclude names the job's repository or workflow.
	StateExcluded State = "excluded"
	// StateExpired: 31 days after the run started (GitHub re-runs nothing
	// after 30), the record was not decided.
	StateExpired State = "expired"
)

// Outcome is what became of a lost job, the outcome label of
// runner_guard_jobs_lost_total and a word of its Event. Each loss has one.
type Outcome string

const (
	// OutcomeRerun: GitHub accepted the re-run.
	OutcomeRerun Outcome = "rerun"
	// OutcomeExcluded: the operator or the tenant said no: re-runs off,
	// rerun.exclude, the pod's runner-guard.io/rerun: "false", or the
	// run's --rerun-max-per-run spent.
	OutcomeExcluded Outcome = "excluded"
	// OutcomeEnded: nothing to re-run: the job succeeded, was cancelled or
	// skipped, or the run was re-run already.
	OutcomeEnded Outcome = "ended"
	// OutcomeUnnamed: the job could not be named, or not trusted: no job
	// or several matched, the run is unknown, the repository is outside
	// the runner's scope or the namespace's binding, the EphemeralRunner
	// is not the pod's controller, or an older runner-guard recorded it.
	OutcomeUnnamed Outcome = "unnamed"
	// OutcomeRefused: GitHub refused the re-run, or its rules would: 403,
	// the run at its 50 attempts, past its 30 days, or another lost job of
	// the attempt re-run first.
	OutcomeRefused Outcome = "refused"
)

// Outcomes are every Outcome, for metrics.
var Outcomes = []Outcome{OutcomeRerun, OutcomeExcluded, OutcomeEnded, OutcomeUnnamed, OutcomeRefused}

// CredentialsMode says which credentials reach a record's repository.
type CredentialsMode string

const (
	// CredentialsStatic: runner-guard's own (flags) credentials.
	CredentialsStatic CredentialsMode = "static"
	// CredentialsARC: the Secret ARC's EphemeralRunner names
	// (spec.githubConfigSecret), read again whenever the record is asked about.
	CredentialsARC CredentialsMode = "arc"
)

// CredentialsRef names the credentials of a record, never the credentials
// themselves: they are resolved when asked, so a restart finds the same ones
// and a rotated Secret is read anew.
type CredentialsRef struct {
	Mode CredentialsMode
	// Secret and BaseURL (the API base of the EphemeralRunner's
	// githubConfigUrl) in CredentialsARC mode.
	Secret  types.NamespacedName
	BaseURL string
}

func (c CredentialsRef) String() string {
	if c.Mode == CredentialsARC {
		return fmt.Sprintf("ARC's Secret %s", c.Secret)
	}
	return "runner-guard's static credentials"
}

// recordFormat is the data.format of records written since the credentials
// and the job ID were kept; records without it were written before.
const recordFormat = "2"

// Named says how a record's job was named.
const (
	// NamedByAnnotation: a verified job annotation gave the REST job ID.
	NamedByAnnotation = "annotation"
	// NamedByRunner: the job is the one of the attempt whose runner_name
	// is the runner's.
	NamedByRunner = "runner"
)

// expireAfter is how long after its run started a record ends, decided or
// not: GitHub re-runs nothing older than 30 days.
const expireAfter = 31 * 24 * time.Hour

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
	// CauseNodeDeadline: the pod was deleted once its node's NodeClaim's
	// termination deadline, less the pod's grace period, had passed
	// (--honor-node-deadlines lets Karpenter's DELETE go then).
	CauseNodeDeadline Cause = "node-deadline"
)

// Causes are every Cause, for metrics.
var Causes = []Cause{CauseNodeGone, CauseNodeNotReady, CauseNodeDraining, CauseNodeDeadline, CauseEvicted, CauseForceDeleted, CausePodFailed, CauseDeleted}

// Job names a workflow job a runner pod held.
type Job struct {
	// Repository is "owner/repo".
	Repository string
	RunID      int64
	Runner     string
	// ID is the REST job ID a verified job annotation gave (0: the job is
	// found by Runner in the run's attempt).
	ID int64
}

// Record is one lost job as its ConfigMap keeps it.
type Record struct {
	Job
	Cause Cause
	// Pod is where the Events go (the pod may be long gone).
	PodNamespace, PodName string
	PodUID                string
	// Attempt is the attempt the job ran in: the annotation's, else the
	// run's when first asked (0: not asked yet).
	Attempt int
	State   State
	// Outcome, once State is done.
	Outcome Outcome
	// JobID is the REST job: the annotation's, else the one found by
	// runner_name, once found.
	JobID   int64
	JobName string
	// Message says why the record waits or how it was decided.
	Message  string
	Recorded time.Time
	// RunStarted is the run's start once GitHub said it (zero before).
	RunStarted  time.Time
	Credentials CredentialsRef
	// Legacy: the record was written by a runner-guard that kept neither
	// its credentials nor its job ID (no data.format).
	Legacy bool
}

// Expires is when the record ends, decided or not: 31 days after its run
// started (after it was recorded while GitHub has not said).
func (r Record) Expires() time.Time {
	if !r.RunStarted.IsZero() && r.RunStarted.Before(r.Recorded) {
		return r.RunStarted.Add(expireAfter)
	}
	return r.Recorded.Add(expireAfter)
}

// Name is the record's ConfigMap name: one per job, so recording it twice
// (a replayed delete, a new leader) finds the first. A job named by its ID
// has a name of its own: a persistent runner's pod of a stable name can
// lose two jobs of one run.
func (j Job) Name() string {
	key := fmt.Sprintf("%s\x00%d\x00%s", j.Repository, j.RunID, j.Runner)
	if j.ID > 0 {
		key += fmt.Sprintf("\x00%d", j.ID)
	}
	sum := sha256.Sum256([]byte(key))
	return namePrefix + hex.EncodeToString(sum[:10])
}

func (j Job) String() string {
	if j.ID > 0 {
		return fmt.Sprintf("job %d of runner %q in workflow run %d of %s", j.ID, j.Runner, j.RunID, j.Repository)
	}
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
	if r.Legacy {
		// Left in its format: a newer field would make it read as current.
		return
	}
	cm.Data["format"] = recordFormat
	cm.Data["outcome"] = string(r.Outcome)
	cm.Data["namedJobID"] = strconv.FormatInt(r.ID, 10)
	cm.Data["credentials"] = string(r.Credentials.Mode)
	if r.Credentials.Mode == CredentialsARC {
		cm.Data["credentialsSecret"] = r.Credentials.Secret.String()
		cm.Data["apiBase"] = r.Credentials.BaseURL
	}
	if !r.RunStarted.IsZero() {
		cm.Data["runStarted"] = r.RunStarted.UTC().Format(time.RFC3339)
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
	if d["format"] == "" {
		r.Legacy = true
		return r, nil
	}
	if d["format"] != recordFormat {
		return Record{}, fmt.Errorf("ConfigMap %s/%s: data.format %q is not one this runner-guard reads (%s)", cm.Namespace, cm.Name, d["format"], recordFormat)
	}
	r.Outcome = Outcome(d["outcome"])
	if r.ID, err = strconv.ParseInt(orZero(d["namedJobID"]), 10, 64); err != nil {
		return Record{}, fmt.Errorf("ConfigMap %s/%s: data.namedJobID: %w", cm.Namespace, cm.Name, err)
	}
	if v := d["runStarted"]; v != "" {
		if r.RunStarted, err = time.Parse(time.RFC3339, v); err != nil {
			return Record{}, fmt.Errorf("ConfigMap %s/%s: data.runStarted: %w", cm.Namespace, cm.Name, err)
		}
	}
	switch mode := CredentialsMode(d["credentials"]); mode {
	case CredentialsStatic:
		r.Credentials = CredentialsRef{Mode: mode}
	case CredentialsARC:
		ns, name, ok := strings.Cut(d["credentialsSecret"], "/")
		if !ok || ns == "" || name == "" {
			return Record{}, fmt.Errorf("ConfigMap %s/%s: data.credentialsSecret %q is no NAMESPACE/NAME", cm.Namespace, cm.Name, d["credentialsSecret"])
		}
		r.Credentials = CredentialsRef{Mode: mode, Secret: types.NamespacedName{Namespace: ns, Name: name}, BaseURL: d["apiBase"]}
	default:
		return Record{}, fmt.Errorf("ConfigMap %s/%s: data.credentials %q is neither %s nor %s", cm.Namespace, cm.Name, mode, CredentialsStatic, CredentialsARC)
	}
	return r, nil
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
