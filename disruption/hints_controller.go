package disruption

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// listingRecheck is how often a running runner pod whose job state comes
// from the listing is looked at again: the listing changes without an event.
const listingRecheck = 30 * time.Second

// conflictRetry is how soon a patch refused for a stale resourceVersion is retried.
const conflictRetry = 50 * time.Millisecond

// staleHintsAfter is how long a pod's job state may stay unknown before the
// hints runner-guard set on it go: a listing that said busy once and was
// never taken again (a non-ephemeral legacy runner whose scope no decision
// lists any more) must not keep its node from Karpenter and the autoscaler
// for good. Without the hints the webhook still refuses evicting a runner
// with a job; only the planners' choice is no longer steered.
const staleHintsAfter = 10 * time.Minute

// hintReconciler keeps the hints of one runner pod in step with its job.
type hintReconciler struct {
	// pods reads pods from the cache and patches them.
	pods  client.Client
	guard Guard
	// ephemeral resolves a pod's EphemeralRunner from the cache; nil when
	// the API server serves no EphemeralRunners.
	ephemeral *arc.Resolver
	// listing is the job source of pods without job fields; nil: none yet.
	listing Listing
	// watch, when the listing is not refreshed for hints, looks at legacy
	// pods when their scope's listing is taken instead of every
	// listingRecheck; nil: requeue them.
	watch   *listingWatch
	enabled []Hint
	// budgets keeps a job budget for each busy runner's pod.
	budgets bool
	// events records on pods; said keeps each Event to once per pod.
	events events.EventRecorder
	said   *once
	// jobKeys verifies legacy pods' job annotations; nil: none read.
	jobKeys *jobannotation.Keyring
	// annotated are the pods seen with a verified job annotation: zero
	// while it is there, then when it was first seen gone (jobannotation.go).
	annotated sync.Map // types.NamespacedName -> time.Time
	// unverified are the pods whose annotation does not verify, counted
	// by unverifiedGauge (runner_guard_job_annotations_unverified).
	unverified      sync.Map // types.NamespacedName -> struct{}
	unverifiedGauge prometheus.Gauge
	// now is the clock; nil is time.Now.
	now func() time.Time

	mu sync.Mutex
	// unknownSince is when each pod's job state became unknown.
	unknownSince map[types.NamespacedName]time.Time
}

var _ reconcile.Reconciler = &hintReconciler{}

// Reconcile reads the pod's job state and brings its hints and its job
// budget in step with it.
func (r *hintReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logr.FromContextOrDiscard(ctx)
	pod := &corev1.Pod{}
	if err := r.pods.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	state, recheck := r.state(ctx, pod)
	if state == JobEnded {
		r.forget(req.NamespacedName)
	}
	if state == JobUnknown {
		hinted := len(owned(pod.Annotations)) > 0 || pod.Labels[webhook.LabelJobBudget] != ""
		if left := r.unknownFor(req.NamespacedName, hinted); !hinted || left > 0 {
			if left > 0 && (recheck == 0 || left < recheck) {
				recheck = left
			}
			return reconcile.Result{RequeueAfter: recheck}, nil
		}
		log.V(1).Info("job state unknown for too long: removing runner-guard's hints and job budget", "pod", req.NamespacedName, "after", staleHintsAfter)
	} else {
		r.known(req.NamespacedName)
	}
	busy, idle := state == JobRunning, state == JobNotProven
	plan, err := r.planBudget(ctx, pod, busy)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !plan.Want {
		// The budget goes before the label, so no budget ever selects nothing.
		if err := deleteJobBudgets(ctx, r.pods, pod, plan.Delete); err != nil {
			return r.budgetFailed(ctx, err)
		}
	}
	patch, labels := hintPatch(pod.Annotations, busy, idle, r.enabled), plan.labelPatch(pod)
	if stop, err := r.patchPod(ctx, pod, patch, labels, state); stop != nil {
		return *stop, err
	}
	if plan.Want {
		// The label is on the pod now: the budget selects it from the start.
		if err := deleteJobBudgets(ctx, r.pods, pod, plan.Delete); err != nil {
			return r.budgetFailed(ctx, err)
		}
		if plan.Create {
			if err := createJobBudget(ctx, r.pods, pod); err != nil {
				return r.budgetFailed(ctx, err)
			}
			log.V(1).Info("job budget created", "pod", req.NamespacedName, "budget", jobBudgetName(pod))
		}
	}
	if len(plan.Others) > 0 && r.said != nil && r.said.first(fmt.Sprintf("%s/%s/%s", req.Namespace, req.Name, strings.Join(plan.Others, ","))) {
		r.events.Eventf(pod, nil, corev1.EventTypeNormal, EventJobBudgetSkipped, "JobBudget",
			"the runner of pod %s holds a job, but PodDisruptionBudget %s already selects the pod, and two budgets would make every eviction of it fail: runner-guard keeps no budget of its own on it, so while runner-guard is down only that budget and the webhook's failurePolicy hold the job",
			req.NamespacedName, strings.Join(plan.Others, ", "))
	}
	return reconcile.Result{RequeueAfter: recheck}, nil
}

