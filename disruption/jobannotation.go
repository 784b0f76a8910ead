package disruption

import (
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/internal/jobannotation"
)

// EventJobAnnotationUnverified is the Warning Event on a pod whose
// runner-guard.io/job annotation no longer verifies (a secret rotated past
// its previous value's window, or removed): its hold is gone.
const EventJobAnnotationUnverified = "JobAnnotationUnverified"

// hasJobAnnotation is the watch predicate's cheap test: a pod whose job
// annotation comes or goes is worth a reconcile.
func hasJobAnnotation(cp *cachedPod) bool {
	return cp.annotation(jobannotation.Annotation) != ""
}

// annotationState is a legacy pod's job state from its job annotation
// (package events writes it from signed workflow_job deliveries): running
// while a verified in_progress record is there; not proven once one this
// replica saw is gone or completed (the job's completed took it off), so the
// hints set for it go at once. known is false otherwise: the pod's other
// sources decide, as without events (a lost or late delivery is a missed
// hint). ended is when this replica first saw the job end (zero: never): a
// listing taken before then still shows the job that ended, and proves no
// other. recheck, when set, is when a record verified under a secret's
// previous value stops verifying. An annotation only ever proves a job: the
// drain still asks GitHub's DELETE.
func (r *hintReconciler) annotationState(pod *corev1.Pod) (state JobState, known bool, ended time.Time, recheck time.Duration) {
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	rec, err := r.jobKeys.Read(pod)
	r.noteUnverified(pod, err)
	if err == nil && rec.Running() {
		r.annotated.Store(key, time.Time{})
		if !rec.VerifiedUntil.IsZero() {
			recheck = max(time.Second, rec.VerifiedUntil.Sub(r.clock()))
		}
		return JobRunning, true, time.Time{}, recheck
	}
	v, seen := r.annotated.Load(key)
	if !seen {
		return JobUnknown, false, time.Time{}, 0
	}
	if ended, _ := v.(time.Time); !ended.IsZero() {
		return JobUnknown, false, ended, 0
	}
	r.annotated.Store(key, r.clock())
	return JobNotProven, true, time.Time{}, 0
}

// noteUnverified keeps runner_guard_job_annotations_unverified and says once,
// in a Warning Event on the pod, why its annotation stopped verifying.
func (r *hintReconciler) noteUnverified(pod *corev1.Pod, err error) {
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	if err == nil || errors.Is(err, jobannotation.ErrNotFound) || !r.jobKeys.Configured() {
		r.dropUnverified(key)
		return
	}
	if _, loaded := r.unverified.LoadOrStore(key, struct{}{}); !loaded && r.unverifiedGauge != nil {
		r.unverifiedGauge.Inc()
	}
	if r.events != nil && r.said != nil && r.said.first(key.Namespace+"/"+key.Name+"/unverified") {
		r.events.Eventf(pod, nil, corev1.EventTypeWarning, EventJobAnnotationUnverified, "JobAnnotation",
			"%s; runner-guard ignores it, so it holds no job: the pod's next workflow_job delivery rewrites it (see docs/events.md, rotating a secret)", err.Error())
	}
}

// dropUnverified forgets key as a pod whose annotation does not verify.
func (r *hintReconciler) dropUnverified(key types.NamespacedName) {
	if _, was := r.unverified.LoadAndDelete(key); was && r.unverifiedGauge != nil {
		r.unverifiedGauge.Dec()
	}
}
