package disruption

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/webhook"
)

// Job budgets: while a runner pod's runner holds a job, runner-guard keeps a
// PodDisruptionBudget with minAvailable 1 that selects only that pod (through
// webhook.LabelJobBudget, valued with its UID), owned by the pod. The API
// server then refuses evicting the pod even while runner-guard is down, and
// every planner that reads budgets (kubectl drain, managed upgrades,
// Karpenter, the cluster autoscaler) sees the job.
const (
	// EventJobBudgetSkipped: another budget selects a busy runner's pod, so
	// runner-guard keeps none (two budgets make every eviction fail).
	EventJobBudgetSkipped = "JobBudgetSkipped"
	// LabelManagedBy marks the budgets runner-guard made.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "runner-guard"
)

// jobBudgetName is the name of a pod's job budget: the pod's name (cut so
// the whole stays a short name) and a part of its UID, so a pod recreated
// under the same name never meets its predecessor's budget.
func jobBudgetName(pod *corev1.Pod) string {
	name := pod.Name
	if len(name) > 200 {
		name = name[:200]
	}
	uid := string(pod.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return fmt.Sprintf("%s-job-%s", name, uid)
}

// jobBudget is the budget kept for a busy runner's pod.
func jobBudget(pod *corev1.Pod) *policyv1.PodDisruptionBudget {
	uid := string(pod.UID)
	one := intstr.FromInt32(1)
	yes := true
	return &policyv1.PodDisruptionBudget{
		TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: metav1.ObjectMeta{
			Name: jobBudgetName(pod), Namespace: pod.Namespace,
			Labels:          map[string]string{webhook.LabelJobBudget: uid, LabelManagedBy: managedBy},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: &yes}},
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &one,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{webhook.LabelJobBudget: uid}},
		},
	}
}

// budgetPlan is what to do with a pod's job budget.
type budgetPlan struct {
	// Want: the pod should have its budget (and its label).
	Want bool
	// Create: it has none yet.
	Create bool
	// Delete names job budgets of the pod to delete (extras, or all of them).
	Delete []string
	// Others names the other budgets selecting a busy pod (Want is then false).
	Others []string
}

// planBudget decides, from a pod, whether its runner holds a job, whether
// job budgets are on, and the budgets of its namespace, what becomes of its
// job budget: a busy pod no other budget selects keeps exactly one; any
// other pod keeps none.
func planBudget(pod *corev1.Pod, busy, enabled bool, pdbs []policyv1.PodDisruptionBudget) budgetPlan {
	var p budgetPlan
	var ours []string
	// The pod as it looks with its label set: a user budget that selects
	// everything selects it too.
	withLabel := labels.Merge(labels.Set(pod.Labels), labels.Set{webhook.LabelJobBudget: string(pod.UID)})
	for i := range pdbs {
		pdb := &pdbs[i]
		if pdb.Namespace != pod.Namespace {
			continue
		}
		if webhook.IsJobBudget(pdb) {
			if pdb.Labels[webhook.LabelJobBudget] == string(pod.UID) {
				ours = append(ours, pdb.Name)
			}
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err == nil && pdb.Spec.Selector != nil && sel.Matches(withLabel) {
			p.Others = append(p.Others, pdb.Name)
		}
	}
	slices.Sort(ours)
	slices.Sort(p.Others)
	if !enabled || !busy {
		p.Others = nil
	}
	p.Want = enabled && busy && len(p.Others) == 0
	switch {
	case p.Want && len(ours) == 0:
		p.Create = true
	case p.Want:
		p.Delete = ours[1:] // at most one per pod
	default:
		p.Delete = ours
	}
	return p
}

// labelPatch is the change of the pod's labels the plan needs: its label
// valued with its UID while it wants a budget, none otherwise.
func (p budgetPlan) labelPatch(pod *corev1.Pod) HintPatch {
	v, has := pod.Labels[webhook.LabelJobBudget]
	switch {
	case p.Want && v != string(pod.UID):
		return HintPatch{webhook.LabelJobBudget: ptr(string(pod.UID))}
	case !p.Want && has:
		return HintPatch{webhook.LabelJobBudget: nil}
	}
	return nil
}

// jobBudgetsSelector selects the budgets runner-guard may have made.
func jobBudgetsSelector() labels.Selector {
	req, _ := labels.NewRequirement(webhook.LabelJobBudget, selection.Exists, nil)
	return labels.NewSelector().Add(*req)
}

// RemoveJobBudgets deletes every job budget runner-guard made, in the given
// namespaces (empty: all): when budgets are turned off, and on uninstall.
// It returns how many it deleted.
func RemoveJobBudgets(ctx context.Context, c client.Client, namespaces []string) (int, error) {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	n := 0
	for _, ns := range namespaces {
		var list policyv1.PodDisruptionBudgetList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: jobBudgetsSelector()}); err != nil {
			return n, fmt.Errorf("listing runner-guard's job budgets: %w", err)
		}
		for i := range list.Items {
			if !webhook.IsJobBudget(&list.Items[i]) {
				continue
			}
			if err := c.Delete(ctx, &list.Items[i]); client.IgnoreNotFound(err) != nil {
				return n, fmt.Errorf("deleting job budget %s/%s: %w", list.Items[i].Namespace, list.Items[i].Name, err)
			}
			n++
		}
	}
	return n, nil
}

