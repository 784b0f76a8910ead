package disruption

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// trimPod keeps, of a pod in the controllers' cache, only what the hint and
// drain controllers and the runner resolver read: its metadata (labels,
// annotations, owners, deletion), the node it runs on, its containers' names
// and environment (a legacy runner's scope is in RUNNER_ORG and the like),
// and its phase, start time, conditions and container states. A cluster's
// pods are most of what the cache holds, and the rest (volumes, probes,
// resources, images, tolerations) is most of each pod: 10,000 pods must fit
// in the container's memory limit beside the webhook's load.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{TypeMeta: pod.TypeMeta}
	out.ObjectMeta = metav1.ObjectMeta{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		Generation: pod.Generation, CreationTimestamp: pod.CreationTimestamp,
		DeletionTimestamp: pod.DeletionTimestamp, DeletionGracePeriodSeconds: pod.DeletionGracePeriodSeconds,
		Labels: pod.Labels, Annotations: pod.Annotations, OwnerReferences: pod.OwnerReferences, Finalizers: pod.Finalizers,
	}
	out.Spec.NodeName = pod.Spec.NodeName
	for _, c := range pod.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Env: c.Env})
	}
	out.Status = corev1.PodStatus{
		Phase: pod.Status.Phase, StartTime: pod.Status.StartTime, Conditions: pod.Status.Conditions,
		ContainerStatuses: make([]corev1.ContainerStatus, 0, len(pod.Status.ContainerStatuses)),
	}
	for _, cs := range pod.Status.ContainerStatuses {
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: cs.Name, State: cs.State, Ready: cs.Ready, RestartCount: cs.RestartCount, Started: cs.Started,
		})
	}
	return out, nil
}
