package disruption

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// guardStub answers for runner pods labelled runner=true; runs maps a pod
// name to its ARC object (nil: a legacy pod).
type guardStub struct {
	runs         map[string]*arc.Runner
	mu           sync.Mutex
	unregistered []string
}

var _ Guard = &guardStub{}

func (g *guardStub) RunnerContainer(pod *corev1.Pod) (string, bool) {
	return "runner", pod.Labels["runner"] == "true"
}

func (g *guardStub) Guards(_ string, l labels.Labels) bool { return l.Get("runner") == "true" }

func (g *guardStub) RunnerRunning(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning
}

func (g *guardStub) Resolve(_ context.Context, pod *corev1.Pod) (webhook.Resolved, error) {
	rn := ghclient.Runner{Scope: ghclient.Scope{Kind: ghclient.ScopeOrg, Name: "acme"}, Name: pod.Name}
	return webhook.Resolved{Runner: rn, Target: webhook.Target{Scope: rn.Scope, Name: rn.Name}, ARC: g.runs[pod.Name]}, nil
}

func (g *guardStub) Unregistered(pod *corev1.Pod, _ webhook.Target) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unregistered = append(g.unregistered, pod.Name)
}

// githubStub answers the DELETE by runner name.
type githubStub struct {
	mu         sync.Mutex
	busy       map[string]bool
	unknown    map[string]bool // GitHub does not know the runner (404)
	deletes    map[string]int
	priorities map[string][]ghclient.Priority
}

func (g *githubStub) Unregister(ctx context.Context, r ghclient.Runner) (ghclient.Outcome, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deletes[r.Name]++
	if g.priorities == nil {
		g.priorities = map[string][]ghclient.Priority{}
	}
	g.priorities[r.Name] = append(g.priorities[r.Name], ghclient.PriorityOf(ctx))
	if g.busy[r.Name] {
		return ghclient.Busy, nil
	}
	if g.unknown[r.Name] {
		return ghclient.NotFound, nil
	}
	return ghclient.Removed, nil
}

// clientEvictor posts evictions through a (fake) client's eviction
// subresource.
type clientEvictor struct{ c client.Client }

var _ evictor = clientEvictor{}

func (e clientEvictor) evict(ctx context.Context, eviction *policyv1.Eviction) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: eviction.Namespace, Name: eviction.Name}}
	return e.c.SubResource("eviction").Create(ctx, pod, eviction)
}

func runnerPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"runner": "true"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func TestDrainReleasesIdleRunnersAndWaitsForBusyOnes(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	other := runnerPod("elsewhere", "n2")
	notRunner := runnerPod("web", "n1")
	notRunner.Labels = nil
	objs := []client.Object{node, runnerPod("idle", "n1"), runnerPod("busy", "n1"), runnerPod("job", "n1"), runnerPod("done", "n1"), other, notRunner}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, podNodeNameIndex, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).Build()
	guard := &guardStub{runs: map[string]*arc.Runner{
		"idle": {Kind: arc.Kind, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "idle"}, UID: "er-idle"},
		"job":  {Kind: arc.Kind, Job: arc.Job{ID: "9", DisplayName: "build", Repository: "acme/app"}},
		"done": {Kind: arc.Kind, Removed: "phase Succeeded"},
	}}
	gh := &githubStub{busy: map[string]bool{"busy": true}, deletes: map[string]int{}}
	rec := events.NewFakeRecorder(20)
	retired := &retireStub{}
	now := time.Unix(1000, 0)
	r := &drainReconciler{cached: c, live: c, evictor: clientEvictor{c}, guard: guard, github: gh, events: rec, said: newOnce(), log: logr.Discard(),
		backoff: newBackoff(time.Second, 15*time.Second, func() time.Time { return now }), now: func() time.Time { return now },
		retirer: NewRetirer(retired, nil, nil, logr.Discard())}

	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}})
	if err != nil {
		t.Fatal(err)
	}
	// The idle runner: unregistered, recorded for the webhook, pod deleted, EphemeralRunner queued.
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ci", Name: "idle"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("idle runner's pod: %v, want deleted", err)
	}
	if len(guard.unregistered) != 1 || guard.unregistered[0] != "idle" {
		t.Errorf("recorded unregistered %v, want [idle]", guard.unregistered)
	}
	if r.retirer.Len() != 1 {
		t.Errorf("%d EphemeralRunners queued for retiring, want 1", r.retirer.Len())
	}
	// The busy one: asked once, kept, and the node comes back at the first backoff.
	if gh.deletes["busy"] != 1 || res.RequeueAfter != time.Second {
		t.Errorf("busy runner asked %d times, requeue after %s; want 1 and 1s", gh.deletes["busy"], res.RequeueAfter)
	}
	for _, name := range []string{"busy", "job", "done", "web"} {
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ci", Name: name}, &corev1.Pod{}); err != nil {
			t.Errorf("pod %s: %v, want kept", name, err)
		}
	}
	// Job fields prove a job, and a runner ARC removed is ARC's: neither is asked.
	for _, name := range []string{"job", "done", "web", "elsewhere"} {
		if gh.deletes[name] != 0 {
			t.Errorf("runner %s asked %d times, want never", name, gh.deletes[name])
		}
	}
	var notes []string
	for len(rec.Events) > 0 {
		notes = append(notes, <-rec.Events)
	}
	all := strings.Join(notes, "\n")
	for _, want := range []string{EventRunnerReleased, EventDrainWaitsForJob + ` node n1 is cordoned; runner "job" of pod ci/job is running job "build" of acme/app`, `runner "busy" of pod ci/busy is running a job`} {
		if !strings.Contains(all, want) {
			t.Errorf("events lack %q:\n%s", want, all)
		}
	}

	// The same node again before the backoff ends: no DELETE, no new Event.
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if gh.deletes["busy"] != 1 || len(rec.Events) != 0 {
		t.Errorf("before the backoff: %d DELETEs, %d new events; want 1 and 0", gh.deletes["busy"], len(rec.Events))
	}
	// The job ends: the next DELETE after the backoff releases it.
	now = now.Add(time.Second)
	gh.busy["busy"] = false
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ci", Name: "busy"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("busy runner's pod after its job: %v, want deleted", err)
	}
	// The first DELETE of each runner can let its pod go; asking again about
	// the one seen busy is a re-check, which yields to those.
	wantPrio := map[string][]ghclient.Priority{
		"idle": {ghclient.PriorityRelease},
		"busy": {ghclient.PriorityRelease, ghclient.PriorityRecheck},
	}
	for name, want := range wantPrio {
		if got := gh.priorities[name]; !slices.Equal(got, want) {
			t.Errorf("DELETEs of %s at %v, want %v", name, got, want)
		}
	}
}

// A legacy runner GitHub does not know may still be registering (config.sh
// runs after its container starts): its pod is kept and asked about again
// until the registration grace ends; a scale-set runner's JIT registration
// exists before its pod, and one with an ID was registered.
func TestDrainWaitsForALegacyRunnerToRegister(t *testing.T) {
	now := time.Unix(10_000, 0)
	started := func(name string, ago time.Duration) *corev1.Pod {
		p := runnerPod(name, "n1")
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "runner", State: corev1.ContainerState{
			Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Add(-ago))}}}}
		return p
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	objs := []client.Object{node, started("young", 30*time.Second), started("old", 5*time.Minute), started("set", 30*time.Second)}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, podNodeNameIndex, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).Build()
	guard := &guardStub{runs: map[string]*arc.Runner{"set": {Kind: arc.Kind, EphemeralRunner: types.NamespacedName{Namespace: "ci", Name: "set"}}}}
	gh := &githubStub{unknown: map[string]bool{"young": true, "old": true, "set": true}, deletes: map[string]int{}}
	r := &drainReconciler{cached: c, live: c, evictor: clientEvictor{c}, guard: guard, github: gh, events: events.NewFakeRecorder(20), said: newOnce(), log: logr.Discard(),
		backoff: newBackoff(time.Second, 15*time.Second, func() time.Time { return now }), now: func() time.Time { return now }}
	exists := func(name string) bool {
		return c.Get(context.Background(), types.NamespacedName{Namespace: "ci", Name: name}, &corev1.Pod{}) == nil
	}
	reconcileNode := func() {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}); err != nil {
			t.Fatal(err)
		}
	}

	reconcileNode()
	if !exists("young") || exists("old") || exists("set") {
		t.Fatalf("pods kept: young %v, old %v, set %v; want only the legacy runner started 30s ago", exists("young"), exists("old"), exists("set"))
	}
	now = now.Add(legacyRegistrationGrace)
	reconcileNode()
	if exists("young") || gh.deletes["young"] != 2 {
		t.Fatalf("after the grace: young kept %v after %d DELETEs; want released at the second", exists("young"), gh.deletes["young"])
	}
}

