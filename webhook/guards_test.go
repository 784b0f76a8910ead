package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runner-guard/runner-guard/test/fixture"
)

// Guards, asked with a pod's namespace and labels alone (the controllers'
// watch predicates), gives RunnerContainer's verdict for every kind of pod.
func TestGuardsAgreesWithRunnerContainer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ExemptNamespaces = []string{"kube-system"}
	cfg.RunnerNamespaces = []string{"ci", "kube-system"}
	h, err := NewHandler(Options{Config: cfg, GitHub: unusedGitHub{}, Pods: fake.NewClientBuilder().Build()})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"legacy runner pod":                  {fixture.MakeLegacyRunnerPod("ci", "r1").Obj(), true},
		"scale-set runner pod":               {fixture.MakeScaleSetRunnerPod("ci", "r2").Obj(), true},
		"plain pod":                          {fixture.MakePod("ci", "web").Obj(), false},
		"runner pod, exempt":                 {fixture.MakeLegacyRunnerPod("kube-system", "r3").Obj(), false},
		"runner pod, not a runner namespace": {fixture.MakeLegacyRunnerPod("other", "r4").Obj(), false},
	} {
		t.Run(name, func(t *testing.T) {
			_, viaPod := h.RunnerContainer(tc.pod)
			viaLabels := h.Guards(tc.pod.Namespace, labels.Set(tc.pod.Labels))
			if viaPod != tc.want || viaLabels != tc.want {
				t.Errorf("RunnerContainer %v, Guards %v, want %v", viaPod, viaLabels, tc.want)
			}
		})
	}
}
