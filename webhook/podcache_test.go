package webhook

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/test/fixture"
)

func TestRunnerPodCacheHoldsOnlyRunnerPods(t *testing.T) {
	legacy := fixture.MakeLegacyRunnerPod("ci", "legacy-1").Org("acme").Running().Obj()
	scaleSet := fixture.MakeScaleSetRunnerPod("ci", "set-1").Running().Obj()
	web := fixture.MakePod("ci", "web").Running().Obj()
	cs := kubefake.NewClientset(legacy, scaleSet, web)
	c, err := NewRunnerPodCache(cs, DefaultRunnerPods(), nil)
	if err != nil {
		t.Fatal(err)
	}
	startPodCache(t, c, "ci")
	tests := map[string]struct {
		ns, name string
		found    bool
	}{
		"legacy runner pod":    {"ci", "legacy-1", true},
		"scale-set runner pod": {"ci", "set-1", true},
		"ordinary pod":         {"ci", "web", false},
		"no such pod":          {"ci", "nope", false},
		"other namespace":      {"other", "legacy-1", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod, found, synced := c.Get(tc.ns, tc.name)
			if !synced || found != tc.found || (found && pod.Name != tc.name) {
				t.Errorf("Get(%s/%s) = %v, found %v, synced %v; want found %v", tc.ns, tc.name, pod, found, synced, tc.found)
			}
		})
	}
}

// With runner namespaces the cache lists and watches in those namespaces only
// (a Role there is enough), one informer per spec and namespace, and answers
// a pod elsewhere as not a runner pod, synced, whatever the cluster holds.
func TestRunnerPodCacheWatchesOnlyRunnerNamespaces(t *testing.T) {
	cs := kubefake.NewClientset(
		fixture.MakeLegacyRunnerPod("team-a", "legacy-a").Org("acme").Running().Obj(),
		fixture.MakeScaleSetRunnerPod("team-b", "set-b").Running().Obj(),
		fixture.MakeLegacyRunnerPod("elsewhere", "legacy-x").Org("acme").Running().Obj(),
		fixture.MakePod("team-a", "web").Running().Obj(),
	)
	// A listed namespace given twice is watched once.
	c, err := NewRunnerPodCache(cs, DefaultRunnerPods(), []string{"team-a", "team-b", "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(c.informers), len(DefaultRunnerPods())*2; got != want {
		t.Errorf("%d informers, want %d (one per runner pod spec and namespace)", got, want)
	}
	startPodCache(t, c, "team-a", "team-b")
	tests := map[string]struct {
		ns, name string
		found    bool
	}{
		"legacy runner pod in a runner namespace":    {"team-a", "legacy-a", true},
		"scale-set runner pod in a runner namespace": {"team-b", "set-b", true},
		"runner pod of another runner namespace":     {"team-b", "legacy-a", false},
		"ordinary pod":                               {"team-a", "web", false},
		"runner pod outside the runner namespaces":   {"elsewhere", "legacy-x", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod, found, synced := c.Get(tc.ns, tc.name)
			if !synced || found != tc.found || (found && pod.Name != tc.name) {
				t.Errorf("Get(%s/%s) = %v, found %v, synced %v; want found %v, synced", tc.ns, tc.name, pod, found, synced, tc.found)
			}
		})
	}
	watched := map[string]bool{}
	for _, a := range cs.Actions() {
		if a.GetResource().Resource != "pods" || (a.GetVerb() != "list" && a.GetVerb() != "watch") {
			continue
		}
		watched[a.GetNamespace()] = true
		if ns := a.GetNamespace(); ns != "team-a" && ns != "team-b" {
			t.Errorf("%s pods in namespace %q, want only the runner namespaces", a.GetVerb(), ns)
		}
	}
	if !watched["team-a"] || !watched["team-b"] {
		t.Errorf("listed or watched pods in %v, want team-a and team-b", watched)
	}
}

// startPodCache runs the cache until the test ends and waits until it
// answers for the pods of namespaces.
func startPodCache(t *testing.T, c *RunnerPodCache, namespaces ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for _, ns := range namespaces {
		for {
			if _, _, synced := c.Get(ns, "any"); synced {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cache never synced for namespace %s", ns)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// staticRunnerPods is a synced cache holding the given runner pods.
type staticRunnerPods map[string]*corev1.Pod

func (s staticRunnerPods) Get(ns, name string) (*corev1.Pod, bool, bool) {
	p, ok := s[ns+"/"+name]
	return p, ok, true
}

// The runner pod cache can only say that it holds a pod: an eviction of a
// runner pod it does not hold (created a moment ago, missed by a stalled
// watch) is still guarded, a pod that is no runner goes after one read, and
// only a failed read goes to the on-error policy.
func TestEvictionReadsPodsTheCacheDoesNotHold(t *testing.T) {
	runner := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	web := fixture.MakePod("ci", "web").Running().Obj()
	tests := map[string]struct {
		pod        *corev1.Pod
		namespaces []string
		failRead   bool
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
					return c.Get(ctx, key, obj, opts...)
				},
			}).Build()
			cfg := DefaultConfig()
			cfg.RunnerNamespaces = tc.namespaces
			gh := &countingGitHub{}
			// A synced cache that holds no pod at all.
			metrics := NewMetrics()
			h, err := NewHandler(Options{Config: cfg, GitHub: gh, Pods: pods, RunnerPods: staticRunnerPods{}, Metrics: metrics})
			if err != nil {
				t.Fatal(err)
			}
			req := admission.Request{}
			req.UID, req.Operation, req.Namespace, req.Name = "1", "CREATE", tc.pod.Namespace, tc.pod.Name
			req.Resource.Resource, req.SubResource = "pods", "eviction"
			resp := h.Handle(context.Background(), req)
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