func TestDrainLeavesASchedulableNodeAlone(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(node, runnerPod("idle", "n1")).
		WithIndex(&corev1.Pod{}, podNodeNameIndex, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).Build()
	gh := &githubStub{busy: map[string]bool{}, deletes: map[string]int{}}
	r := &drainReconciler{cached: c, live: c, evictor: clientEvictor{c}, guard: &guardStub{}, github: gh, events: events.NewFakeRecorder(5), said: newOnce(), log: logr.Discard(),
		backoff: newBackoff(time.Second, 15*time.Second, time.Now), now: time.Now}
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if gh.deletes["idle"] != 0 {
		t.Errorf("a runner of a schedulable node was asked %d times", gh.deletes["idle"])
	}
}

// retireStub counts Retire calls.
type retireStub struct {
	mu    sync.Mutex
	calls int
}

func (r *retireStub) Retire(context.Context, *arc.Runner) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	return nil
}

// The NodeClaim is listed live (every NodeClaim of the cluster) at most once
// per reconcile of a node, and not at all once each pod's grace warning is
// said: a drift over many nodes of busy runners must not multiply the lists.
func TestDrainListsNodeClaimsOncePerReconcile(t *testing.T) {
	now := time.Unix(10_000, 0)
	deleted := now.Add(-time.Minute)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{
		Taints: []corev1.Taint{{Key: TaintKarpenterDisrupted, Effect: corev1.TaintEffectNoSchedule}}}}
	objs := []client.Object{node}
	guard := &guardStub{runs: map[string]*arc.Runner{}}
	for i := range 5 {
		name := fmt.Sprintf("job-%d", i)
		objs = append(objs, runnerPod(name, "n1"))
		guard.runs[name] = &arc.Runner{Kind: arc.Kind, Job: arc.Job{ID: strconv.Itoa(i), DisplayName: "build", Repository: "acme/app"}}
	}
	lists := 0
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, podNodeNameIndex, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if u, ok := list.(*unstructured.UnstructuredList); ok && u.GetKind() == NodeClaimGVK().Kind+"List" {
				lists++
				nc := nodeClaim(&deleted, "1h")
				_ = unstructured.SetNestedField(nc.Object, "n1", "status", "nodeName")
				u.Items = []unstructured.Unstructured{*nc}
				return nil
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	rec := events.NewFakeRecorder(50)
	r := &drainReconciler{cached: c, live: c, evictor: clientEvictor{c}, guard: guard, github: &githubStub{deletes: map[string]int{}}, events: rec, said: newOnce(), log: logr.Discard(),
		backoff: newBackoff(time.Second, 15*time.Second, func() time.Time { return now }), now: func() time.Time { return now }}
	for range 3 {
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}); err != nil {
			t.Fatal(err)
		}
	}
	warned := 0
	for len(rec.Events) > 0 {
		if strings.Contains(<-rec.Events, EventJobOutlivesGrace) {
			warned++
		}
	}
	if lists != 1 || warned != 5 {
		t.Fatalf("%d NodeClaim lists in 3 reconciles, %d grace warnings; want 1 list and a warning for each of the 5 pods", lists, warned)
	}
}

