package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

// scenario is one test's namespace and GitHub scope.
type scenario struct {
	t     *testing.T
	ctx   context.Context
	ns    string
	scope ghclient.Scope
}

// newScenario makes a namespace and an organization (on the fake GitHub too)
// named after the test.
func newScenario(t *testing.T, name string) *scenario {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s := &scenario{t: t, ctx: ctx, ns: "e2e-" + name}
	var err error
	if s.scope, err = env.NewTenant(ctx, name, s.ns); err != nil {
		t.Fatal(err)
	}
	return s
}

// newBusyAndIdle is newScenario with two runner pods, runner-busy running
// a job and runner-idle not.
func newBusyAndIdle(t *testing.T, name string) *scenario {
	t.Helper()
	s := newScenario(t, name)
	s.runnerPod("runner-busy", true, true)
	s.runnerPod("runner-idle", false, true)
	return s
}

// runnerPod registers a runner on the fake GitHub (busy or idle) and creates
// its running pod. withID plays ARC's legacy controller fully: a Runner named
// like the pod (spec scope from s.scope) controls it and the pod carries the
// runner ID annotation, which runner-guard trusts only on such a pod, so a
// decision costs exactly one GitHub request. Where the cluster does not serve
// the Runner kind (an external cluster without the test CRDs) the pod gets
// the annotation alone, and runner-guard checks that ID with GitHub first.
func (s *scenario) runnerPod(name string, busy, withID bool) *corev1.Pod {
	s.t.Helper()
	id := env.GitHub.AddRunner(s.scope, name)
	env.GitHub.SetBusy(s.scope, name, busy)
	pod := legacyRunnerPod(s.ns, name, s.scope)
	if withID {
		pod.Annotations = map[string]string{"actions-runner/id": fmt.Sprint(id)}
		if legacyRunnersServed(s.t) {
			pod = ownedBy(pod, s.legacyRunner(name, s.scope))
		} else {
			s.t.Logf("the cluster serves no %s: pod %s carries the runner ID without a Runner", legacyRunners.GroupResource(), name)
		}
	}
	return s.create(pod)
}

// legacyRunners is ARC's legacy Runner (the CRD in testdata/crds).
var legacyRunners = schema.GroupVersionResource{Group: "actions.summerwind.dev", Version: "v1alpha1", Resource: "runners"}

// legacyRunnersServed reports whether the API server serves legacyRunners:
// the local harness installs testdata/crds; an external cluster may not.
func legacyRunnersServed(t *testing.T) bool {
	t.Helper()
	list, err := env.Client.Discovery().ServerResourcesForGroupVersion(legacyRunners.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("discovery of %s: %v", legacyRunners.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == legacyRunners.Resource {
			return true
		}
	}
	return false
}

// legacyRunner creates ARC's legacy Runner named name in the scenario's
// namespace, registered (spec) in scope, as ARC's RunnerDeployment does.
func (s *scenario) legacyRunner(name string, scope ghclient.Scope) *fixture.LegacyRunnerWrapper {
	s.t.Helper()
	w := fixture.MakeLegacyRunner(s.ns, name)
	switch scope.Kind {
	case ghclient.ScopeRepo:
		w.Repo(scope.Name)
	case ghclient.ScopeEnterprise:
		w.Enterprise(scope.Name)
	default:
		w.Org(scope.Name)
	}
	want := w.Obj()
	want.SetUID("") // the API server assigns it
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		s.t.Fatal(err)
	}
	created, err := dyn.Resource(legacyRunners).Namespace(s.ns).Create(s.ctx, want, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatalf("create Runner %s/%s: %v", s.ns, name, err)
	}
	return &fixture.LegacyRunnerWrapper{Unstructured: *created}
}