// createJobBudget creates the pod's budget; one already there is fine.
func createJobBudget(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	if err := c.Create(ctx, jobBudget(pod)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the job budget of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// deleteJobBudgets deletes the named budgets of the pod's namespace.
func deleteJobBudgets(ctx context.Context, c client.Client, pod *corev1.Pod, names []string) error {
	for _, name := range names {
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name}}
		if err := c.Delete(ctx, pdb); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting job budget %s/%s: %w", pod.Namespace, name, err)
		}
	}
	return nil
}

// budgetPods maps a budget's change to the runner pods it concerns: a job
// budget's own pod (created, deleted by someone, or its status), and for
// any other budget, when it appears, goes or changes its selector, the
// runner pods of its namespace its selector matches (before or after), so a
// busy pod's job budget gives way to it, or comes back once it is gone.
func budgetPods(c client.Reader, isRunnerPod func(*cachedPod) bool) handler.TypedEventHandler[*policyv1.PodDisruptionBudget, reconcile.Request] {
	pods := func(ctx context.Context, pdbs ...*policyv1.PodDisruptionBudget) []reconcile.Request {
		var out []reconcile.Request
		var list *cachedPodList
		for _, pdb := range pdbs {
			if webhook.IsJobBudget(pdb) {
				owner := metav1.GetControllerOf(pdb)
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pdb.Namespace, Name: owner.Name}})
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || pdb.Spec.Selector == nil {
				continue
			}
			if list == nil {
				list = &cachedPodList{}
				if err := c.List(ctx, list, client.InNamespace(pdb.Namespace)); err != nil {
					return out
				}
			}
			for i := range list.Items {
				cp := &list.Items[i]
				if isRunnerPod(cp) && sel.Matches(labels.Merge(cp.labels.asMap(), labels.Set{webhook.LabelJobBudget: string(cp.UID)})) {
					out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cp.Namespace, Name: cp.Name}})
				}
			}
		}
		return out
	}
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], reqs []reconcile.Request) {
		for _, req := range reqs {
			q.Add(req)
		}
	}
	return handler.TypedFuncs[*policyv1.PodDisruptionBudget, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*policyv1.PodDisruptionBudget], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, pods(ctx, e.Object))
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*policyv1.PodDisruptionBudget], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			// The disruption controller rewrites a budget's status at every
			// change of its pods: only a change of what it selects matters.
			if e.ObjectOld.Generation == e.ObjectNew.Generation && maps.Equal(e.ObjectOld.Labels, e.ObjectNew.Labels) &&
				slices.Equal(e.ObjectOld.OwnerReferences, e.ObjectNew.OwnerReferences) {
				return
			}
			add(q, pods(ctx, e.ObjectOld, e.ObjectNew))
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[*policyv1.PodDisruptionBudget], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, pods(ctx, e.Object))
		},
	}
}

// removeJobBudgetsAtStart removes, once the leader starts, the job budgets
// an earlier run made while budgets were on.
func removeJobBudgetsAtStart(c client.Client, namespaces []string, log logr.Logger) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		for wait := time.Second; ; wait = min(2*wait, time.Minute) {
			n, err := RemoveJobBudgets(ctx, c, namespaces)
			if err == nil {
				if n > 0 {
					log.Info("job budgets are off (--disruption-budgets=false): removed the ones runner-guard made earlier", "removed", n)
				}
				return nil
			}
			log.Error(err, "job budgets are off, but the ones runner-guard made earlier cannot be removed; retrying", "in", wait)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
	})
}