// The drain holds to PodDisruptionBudgets as a drain does: a runner whose pod
// a budget keeps is left registered (unregistering it first would leave a
// pod with a dead runner), and a released runner's pod goes through the
// eviction subresource, whose 429 keeps it for another try.
func TestDrainHoldsToPodDisruptionBudgets(t *testing.T) {
	budget := func(allowed int32) *policyv1.PodDisruptionBudget {
		zero := intstr.FromInt32(0)
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "runners", Generation: 1},
			Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"runner": "true"}}},
			Status:     policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: allowed, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1},
		}
	}
	for name, tc := range map[string]struct {
		budget      *policyv1.PodDisruptionBudget
		evictionErr error // what the eviction subresource answers; nil: it evicts
		wantAsked   int   // DELETEs of the runner on GitHub
		wantKept    bool  // the pod is still there
		wantRequeue bool
		wantEvent   string
		// notGranted: SelfSubjectAccessReviews deny pods/eviction.
		notGranted bool
		// wantHeld: the budget's disruption stays reserved afterwards (a
		// runner unregistered, its pod evicted or still to be).
		wantHeld bool
	}{
		"no budget: released through the eviction subresource": {wantAsked: 1},
		"a budget that allows a disruption: released":          {budget: budget(1), wantAsked: 1},
		"a budget that allows none: the runner is left registered": {
			budget: budget(0), wantKept: true, wantRequeue: true, wantEvent: EventDrainWaitsForPDB + " node n1 is cordoned; PodDisruptionBudget runners allows no disruption of pod ci/idle",
		},
		"the eviction is refused (429): the pod is kept and evicted again later": {
			budget: budget(1), evictionErr: apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10),
			wantAsked: 1, wantKept: true, wantRequeue: true, wantHeld: true,
		},
		"pods/eviction not granted: the pod is deleted": {notGranted: true, wantAsked: 1},
		// Granted, so the 403 is a policy's (another webhook's) refusal: a
		// DELETE would bypass it and the budgets.
		"the eviction is refused (403): the pod is kept and an Event on it says why": {
			evictionErr: apierrors.NewForbidden(schema.GroupResource{Resource: "pods/eviction"}, "idle", errors.New(`admission webhook "deny.example.com" denied the request`)),
			wantAsked:   1, wantKept: true, wantRequeue: true, wantEvent: EventEvictionRefused + " node n1 is cordoned; runner \"idle\" of pod ci/idle is unregistered on GitHub, but the eviction of the pod was refused",
		},
	} {
		t.Run(name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
			pod := runnerPod("idle", "n1")
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			objs := []client.Object{node, pod}
			if tc.budget != nil {
				objs = append(objs, tc.budget)
			}
			evictions, unmarked := 0, 0
			c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).
				WithIndex(&corev1.Pod{}, podNodeNameIndex, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
				WithInterceptorFuncs(interceptor.Funcs{SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
					if sub == "eviction" {
						evictions++
						if _, ok := subObj.GetAnnotations()[webhook.EvictionReleasedAnnotation]; !ok {
							unmarked++
						}
						if tc.evictionErr != nil {
							return tc.evictionErr
						}
					}
					return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
				}, Create: accessReviews(!tc.notGranted)}).Build()
			gh := &githubStub{deletes: map[string]int{}}
			rec := events.NewFakeRecorder(20)
			now := time.Unix(1000, 0)
			r := &drainReconciler{cached: c, live: c, evictor: clientEvictor{c}, guard: &guardStub{}, github: gh, events: rec, said: newOnce(), log: logr.Discard(),
				backoff: newBackoff(time.Second, 15*time.Second, func() time.Time { return now }), now: func() time.Time { return now },
				grants: newEvictionGrants(func() time.Time { return now }), budgets: webhook.NewBudgetLedger(webhook.DefaultWebhookTimeout, func() time.Time { return now })}

			res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}})

			if err != nil {
				t.Fatal(err)
			}
			if unmarked > 0 {
				t.Errorf("%d evictions lack %s: another replica could refuse them on a listing taken during the job", unmarked, webhook.EvictionReleasedAnnotation)
			}
			if tc.budget != nil {
				b := tc.budget.DeepCopy()
				if held := r.budgets.InFlight(b, r.budgets.SeePods(context.Background(), c, "ci")) > 0; held != tc.wantHeld {
					t.Errorf("the budget's disruption held = %v, want %v", held, tc.wantHeld)
				}
			}
			if gh.deletes["idle"] != tc.wantAsked {
				t.Errorf("runner asked %d times on GitHub, want %d", gh.deletes["idle"], tc.wantAsked)
			}
			err = c.Get(context.Background(), types.NamespacedName{Namespace: "ci", Name: "idle"}, &corev1.Pod{})
			if kept := err == nil; kept != tc.wantKept {
				t.Errorf("pod kept = %v (%v), want %v", kept, err, tc.wantKept)
			}
			if tc.wantAsked > 0 && !tc.notGranted && evictions != 1 {
				t.Errorf("%d evictions, want the pod's removal to go through the eviction subresource once", evictions)
			}
			if (res.RequeueAfter > 0) != tc.wantRequeue {
				t.Errorf("requeue after %s, want a requeue: %v", res.RequeueAfter, tc.wantRequeue)
			}
			var notes []string
			for len(rec.Events) > 0 {
				notes = append(notes, <-rec.Events)
			}
			if all := strings.Join(notes, "\n"); tc.wantEvent != "" && !strings.Contains(all, tc.wantEvent) {
				t.Errorf("events lack %q:\n%s", tc.wantEvent, all)
			}
		})
	}
}

