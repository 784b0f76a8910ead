package webhook

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

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

// An eviction of a pod that is not a runner pod never fails because the pod
// could not be read: the runner pod cache answers without a read.
func TestEvictionOfNonRunnerPodNeedsNoRead(t *testing.T) {
	failing := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("connection refused")
		},
	}).Build()
	runner := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	h, err := NewHandler(Options{Config: DefaultConfig(), GitHub: unusedGitHub{}, Pods: failing,
		RunnerPods: staticRunnerPods{"ci/runner-1": runner}})
	if err != nil {
		t.Fatal(err)
	}
	evict := func(pod *corev1.Pod) admission.Response {
		t.Helper()
		req := admission.Request{}
		req.UID, req.Operation, req.Namespace, req.Name = "1", "CREATE", pod.Namespace, pod.Name
		req.Resource.Resource, req.SubResource = "pods", "eviction"
		return h.Handle(context.Background(), req)
	}
	if resp := evict(fixture.MakePod("ci", "web").Obj()); !resp.Allowed || resp.Result.Message != "not a runner pod" {
		t.Errorf("eviction of a non-runner pod with the API unreachable: %+v, want allowed as not a runner pod", resp.Result)
	}
	// A runner pod is still read live, and a failed read is refused (429).
	if resp := evict(runner); resp.Allowed || resp.Result.Code != http.StatusTooManyRequests {
		t.Errorf("eviction of a runner pod with the API unreachable: %+v, want a 429", resp.Result)
	}
}
