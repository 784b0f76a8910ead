package webhook

import (
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// matchRunnerPod returns the first runner pod spec whose selector matches the
// pod's labels, or nil for a pod that is not a runner pod.
func matchRunnerPod(pod *corev1.Pod, specs []RunnerPodSpec) *RunnerPodSpec {
	if pod == nil {
		return nil
	}
	return matchRunnerLabels(labels.Set(pod.Labels), specs)
}

// matchRunnerLabels is matchRunnerPod for a pod's labels alone.
func matchRunnerLabels(podLabels labels.Labels, specs []RunnerPodSpec) *RunnerPodSpec {
	for i := range specs {
		if specs[i].selector != nil && specs[i].selector.Matches(podLabels) {
			return &specs[i]
		}
	}
	return nil
}

// labelsOf is the pod's label set.
func labelsOf(pod *corev1.Pod) labels.Set { return labels.Set(pod.Labels) }

// runnerContainerStatus returns the status of the runner container, nil when
// the pod reports none for it.
func runnerContainerStatus(pod *corev1.Pod, container string) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == container {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// runnerContainerRunning reports whether the runner container is running: only
// then can its process hold a job.
func runnerContainerRunning(pod *corev1.Pod, container string) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Running != nil
		}
	}
	return false
}

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

// disrupted reports a pod the control plane marked Failed with a
// DisruptionTarget condition (pod GC, taint eviction) rather than one whose
// containers ended.
func disrupted(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodFailed {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
