package webhook

import (
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// This file is the eviction subresource's view of PodDisruptionBudgets:
// which budgets select a pod and which one an eviction is charged to. It is
// pure (no reads, no ledger); an eviction's decision enters it once, through
// ChargedBudget from the ledger's ReserveFor (budgets.go).

// labelsOf is the pod's label set.
func labelsOf(pod *corev1.Pod) labels.Set { return labels.Set(pod.Labels) }

// BlockingBudgets is what the eviction subresource would say of evicting pod
// now, given the budgets of its namespace: the budget that refuses it (a
// 429), or the budgets selecting it when there are several (a 500); both
// empty when the budgets let it go.
func BlockingBudgets(pod *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) (blocking string, several []string) {
	return pdbBlocks(pod, pdbs), severalBudgets(pod, pdbs)
}

// severalBudgets names the budgets selecting the pod when there is more than
// one: the API server then refuses every eviction of it (500), so the runner
// must not be unregistered for one.
func severalBudgets(pod *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) []string {
	selecting := budgetsSelecting(pod, pdbs)
	if len(selecting) < 2 {
		return nil
	}
	names := make([]string, len(selecting))
	for i, pdb := range selecting {
		names[i] = pdb.Name
	}
	return names
}

// budgetsSelecting returns the budgets the eviction subresource checks for
// pod: none for a pod that is Pending, Succeeded, Failed or terminating, else
// those of its namespace whose selector matches it (a nil selector matches
// none, an empty one all).
func budgetsSelecting(pod *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) []*policyv1.PodDisruptionBudget {
	switch pod.Status.Phase {
	case corev1.PodPending, corev1.PodSucceeded, corev1.PodFailed:
		return nil
	}
	if pod.DeletionTimestamp != nil {
		return nil
	}
	var out []*policyv1.PodDisruptionBudget
	for i := range pdbs {
		if pdbs[i].Namespace != pod.Namespace {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdbs[i].Spec.Selector)
		if err == nil && sel.Matches(labelsOf(pod)) {
			out = append(out, &pdbs[i])
		}
	}
	return out
}

// ChargedBudget is the budget the eviction subresource charges for evicting
// pod now (pdbBlocks' rules): the one budget selecting it, unless the pod goes
// without a look at budgets (not Running, terminating, unhealthy under a
// policy that lets it go). several names the budgets selecting the pod when
// there is more than one, which the API server refuses with a 500.
func ChargedBudget(pod *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) (charged *policyv1.PodDisruptionBudget, several []string) {
	if several = severalBudgets(pod, pdbs); several != nil {
		return nil, several
	}
	selecting := budgetsSelecting(pod, pdbs)
	if len(selecting) != 1 {
		return nil, nil
	}
	pdb := selecting[0]
	if !podReady(pod) {
		if p := pdb.Spec.UnhealthyPodEvictionPolicy; p != nil && *p == policyv1.AlwaysAllow {
			return nil, nil
		}
		if pdb.Status.DesiredHealthy > 0 && pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy {
			return nil, nil
		}
	}
	return pdb, nil
}

// maxDisruptedPods is how many evictions a budget may hold unconfirmed by the
// disruption controller (status.disruptedPods) before the API server refuses
// further ones.
const maxDisruptedPods = 2000

// pdbBlocks names the budget for which the API server's eviction subresource
// refuses evicting pod now, or "" when the budgets let it go or the API server
// refuses for another reason it reports itself. It follows the eviction rules
// Kubernetes documents ("Disruptions", "Configure a PodDisruptionBudget"):
//
//   - a pod that is Pending, Succeeded or Failed, or already terminating, is
//     evicted without looking at budgets;
//   - a budget selects the pods of its namespace its selector matches (a nil
//     selector none, an empty one all); with none the pod goes; with more than
//     one the API server refuses every eviction with a 500 (severalBudgets),
//     never a 429 drains would retry forever;
//   - a pod that is not Ready goes whatever the budget's disruptionsAllowed
//     under unhealthyPodEvictionPolicy AlwaysAllow, and under IfHealthyBudget
//     (the default) when status.currentHealthy >= status.desiredHealthy > 0;
//   - otherwise the budget must have been processed (status.observedGeneration
//     >= metadata.generation, else a 429), allow a disruption
//     (status.disruptionsAllowed >= 1, else a 429) and hold fewer than
//     maxDisruptedPods unconfirmed evictions.
func pdbBlocks(pod *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) string {
	if charged, _ := ChargedBudget(pod, pdbs); charged != nil && budgetRefuses(charged, 0) {
		return charged.Name
	}
	// None: the pod goes. Several: severalBudgets refuses as the API server does.
	return ""
}

// podReady reports a pod whose Ready condition is True: the API server's
// measure of a healthy pod for disruption budgets.
func podReady(pod *corev1.Pod) bool {
	return ConditionTrue(pod.Status.Conditions, corev1.PodReady, func(c corev1.PodCondition) (corev1.PodConditionType, corev1.ConditionStatus) {
		return c.Type, c.Status
	})
}

// ConditionTrue reports whether the first condition of type t among conds
// (a pod's or a node's, read by typeAndStatus) has status True, as the API
// server reads Ready: a missing condition is not True.
func ConditionTrue[C any, T comparable](conds []C, t T, typeAndStatus func(C) (T, corev1.ConditionStatus)) bool {
	for _, c := range conds {
		if ct, status := typeAndStatus(c); ct == t {
			return status == corev1.ConditionTrue
		}
	}
	return false
}
