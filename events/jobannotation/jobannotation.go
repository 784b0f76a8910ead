// Package jobannotation reads and writes runner-guard.io/job: the job a
// workflow_job delivery says a legacy runner pod's runner holds. The value is
// signed (an HMAC keyed by the events secret and bound to the pod's UID), so
// someone who can only edit pods can neither forge one nor copy one to
// another pod; an annotation that does not verify is ignored.
//
// The annotation may only keep a pod: hints and a busy refusal. It never
// lets one go: a lost "completed" leaves a stale annotation, and only
// GitHub's DELETE proves a runner idle.
package jobannotation

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Annotation holds the job on the pod.
const Annotation = "runner-guard.io/job"

// Job is the job a workflow_job delivery put on a pod.
type Job struct {
	// Repository is OWNER/REPO of the workflow run.
	Repository string `json:"repository"`
	RunID      int64  `json:"runID"`
	Attempt    int64  `json:"attempt"`
	JobID      int64  `json:"jobID"`
	Name       string `json:"name"`
}

// signed is the annotation's JSON: the job and its MAC.
type signed struct {
	Job
	MAC string `json:"mac"`
}

// mac is the hex HMAC-SHA256 of the job's JSON and the pod's UID.
func mac(j Job, podUID string, secret []byte) string {
	b, _ := json.Marshal(j) // a struct of strings and integers always marshals
	h := hmac.New(sha256.New, secret)
	h.Write(b)
	h.Write([]byte{0})
	h.Write([]byte(podUID))
	return hex.EncodeToString(h.Sum(nil))
}

// Value is the annotation's value for job on the pod with podUID.
func Value(j Job, podUID string, secret []byte) string {
	b, _ := json.Marshal(signed{Job: j, MAC: mac(j, podUID, secret)})
	return string(b)
}

// Parse reads an annotation value and verifies its MAC for the pod.
func Parse(value, podUID string, secret []byte) (Job, error) {
	if len(secret) == 0 {
		return Job{}, fmt.Errorf("no events secret to verify %s", Annotation)
	}
	var s signed
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		return Job{}, fmt.Errorf("%s: %w", Annotation, err)
	}
	want, err := hex.DecodeString(mac(s.Job, podUID, secret))
	if err != nil {
		return Job{}, err
	}
	got, err := hex.DecodeString(s.MAC)
	if err != nil || !hmac.Equal(got, want) {
		return Job{}, fmt.Errorf("%s: the mac does not verify", Annotation)
	}
	if s.JobID == 0 || s.Repository == "" {
		return Job{}, fmt.Errorf("%s: no job ID or repository", Annotation)
	}
	return s.Job, nil
}

// JobFromPod is the verified job on pod; ok is false when it carries none,
// or one whose MAC does not verify (forged, copied, or written under another
// secret).
func JobFromPod(pod metav1.Object, secret []byte) (Job, bool) {
	v, found := pod.GetAnnotations()[Annotation]
	if !found || len(secret) == 0 {
		return Job{}, false
	}
	j, err := Parse(v, string(pod.GetUID()), secret)
	return j, err == nil
}

// String names the job for messages.
func (j Job) String() string {
	return fmt.Sprintf("job %q (ID %d) of run %d attempt %d in %s", j.Name, j.JobID, j.RunID, j.Attempt, j.Repository)
}