// accessReviews answers SelfSubjectAccessReviews with allowed, and creates
// every other object.
func accessReviews(allowed bool) func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	return func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if review, ok := obj.(*authorizationv1.SelfSubjectAccessReview); ok {
			review.Status.Allowed = allowed
			return nil
		}
		return c.Create(ctx, obj, opts...)
	}
}

// Idle runners on a draining node under one budget that allows a single
// disruption: the drain releases them one at a time, counting its own
// evictions, and leaves the rest registered until the budget allows more
// (the API server would refuse their evictions after the unregister).
func TestDrainCountsItsReleasesUnderABudget(t *testing.T) {
	objs, pdb := idleNodeUnderBudget(1)
	r, gh := budgetDrain(budgetEvictions(objs, pdb, nil))
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	asked := 0
	for _, n := range gh.deletes {
		asked += n
	}
	if asked != 1 {
		t.Errorf("%d runners unregistered under a budget allowing one disruption, want 1: %v", asked, gh.deletes)
	}
}

// Idle runners under a budget that allows all of them: their evictions
// still go one at a time, as the API server retries an eviction whose
// budget write conflicts with another's only after 500 ms.
func TestDrainEvictsOneAtATimeUnderABudget(t *testing.T) {
	objs, pdb := idleNodeUnderBudget(3)
	// Each eviction waits a moment for another to arrive while it is in
	// flight; one that does is two at once.
	var inFlight, most atomic.Int32
	c := budgetEvictions(objs, pdb, func() {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for deadline := time.Now().Add(200 * time.Millisecond); n == 1 && inFlight.Load() == 1 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		most.Store(max(most.Load(), inFlight.Load()))
	})
	r, gh := budgetDrain(c)
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if len(gh.deletes) != 3 {
		t.Fatalf("%d runners released, want all 3: %v", len(gh.deletes), gh.deletes)
	}
	if n := most.Load(); n != 1 {
		t.Errorf("%d evictions under one budget in flight at once, want 1", n)
	}
}

// idleNodeUnderBudget is cordoned node n1 with three idle, Ready runner pods
// and a budget over them that allows allowed disruptions.
func idleNodeUnderBudget(allowed int32) ([]client.Object, *policyv1.PodDisruptionBudget) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	maxUnavailable := intstr.FromInt32(allowed)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "runners", Generation: 1},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &maxUnavailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"runner": "true"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: allowed, CurrentHealthy: 3, DesiredHealthy: 3 - allowed, ExpectedPods: 3},
	}
	objs := []client.Object{node, pdb}
	for _, name := range []string{"idle-1", "idle-2", "idle-3"} {
		pod := runnerPod(name, "n1")
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		objs = append(objs, pod)
	}
	return objs, pdb
}

// budgetEvictions is a client whose eviction subresource runs as the API
// server's: a 429 when pdb allows no disruption, else the budget charged,
// then the pod deleted. during, when set, runs inside each eviction.
func budgetEvictions(objs []client.Object, pdb *policyv1.PodDisruptionBudget, during func()) client.Client {
	var evictMu sync.Mutex
	return fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).WithStatusSubresource(&policyv1.PodDisruptionBudget{}).
		WithIndex(&corev1.Pod{}, podNodeNameIndex, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if during != nil {
				during()
			}
			evictMu.Lock()
			defer evictMu.Unlock()
			budget := &policyv1.PodDisruptionBudget{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pdb), budget); err != nil {
				return err
			}
			if budget.Status.DisruptionsAllowed < 1 {
				return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
			}
			budget.Status.DisruptionsAllowed--
			budget.Status.DisruptedPods = map[string]metav1.Time{obj.GetName(): metav1.Now()}
			if err := c.Status().Update(ctx, budget); err != nil {
				return err
			}
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		}}).Build()
}

