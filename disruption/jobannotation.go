package disruption

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

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

// annotationState is a legacy pod's job state from its job annotation:
// running while a verified one is there; not proven once one this replica
// saw is gone (the job's completed took it off), so the hints set for it go
// at once. known is false otherwise: the pod's other sources decide, as
// without events (a lost or late delivery is a missed hint). ended is when
// this replica first saw the annotation gone (zero: never): a listing taken
// before then still shows the job that ended, and proves no other.
func (r *hintReconciler) annotationState(pod *corev1.Pod) (state JobState, known bool, ended time.Time) {
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	if annotatedJob(pod, r.eventsSecret) {
		r.annotated.Store(key, time.Time{})
		return JobRunning, true, time.Time{}
	}
	v, seen := r.annotated.Load(key)
	if !seen {
		return JobUnknown, false, time.Time{}
	}
	if ended, _ := v.(time.Time); !ended.IsZero() {
		return JobUnknown, false, ended
	}
	r.annotated.Store(key, r.clock())
	return JobNotProven, true, time.Time{}
}