// setLegacyRunnerFinalizers replaces the finalizers of the scenario's legacy
// Runner name (none: nil). ARC's own finalizer keeps a Runner until ARC has
// unregistered its runner; with no ARC here, the test plays it.
func (s *scenario) setLegacyRunnerFinalizers(ctx context.Context, name string, fins ...string) error {
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": fins}})
	if err != nil {
		return err
	}
	_, err = dyn.Resource(legacyRunners).Namespace(s.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// ownedBy makes the legacy Runner the pod's controller (its real UID), as
// ARC's legacy runner controller does.
func ownedBy(pod *corev1.Pod, r *fixture.LegacyRunnerWrapper) *corev1.Pod {
	return (&fixture.PodWrapper{Pod: *pod}).OwnedByLegacyRunner(r).Obj()
}

func (s *scenario) create(pod *corev1.Pod) *corev1.Pod {
	s.t.Helper()
	created, err := env.CreateRunningPod(s.ctx, pod)
	if err != nil {
		s.t.Fatal(err)
	}
	return created
}

// legacyRunnerPod looks like a pod of ARC's legacy RunnerDeployment, without
// its Runner (runnerPod adds one). RUNNER_NAME is the pod's name, as ARC sets
// it; runner-guard names the runner after the pod whatever it says.
func legacyRunnerPod(ns, name string, scope ghclient.Scope) *corev1.Pod {
	env := []corev1.EnvVar{{Name: "RUNNER_NAME", Value: name}}
	switch scope.Kind {
	case ghclient.ScopeRepo:
		env = append(env, corev1.EnvVar{Name: "RUNNER_REPO", Value: scope.Name})
	case ghclient.ScopeOrg:
		env = append(env, corev1.EnvVar{Name: "RUNNER_ORG", Value: scope.Name})
	case ghclient.ScopeEnterprise:
		env = append(env, corev1.EnvVar{Name: "RUNNER_ENTERPRISE", Value: scope.Name})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"actions-runner": "", "runner-deployment-name": "e2e"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "runner", Image: "actions-runner:e2e", Env: env},
			{Name: "docker", Image: "docker:dind"},
		}},
	}
}

// github returns the requests the fake GitHub saw for this scenario's scope.
func (s *scenario) github() []ghfake.Request {
	var out []ghfake.Request
	for _, r := range env.GitHub.Requests() {
		if strings.Contains(r.Path, scopePath(s.scope)) {
			out = append(out, r)
		}
	}
	return out
}

// listings counts the listings of the scenario's scope GitHub answered
// (GET .../actions/runners): what a decision reads first while the
// credential's budget is pressed, and a busy runner's re-check.
func (s *scenario) listings() int {
	n := 0
	for _, r := range s.github() {
		if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/actions/runners") {
			n++
		}
	}
	return n
}

func scopePath(sc ghclient.Scope) string {
	switch sc.Kind {
	case ghclient.ScopeRepo:
		return "/repos/" + sc.Name + "/"
	case ghclient.ScopeEnterprise:
		return "/enterprises/" + sc.Name + "/"
	default:
		return "/orgs/" + sc.Name + "/"
	}
}

func (s *scenario) count(method string) int {
	n := 0
	for _, r := range s.github() {
		if r.Method == method {
			n++
		}
	}
	return n
}

func (s *scenario) registered(name string) bool {
	_, ok := env.GitHub.Runner(s.scope, name)
	return ok
}

// kubectl runs kubectl in the scenario's namespace.
func (s *scenario) kubectl(args ...string) (string, string, error) {
	return env.Kubectl(s.ctx, append([]string{"-n", s.ns}, args...)...)
}

