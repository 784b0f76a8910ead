// Package jobannotation reads and writes runner-guard.io/job: what signed
// workflow_job deliveries said of a legacy runner pod's job. The value is a
// record (the job, its state, when) signed with a key derived from the
// secret of the GitHub webhook that delivered it and bound to the pod's UID,
// so someone who can only edit pods can neither forge one nor copy one to
// another pod; an annotation that does not verify is ignored.
//
// The record keeps a state, not just a presence: "completed" for job J is a
// tombstone, final for J, so a replayed or late in_progress of J (or of an
// older job) cannot put it back, across replicas and restarts.
//
// An in_progress record may only keep a pod: hints and a busy refusal. It
// never lets one go: a lost "completed" leaves a stale record, and only
// GitHub's DELETE proves a runner idle.
//
// It sits below webhook, disruption, rerun and events, which all read it.
package jobannotation

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Annotation holds the record on the pod.
const Annotation = "runner-guard.io/job"

// States of a job a record holds: the actions of workflow_job deliveries
// that are written.
const (
	StateInProgress = "in_progress"
	StateCompleted  = "completed"
)

// Job is the job a workflow_job delivery named.
type Job struct {
	// Repository is OWNER/REPO of the workflow run.
	Repository string `json:"repository"`
	RunID      int64  `json:"runID"`
	Attempt    int64  `json:"attempt"`
	JobID      int64  `json:"jobID"`
	Name       string `json:"name"`
}

// String names the job for messages.
func (j Job) String() string {
	return fmt.Sprintf("job %q (ID %d) of run %d attempt %d in %s", j.Name, j.JobID, j.RunID, j.Attempt, j.Repository)
}

// Record is what the annotation says of the pod's job.
type Record struct {
	Job
	// State is StateInProgress or StateCompleted.
	State string `json:"state"`
	// At is the job's started_at (in_progress) or completed_at (completed):
	// records of one runner are ordered by it.
	At time.Time `json:"at"`
	// Secret names the webhook secret whose derived key signed the record
	// ("" for the single --github-webhook-secret-file).
	Secret string `json:"secret,omitempty"`
	// VerifiedUntil, set by Read, is when a record signed under a
	// secret's previous value stops verifying; zero: it does not.
	VerifiedUntil time.Time `json:"-"`
}

// Running reports whether the record holds a job in progress.
func (r Record) Running() bool { return r.State == StateInProgress }

// Supersedes reports whether next, a delivery's record, replaces cur, the
// verified record on the pod (ok false: none, or one that does not verify).
// A completed job is final for its ID; between two jobs the later (by At,
// then by ID, since GitHub's IDs grow) wins: a runner runs one job at a time.
func Supersedes(next, cur Record, ok bool) bool {
	if !ok {
		return true
	}
	if next.JobID == cur.JobID {
		return next.State == StateCompleted && cur.State != StateCompleted
	}
	if !next.At.Equal(cur.At) {
		return next.At.After(cur.At)
	}
	return next.JobID > cur.JobID
}

// signed is the annotation's JSON: the record and its MAC.
type signed struct {
	Record
	MAC string `json:"mac"`
}

// mac is the HMAC-SHA256 of the record's JSON and the pod's UID.
func mac(r Record, podUID string, key []byte) []byte {
	b, _ := json.Marshal(r) // a struct of strings, integers and a time always marshals
	h := hmac.New(sha256.New, key)
	h.Write(b)
	h.Write([]byte{0})
	h.Write([]byte(podUID))
	return h.Sum(nil)
}

// value is the annotation's value for r on the pod with podUID.
func value(r Record, podUID string, key []byte) string {
	r.At = r.At.UTC()
	b, _ := json.Marshal(signed{Record: r, MAC: hex.EncodeToString(mac(r, podUID, key))})
	return string(b)
}

// decode reads an annotation value without verifying it.
func decode(v string) (signed, error) {
	var s signed
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, fmt.Errorf("%s is not a record: %w", Annotation, err)
	}
	if s.JobID <= 0 || s.Repository == "" {
		return s, fmt.Errorf("%s names no job ID or repository", Annotation)
	}
	if s.State != StateInProgress && s.State != StateCompleted {
		return s, fmt.Errorf("%s has state %q, neither %s nor %s", Annotation, s.State, StateInProgress, StateCompleted)
	}
	return s, nil
}

// Claimed reads an annotation value without verifying its MAC: what it
// claims, for messages (explain) about one that cannot be verified. Nothing
// may act on it.
func Claimed(v string) (Record, error) {
	s, err := decode(v)
	return s.Record, err
}

// errMAC is a record whose MAC no configured key makes.
var errMAC = errors.New("its MAC does not verify (forged, copied from another pod, or signed under another secret)")

// verifyMAC checks s against key in constant time.
func verifyMAC(s signed, podUID string, key []byte) bool {
	got, err := hex.DecodeString(s.MAC)
	return err == nil && hmac.Equal(got, mac(s.Record, podUID, key))
}

// Found reports whether pod carries the annotation at all.
func Found(pod metav1.Object) bool {
	_, ok := pod.GetAnnotations()[Annotation]
	return ok
}
