package disruption

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/events/jobannotation"
)

// annotatedJob reports whether a legacy pod carries a verified
// runner-guard.io/job annotation (package events writes it from a signed
// workflow_job delivery). It is a job source like an EphemeralRunner's job
// fields, but only ever proves a job: a missing annotation proves nothing (a
// delivery may be lost or late), and the drain still asks GitHub's DELETE.
func annotatedJob(pod *corev1.Pod, secret []byte) bool {
	_, ok := jobannotation.JobFromPod(pod, secret)
	return ok
}

// hasJobAnnotation is the watch predicate's cheap test: a pod whose job
// annotation comes or goes is worth a reconcile.
func hasJobAnnotation(cp *cachedPod) bool {
	return cp.annotation(jobannotation.Annotation) != ""
}

// noJobAnnotation is the job state of a legacy pod without a verified job
// annotation that no listing answers for. With events on, the deliveries
// are its job source: a "completed" took the annotation off, so hints set
// while it was there go at once (JobNotProven, never proof of idle). With
// events off nothing is known.
func noJobAnnotation(secret []byte) JobState {
	if len(secret) > 0 {
		return JobNotProven
	}
	return JobUnknown
}
