package rerun

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The caches keep only what the lost-job watch reads: runner pods are most
// of a cluster's pods, and a full pod costs kilobytes.

// trimNode keeps what lossCause reads.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		TypeMeta:   n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, DeletionTimestamp: n.DeletionTimestamp},
		Spec:       corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
		Status:     corev1.NodeStatus{Conditions: n.Status.Conditions},
	}, nil
}

// trimEphemeralRunner keeps the job fields and phase, and the URL and
// Secret of the runner's GitHub config (its scope and credentials).
func trimEphemeralRunner(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	for _, f := range []string{"jobRepositoryName", "workflowRunId", "runnerName", "phase"} {
		if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status", f); found {
			if err := unstructured.SetNestedField(out.Object, v, "status", f); err != nil {
				return nil, fmt.Errorf("trim EphemeralRunner %s/%s: %w", u.GetNamespace(), u.GetName(), err)
			}
		}
	}
	for _, f := range []string{"githubConfigUrl", "githubConfigSecret"} {
		if v, found, _ := unstructured.NestedString(u.Object, "spec", f); found {
			if err := unstructured.SetNestedField(out.Object, v, "spec", f); err != nil {
				return nil, fmt.Errorf("trim EphemeralRunner %s/%s: %w", u.GetNamespace(), u.GetName(), err)
			}
		}
	}
	return out, nil
}
