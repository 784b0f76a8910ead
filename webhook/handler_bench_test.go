package webhook

import (
	"context"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// BenchmarkHandleFastPath measures decisions that rules 1 to 3 make without GitHub.
func BenchmarkHandleFastPath(b *testing.B) {
	pods := map[string]*corev1.Pod{
		"not-runner":  fixture.MakePod("apps", "web").Label("app", "web").Running().Obj(),
		"terminating": fixture.MakeLegacyRunnerPod("ci", "r1").Org("acme").Running().Terminating().Obj(),
		"not-running": fixture.MakeLegacyRunnerPod("ci", "r2").Org("acme").Pending().Obj(),
	}
	// The fast path never reaches GitHub: a Router without credentials would fail loudly.
	h, err := NewHandler(Options{Config: DefaultConfig(), GitHub: &ghclient.Router{}, Pods: fake.NewClientBuilder().Build(), Metrics: NewMetrics()})
	if err != nil {
		b.Fatal(err)
	}
	for name, pod := range pods {
		raw, _ := json.Marshal(pod)
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "u", Operation: admissionv1.Delete, Namespace: pod.Namespace, Name: pod.Name,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, OldObject: runtime.RawExtension{Raw: raw},
		}}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if resp := h.Handle(context.Background(), req); !resp.Allowed {
					b.Fatalf("denied: %+v", resp.Result)
				}
			}
		})
	}
}
