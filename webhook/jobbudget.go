package webhook

import (
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelJobBudget is the label runner-guard sets on a runner pod while its
// runner holds a job, valued with the pod's UID, and the only label its job
// budget (package disruption) selects.
const LabelJobBudget = "runner-guard.io/job-budget"

// IsJobBudget reports whether pdb is one of runner-guard's job budgets: it
// carries LabelJobBudget, selects exactly that label's value, and is owned
// by the pod of that UID. Such a budget is runner-guard's own knowledge
// (the pod's runner holds a job), not a user's wish: the webhook's rule 5d
// and the drain's budget check leave it out, so a busy runner keeps its
// own reason and an idle one has no budget left to wait for.
func IsJobBudget(pdb *policyv1.PodDisruptionBudget) bool {
	uid := pdb.Labels[LabelJobBudget]
	if uid == "" || pdb.Spec.Selector == nil || len(pdb.Spec.Selector.MatchExpressions) > 0 {
		return false
	}
	if sel := pdb.Spec.Selector.MatchLabels; len(sel) != 1 || sel[LabelJobBudget] != uid {
		return false
	}
	owner := metav1.GetControllerOf(pdb)
	return owner != nil && owner.Kind == "Pod" && owner.APIVersion == "v1" && string(owner.UID) == uid
}

// WithoutJobBudgets is pdbs less runner-guard's job budgets (IsJobBudget).
func WithoutJobBudgets(pdbs []policyv1.PodDisruptionBudget) []policyv1.PodDisruptionBudget {
	out := make([]policyv1.PodDisruptionBudget, 0, len(pdbs))
	for i := range pdbs {
		if !IsJobBudget(&pdbs[i]) {
			out = append(out, pdbs[i])
		}
	}
	return out
}