// pod fetches a pod; nil when it is gone.
func (s *scenario) pod(name string) *corev1.Pod {
	s.t.Helper()
	p, err := env.Client.CoreV1().Pods(s.ns).Get(s.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

// requireAlive fails unless the pod exists and is not terminating.
func (s *scenario) requireAlive(name string) {
	s.t.Helper()
	p := s.pod(name)
	if p == nil || p.DeletionTimestamp != nil {
		s.t.Fatalf("pod %s/%s was deleted (or is terminating), want it kept", s.ns, name)
	}
}

// deletionAdmitted says why the pod is not yet gone or admitted for deletion
// (a deletionTimestamp set); nil once it is.
func (s *scenario) deletionAdmitted(name string) error {
	s.t.Helper()
	if p := s.pod(name); p != nil && p.DeletionTimestamp == nil {
		return fmt.Errorf("pod %s/%s still alive", s.ns, name)
	}
	return nil
}

// waitDeletionAdmitted waits until the pod is gone or admitted for deletion.
func (s *scenario) waitDeletionAdmitted(what string, timeout time.Duration, name string) {
	s.t.Helper()
	s.eventually(what, timeout, func() error { return s.deletionAdmitted(name) })
}

// requireDeleting fails unless the pod is gone or admitted for deletion, and
// finishes a graceful deletion as the kubelet would.
func (s *scenario) requireDeleting(name string) {
	s.t.Helper()
	if err := s.deletionAdmitted(name); err != nil {
		s.t.Fatalf("%v, want it deleted", err)
	}
	if err := env.FinishTermination(s.ctx, s.ns, name); err != nil {
		s.t.Fatal(err)
	}
	s.eventually("pod "+name+" gone", 30*time.Second, func() error {
		if s.pod(name) != nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
}

// deleteUntilAdmitted retries kubectl delete of the pod, as a controller
// retries a refused delete, until runner-guard admits it (a minute at most),
// and returns kubectl's stderr of the admitted delete.
func deleteUntilAdmitted(s *scenario, pod string, args ...string) string {
	s.t.Helper()
	var stderr string
	s.eventually("delete of "+pod+" admitted", time.Minute, func() error {
		var err error
		_, stderr, err = s.kubectl(append([]string{"delete", "pod", pod, "--wait=false"}, args...)...)
		if err != nil {
			return fmt.Errorf("%v: %s", err, stderr)
		}
		return nil
	})
	return stderr
}

// waitRefusedWith retries kubectl delete of pod, a try each pace at the
// most (0: as fast as eventually polls), until runner-guard refuses it with
// stderr naming want; an admitted delete fails the test at once.
func (s *scenario) waitRefusedWith(what, pod, want string, timeout, pace time.Duration) {
	s.t.Helper()
	s.eventually(what, timeout, func() error {
		time.Sleep(pace) // the caller's retry pace, not a wait for anything
		_, stderr, err := s.kubectl("delete", "pod", pod, "--wait=false")
		switch {
		case err == nil:
			s.t.Fatalf("delete of %s admitted: %s", pod, stderr)
		case !strings.Contains(stderr, want):
			return fmt.Errorf("refused, not naming %q: %s", want, stderr)
		}
		return nil
	})
}

// eventually polls check until it passes; it fails the test once timeout
// passes or the scenario's context ends.
func (s *scenario) eventually(what string, timeout time.Duration, check func() error) {
	s.t.Helper()
	process.Eventually(s.t, s.ctx, what, timeout, check)
}

// events lists events.k8s.io Events about a pod.
func (s *scenario) events(pod string) []string { return s.eventsAbout(s.ns, "", pod) }

// nodeEvents lists the Events about a Node (they live in the default namespace).
func (s *scenario) nodeEvents(node string) []string {
	return s.eventsAbout(metav1.NamespaceDefault, "Node", node)
}

// drainEvents joins the drain's Events about pods, which it records in
// their namespace; it fails the test when the Node's Events (read in
// default, by anyone who may read Events there) name this namespace.
func (s *scaleSet) drainEvents(pods ...string) string {
	s.t.Helper()
	for _, e := range s.nodeEvents(s.node) {
		if strings.Contains(e, s.ns) {
			s.t.Fatalf("a Node Event names namespace %s (its pods, UIDs or jobs): %s", s.ns, e)
		}
	}
	var evs []string
	for _, pod := range pods {
		evs = append(evs, s.events(pod)...)
	}
	return strings.Join(evs, "\n")
}

// eventsAbout lists the events.k8s.io Events in namespace about the object
// name of kind (any kind when empty), as "type reason action: note".
func (s *scenario) eventsAbout(namespace, kind, name string) []string {
	s.t.Helper()
	list, err := env.Client.EventsV1().Events(namespace).List(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && (kind == "" || e.Regarding.Kind == kind) {
			out = append(out, fmt.Sprintf("%s %s %s: %s", e.Type, e.Reason, e.Action, e.Note))
		}
	}
	return out
}

func (s *scenario) waitForEvent(pod, reason string) string {
	s.t.Helper()
	return s.waitForEventWithin(pod, reason, 20*time.Second)
}

// waitForEventWithin is waitForEvent waiting up to within.
func (s *scenario) waitForEventWithin(pod, reason string, within time.Duration) string {
	s.t.Helper()
	var found string
	s.eventually("event "+reason+" on "+pod, within, func() error {
		for _, e := range s.events(pod) {
			if strings.Contains(e, " "+reason+" ") {
				found = e
				return nil
			}
		}
		return fmt.Errorf("events: %q", s.events(pod))
	})
	return found
}
