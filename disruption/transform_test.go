package disruption

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/runner-guard/runner-guard/test/fixture"
)

// The cached pod keeps what the controllers and the resolver read, and drops
// the rest of the spec and status.
func TestTrimPodKeepsWhatTheControllersRead(t *testing.T) {
	full := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").RunnerID(7).Node("n1").
		Annotation(AnnotationDoNotDisrupt, "true").Running().Obj()
	full.Spec.Volumes = []corev1.Volume{{Name: "work"}}
	full.Spec.Containers[0].Image = "runner:1"
	full.Spec.Tolerations = []corev1.Toleration{{Key: "k"}}
	full.Status.ContainerStatuses[0].Image = "runner:1"

	got, err := trimPod(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	pod := got.(*corev1.Pod)
	for what, same := range map[string]bool{
		"labels":           equality.Semantic.DeepEqual(pod.Labels, full.Labels),
		"annotations":      equality.Semantic.DeepEqual(pod.Annotations, full.Annotations),
		"owners":           equality.Semantic.DeepEqual(pod.OwnerReferences, full.OwnerReferences),
		"node":             pod.Spec.NodeName == "n1",
		"container env":    len(pod.Spec.Containers) == 1 && equality.Semantic.DeepEqual(pod.Spec.Containers[0].Env, full.Spec.Containers[0].Env),
		"container state":  len(pod.Status.ContainerStatuses) == 1 && pod.Status.ContainerStatuses[0].State.Running != nil,
		"phase":            pod.Status.Phase == corev1.PodRunning,
		"volumes dropped":  pod.Spec.Volumes == nil,
		"image dropped":    pod.Spec.Containers[0].Image == "" && pod.Status.ContainerStatuses[0].Image == "",
		"tolerations gone": pod.Spec.Tolerations == nil,
	} {
		if !same {
			t.Errorf("%s: not as the controllers need it", what)
		}
	}
	if other, _ := trimPod("not a pod"); other != "not a pod" {
		t.Errorf("trimPod changed a non-pod: %v", other)
	}
}