// patchPod merge-patches the pod's annotations and the job budget's label,
// with its resourceVersion as precondition. stop, when set, ends the
// reconcile with it: the pod is gone (nothing to do), or it changed since
// the cache read it (decide again on the new one, soon).
func (r *hintReconciler) patchPod(ctx context.Context, pod *corev1.Pod, patch, labels HintPatch, state JobState) (stop *reconcile.Result, err error) {
	if len(patch) == 0 && len(labels) == 0 {
		return nil, nil
	}
	body, err := json.Marshal(patch.mergePatch(pod.ResourceVersion, labels))
	if err != nil {
		return &reconcile.Result{}, err
	}
	key := client.ObjectKeyFromObject(pod)
	if err := r.pods.Patch(ctx, pod, client.RawPatch(types.MergePatchType, body)); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return &reconcile.Result{}, nil
		case apierrors.IsConflict(err):
			return &reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		return &reconcile.Result{}, fmt.Errorf("patching the hints of pod %s: %w", key, err)
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("hints updated", "pod", key, "job", state.String(), "patch", string(body))
	return nil, nil
}

// planBudget reads the budgets of the pod's namespace (only while budgets
// are on: off, the label goes and the start-up clean-up removed the
// budgets) and plans the pod's job budget.
func (r *hintReconciler) planBudget(ctx context.Context, pod *corev1.Pod, busy bool) (budgetPlan, error) {
	if !r.budgets {
		return planBudget(pod, busy, false, nil), nil
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := r.pods.List(ctx, &pdbs, client.InNamespace(pod.Namespace)); err != nil {
		return budgetPlan{}, fmt.Errorf("listing the PodDisruptionBudgets of namespace %s: %w", pod.Namespace, err)
	}
	return planBudget(pod, busy, true, pdbs.Items), nil
}

// budgetFailed logs a budget write that failed. Forbidden (an install whose
// RBAC predates job budgets) is said once and retried slowly.
func (r *hintReconciler) budgetFailed(ctx context.Context, err error) (reconcile.Result, error) {
	if apierrors.IsForbidden(err) {
		if r.said == nil || r.said.first("/forbidden") {
			logr.FromContextOrDiscard(ctx).Error(err, "runner-guard may not write PodDisruptionBudgets: grant create and delete on poddisruptionbudgets (the chart and manifests do), or turn --disruption-budgets off")
		}
		return reconcile.Result{RequeueAfter: time.Minute}, nil
	}
	return reconcile.Result{}, err
}

// state gathers the pod's job facts and how soon to look again.
func (r *hintReconciler) state(ctx context.Context, pod *corev1.Pod) (JobState, time.Duration) {
	if _, guarded := r.guard.RunnerContainer(pod); !guarded {
		// No longer a runner pod (its labels changed): only ours to remove.
		return JobEnded, 0
	}
	f := jobFacts{PodDone: podDone(r.guard, pod)}
	if f.PodDone {
		return jobState(f), 0
	}
	if ephemeralRunnerOwned(pod) {
		if r.ephemeral == nil {
			return JobUnknown, 0
		}
		run, err := r.ephemeral.Resolve(ctx, pod)
		switch {
		case err == nil && run != nil:
			f.ARC = run
		case objectGone(err):
			f.ARCGone = true
		default:
			// A borrowed reference proves nothing; an unreadable one neither.
			logr.FromContextOrDiscard(ctx).V(1).Info("EphemeralRunner not usable for hints", "pod", client.ObjectKeyFromObject(pod), "error", fmt.Sprint(err))
			return JobUnknown, 0
		}
		return jobState(f), 0
	}
	state, known, ended, verifiedFor := r.annotationState(pod)
	if known {
		return state, verifiedFor
	}
	if r.listing == nil {
		return JobUnknown, 0
	}
	res, err := r.guard.Resolve(ctx, pod)
	if err != nil {
		return JobUnknown, 0
	}
	recheck := listingRecheck
	if r.watch != nil {
		// Looked at again when its scope's listing is taken anew.
		r.watch.remember(client.ObjectKeyFromObject(pod), res.Runner)
		recheck = 0
	}
	busy, err := r.listing.Busy(ctx, res.Runner)
	if err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("listing not available for hints", "pod", client.ObjectKeyFromObject(pod), "error", err.Error())
		return JobUnknown, recheck
	}
	if busy && !ended.IsZero() && !r.listing.Taken(ctx, res.Runner).After(ended) {
		// Taken before the job's completed arrived, the listing still
		// shows that job: it must not bring back the hints the completed
		// took off (they would hold the node until they went stale).
		busy = false
	}
	f.Listed = &busy
	return jobState(f), recheck
}

func (r *hintReconciler) forget(key types.NamespacedName) {
	if r.said != nil {
		r.said.forget(key.Namespace + "/" + key.Name + "/")
	}
	r.annotated.Delete(key)
	r.dropUnverified(key)
	if r.watch != nil {
		r.watch.forget(key)
	}
	r.known(key)
}

// unknownFor records that the pod's job state is unknown and returns how
// long its hints may stay (0: they go now). A pod without runner-guard's
// hints has nothing to lose and is not recorded.
func (r *hintReconciler) unknownFor(key types.NamespacedName, hinted bool) time.Duration {
	if !hinted {
		r.known(key)
		return 0
	}
	now := r.clock
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unknownSince == nil {
		r.unknownSince = map[types.NamespacedName]time.Time{}
	}
	since, ok := r.unknownSince[key]
	if !ok {
		since = now()
		r.unknownSince[key] = since
	}
	return max(0, staleHintsAfter-now().Sub(since))
}

// clock is r.now, or time.Now without one.
func (r *hintReconciler) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// known drops the pod's unknown-since record: its job state is known again.
func (r *hintReconciler) known(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.unknownSince, key)
}
