package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/test/fixture"
)

// Every evicted pod is read live: an informer cache can only say that it
// holds a pod, never that a pod is no runner pod (one created a moment ago,
// or missed by a stalled watch, is absent from it). A runner pod is guarded, a
// pod that is no runner goes after one read, and only a failed read goes to
// the on-error policy. A review in flight when the server is told to stop (a
// rollout's SIGTERM ends controller-runtime's request contexts) still reads
// the pod and decides.
func TestEvictionReadsEveryPodLive(t *testing.T) {
	runner := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	web := fixture.MakePod("ci", "web").Running().Obj()
	tests := map[string]struct {
		pod        *corev1.Pod
		namespaces []string
		failRead   bool
		stopping   bool
		reason     Reason
		allowed    bool
		reads      int
		asked      int
	}{
		"runner pod missing from the cache": {pod: runner, reason: ReasonRunnerBusy, reads: 1, asked: 1},
		"pod that is no runner":             {pod: web, reason: ReasonNotRunnerPod, allowed: true, reads: 1},
		"pod the API server has not":        {pod: fixture.MakePod("ci", "gone").Obj(), reason: ReasonPodNotFound, allowed: true, reads: 1},
		"failed read":                       {pod: runner, failRead: true, reason: ReasonPodLookupFailed, reads: 1},
		"pod outside the runner namespaces": {pod: runner, namespaces: []string{"team-a"}, reason: ReasonNotRunnerPod, allowed: true},
		"pod inside the runner namespaces":  {pod: runner, namespaces: []string{"ci"}, reason: ReasonRunnerBusy, reads: 1, asked: 1},
		"server stopping":                   {pod: runner, stopping: true, reason: ReasonRunnerBusy, reads: 1, asked: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			reads := 0
			pods := fake.NewClientBuilder().WithObjects(runner.DeepCopy(), web.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*corev1.Pod); ok {
						reads++
						if tc.failRead {
							return errors.New("connection refused")
						}
					}
					if err := ctx.Err(); err != nil {
						return err // as client-go does
					}
					return c.Get(ctx, key, obj, opts...)
				},
			}).Build()
			cfg := DefaultConfig()
			cfg.RunnerNamespaces = tc.namespaces
			gh := &countingGitHub{}
			metrics := NewMetrics()
			h, err := NewHandler(Options{Config: cfg, GitHub: gh, Pods: pods, Metrics: metrics})
			if err != nil {
				t.Fatal(err)
			}
			req := admission.Request{}
			req.UID, req.Operation, req.Namespace, req.Name = "1", "CREATE", tc.pod.Namespace, tc.pod.Name
			req.Resource.Resource, req.SubResource = "pods", "eviction"
			ctx, stop := context.WithCancel(context.Background())
			if tc.stopping {
				stop()
			}
			defer stop()
			resp := h.Handle(ctx, req)
			if resp.Allowed != tc.allowed {
				t.Errorf("allowed %v (%+v), want %v", resp.Allowed, resp.Result, tc.allowed)
			}
			if !tc.allowed && (resp.Result.Code != http.StatusTooManyRequests || !strings.HasSuffix(resp.Result.Message, "[reason: "+string(tc.reason)+"]")) {
				t.Errorf("refusal %+v, want a 429 with reason %s", resp.Result, tc.reason)
			}
			decision := "deny"
			if tc.allowed {
				decision = "allow"
			}
			if n := testutil.ToFloat64(metrics.Decisions.WithLabelValues("evict", decision, string(tc.reason))); n != 1 {
				t.Errorf("%v decisions %s/%s counted, want 1 (response %+v)", n, decision, tc.reason, resp.Result)
			}
			if reads != tc.reads || gh.calls != tc.asked {
				t.Errorf("%d pod reads and %d GitHub requests, want %d and %d", reads, gh.calls, tc.reads, tc.asked)
			}
		})
	}
}

// With runnerNamespaces set, a delete or an eviction elsewhere reads nothing
// (runner-guard has no grant there) and never waits on it.
func TestOutsideRunnerNamespacesNothingIsRead(t *testing.T) {
	runner := fixture.MakeLegacyRunnerPod("elsewhere", "runner-1").Org("acme").Running().Obj()
	for _, evict := range []bool{false, true} {
		reads := 0
		pods := fake.NewClientBuilder().WithObjects(runner.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				reads++
				return errors.New("forbidden: no Role in this namespace")
			},
		}).Build()
		cfg := DefaultConfig()
		cfg.RunnerNamespaces = []string{"team-a"}
		gh := &countingGitHub{}
		h, err := NewHandler(Options{Config: cfg, GitHub: gh, Pods: pods})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := fixture.Review{Pod: runner, Evict: evict}.JSON()
		if err != nil {
			t.Fatal(err)
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(raw, &review); err != nil {
			t.Fatal(err)
		}
		resp := h.Handle(context.Background(), admission.Request{AdmissionRequest: *review.Request})
		if !resp.Allowed || reads != 0 || gh.calls != 0 {
			t.Errorf("evict=%v: allowed %v (%+v) after %d reads and %d GitHub requests; want allowed with none", evict, resp.Allowed, resp.Result, reads, gh.calls)
		}
	}
}