// budgetDrain is a drain over c with a budget ledger, and its GitHub.
func budgetDrain(c client.Client) (*drainReconciler, *githubStub) {
	gh := &githubStub{deletes: map[string]int{}}
	now := time.Unix(1000, 0)
	return &drainReconciler{cached: c, live: c, evictor: clientEvictor{c}, guard: &guardStub{}, github: gh, events: events.NewFakeRecorder(50), said: newOnce(), log: logr.Discard(),
		backoff: newBackoff(time.Second, 15*time.Second, func() time.Time { return now }), now: func() time.Time { return now },
		budgets: webhook.NewBudgetLedger(webhook.DefaultWebhookTimeout, func() time.Time { return now }), budgetLocks: newKeyedLocks(), evictLocks: newKeyedLocks()}, gh
}

// Another webhook refuses evictions in the namespace: the drain keeps the
// refused pod (never deleting it past that policy), and unregisters no
// other runner there until an eviction is admitted again.
func TestDrainStopsUnregisteringWhereEvictionsAreRefused(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	objs := []client.Object{node}
	for _, name := range []string{"idle-1", "idle-2", "idle-3"} {
		objs = append(objs, runnerPod(name, "n1"))
	}
	refuse := true
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, podNodeNameIndex, func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).
		WithInterceptorFuncs(interceptor.Funcs{SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if sub == "eviction" && refuse {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "pods/eviction"}, obj.GetName(), errors.New(`admission webhook "deny.example.com" denied the request`))
			}
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		}, Create: accessReviews(true)}).Build()
	gh := &githubStub{deletes: map[string]int{}, unknown: map[string]bool{}}
	now := time.Unix(1000, 0)
	r := &drainReconciler{cached: c, live: c, evictor: clientEvictor{c}, guard: &guardStub{}, github: gh, events: events.NewFakeRecorder(100), said: newOnce(), log: logr.Discard(),
		backoff: newBackoff(time.Second, 15*time.Second, func() time.Time { return now }), now: func() time.Time { return now },
		grants: newEvictionGrants(func() time.Time { return now }), budgetLocks: newKeyedLocks()}
	reconcileNode := func() {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: "n1"}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		reconcileNode()
		now = now.Add(time.Minute)
	}
	unregistered := 0
	for name, n := range gh.deletes {
		if n > 0 {
			unregistered++
		}
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ci", Name: name}, &corev1.Pod{}); err != nil {
			t.Errorf("pod %s: %v; want it kept while evictions are refused", name, err)
		}
	}
	if unregistered != 1 {
		t.Errorf("%d runners unregistered while evictions are refused, want 1: %v", unregistered, gh.deletes)
	}
}

// The drain's eviction comes back with the first answer: a 429 carrying
// Retry-After (runner-guard's own refusals carry one) is the drain's to
// retry, not client-go's, which would sleep through it holding the
// budget's eviction lock.
func TestOnceEvictorDoesNotRetry(t *testing.T) {
	var posts atomic.Int32
	var got policyv1.Eviction
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/api/v1/namespaces/ci/pods/idle/eviction" {
			http.Error(w, "unexpected "+req.Method+" "+req.URL.Path, http.StatusNotFound)
			return
		}
		posts.Add(1)
		if err := json.NewDecoder(req.Body).Decode(&got); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "10")
		w.WriteHeader(http.StatusTooManyRequests)
		_ = json.NewEncoder(w).Encode(apierrors.NewTooManyRequests("runner busy", 10).Status())
	}))
	defer srv.Close()
	e, err := newOnceEvictor(&rest.Config{Host: srv.URL}, srv.Client(), clientgoscheme.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	uid := types.UID("uid-idle")
	err = e.evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "idle"},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}})
	if !apierrors.IsTooManyRequests(err) || posts.Load() != 1 {
		t.Fatalf("evict = %v after %d requests, want the 429 after 1", err, posts.Load())
	}
	if got.APIVersion != "policy/v1" || got.Kind != "Eviction" || got.DeleteOptions == nil || got.DeleteOptions.Preconditions == nil || *got.DeleteOptions.Preconditions.UID != uid {
		t.Errorf("posted %+v, want a policy/v1 Eviction with the pod's UID as precondition", got)
	}
}
