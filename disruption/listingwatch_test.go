package disruption

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// listingStub is a Listing whose listings the test takes: taken by scope
// name, none held when empty.
type listingStub struct {
	mu    sync.Mutex
	taken map[string]time.Time
	busy  map[string]bool
}

var _ Listing = &listingStub{}

func (l *listingStub) Busy(_ context.Context, r ghclient.Runner) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.taken[r.Scope.Name].IsZero() {
		return false, errNotListed
	}
	return l.busy[r.Name], nil
}

func (l *listingStub) Pressed(ghclient.Runner) bool { return false }

func (l *listingStub) Taken(_ context.Context, r ghclient.Runner) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.taken[r.Scope.Name]
}

func (l *listingStub) Any() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.taken) > 0
}

func (l *listingStub) Refreshes() bool { return false }

func (l *listingStub) take(scope string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.taken == nil {
		l.taken = map[string]time.Time{}
	}
	l.taken[scope] = at
}

func orgRunner(org, name string) ghclient.Runner {
	return ghclient.Runner{Scope: ghclient.Scope{Kind: ghclient.ScopeOrg, Name: org}, Name: name}
}

// looked runs one look and returns the pods it enqueued, sorted.
func looked(w *listingWatch) []string {
	var got []string
	w.look(context.Background(), func(r reconcile.Request) { got = append(got, r.Name) })
	slices.Sort(got)
	return got
}

// Legacy pods are looked at only when a listing can say something: none
// until a listing exists (except pods with runner-guard's hints), all once
// when the first exists, then a scope's pods each time its listing is taken
// anew, and never a pod that was forgotten.
func TestListingWatchLooksWhenListingsArrive(t *testing.T) {
	legacy := func(name string) *cachedPod {
		return decodeCached(t, fixture.MakeLegacyRunnerPod("ci", name).Label("runner", "true").Running().Obj())
	}
	owned := decodeCached(t, fixture.MakeLegacyRunnerPod("ci", "hinted").Label("runner", "true").Annotation(AnnotationOwned, "do-not-disrupt").Obj())
	er := fixture.MakeEphemeralRunner("ci", "scale-set")
	scaleSet := decodeCached(t, fixture.MakeScaleSetRunnerPod("ci", "scale-set").Label("runner", "true").OwnedByEphemeralRunner(er).Obj())
	scheme, err := cacheScheme()
	if err != nil {
		t.Fatal(err)
	}
	cache := fake.NewClientBuilder().WithScheme(scheme).WithObjects(legacy("a1"), legacy("a2"), legacy("b1"), owned, scaleSet).Build()
	l := &listingStub{}
	w := newListingWatch(l, cache, &guardStub{}, time.Second)

	if w.admits(legacy("a1")) {
		t.Error("a legacy pod's event admitted before any listing exists")
	}
	if !w.admits(owned) {
		t.Error("a pod carrying runner-guard's hints not admitted")
	}
	if got := looked(w); len(got) != 0 {
		t.Errorf("looked at %v with no listing anywhere", got)
	}

	t0 := time.Now()
	l.take("other-org", t0)
	if got, want := looked(w), []string{"a1", "a2", "b1", "hinted"}; !slices.Equal(got, want) {
		t.Errorf("first listing anywhere: looked at %v, want every legacy runner pod %v", got, want)
	}
	if !w.admits(legacy("new")) {
		t.Error("a legacy pod's event not admitted once a listing has existed")
	}

	for _, p := range []struct{ pod, org string }{{"a1", "acme"}, {"a2", "acme"}, {"b1", "beta"}} {
		w.remember(types.NamespacedName{Namespace: "ci", Name: p.pod}, orgRunner(p.org, p.pod))
	}
	if got := looked(w); len(got) != 0 {
		t.Errorf("no listing of acme or beta yet: looked at %v", got)
	}
	l.take("acme", t0)
	if got, want := looked(w), []string{"a1", "a2"}; !slices.Equal(got, want) {
		t.Errorf("acme listed: looked at %v, want %v", got, want)
	}
	if got := looked(w); len(got) != 0 {
		t.Errorf("the same acme listing again: looked at %v, want none", got)
	}
	w.forget(types.NamespacedName{Namespace: "ci", Name: "a2"})
	l.take("acme", t0.Add(time.Second))
	if got, want := looked(w), []string{"a1"}; !slices.Equal(got, want) {
		t.Errorf("acme listed anew after a2 was forgotten: looked at %v, want %v", got, want)
	}
	// A pod whose scope changed is looked at under its new scope only.
	w.remember(types.NamespacedName{Namespace: "ci", Name: "a1"}, orgRunner("beta", "a1"))
	l.take("acme", t0.Add(2*time.Second))
	l.take("beta", t0.Add(2*time.Second))
	if got, want := looked(w), []string{"a1", "b1"}; !slices.Equal(got, want) {
		t.Errorf("a1 moved to beta, both listed anew: looked at %v, want %v", got, want)
	}
}

// With the watch, the hint reconciler files a legacy pod under its scope
// instead of requeueing it, sets its hints from the listing, and forgets a
// pod that is gone.
func TestHintReconcilerWatchesLegacyPods(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "r-1").Label("runner", "true").Running().Obj()
	cl := fake.NewClientBuilder().WithObjects(pod).Build()
	l := &listingStub{busy: map[string]bool{"r-1": true}}
	r := &hintReconciler{pods: cl, guard: &guardStub{}, listing: l, enabled: AllHints()}
	r.watch = newListingWatch(l, cl, r.guard, time.Second)
	key := types.NamespacedName{Namespace: "ci", Name: "r-1"}
	ctx := context.Background()

	res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("no listing yet: %+v, %v; want no requeue", res, err)
	}
	l.take("acme", time.Now()) // guardStub's scope
	if got := looked(r.watch); !slices.Equal(got, []string{"r-1"}) {
		t.Fatalf("acme listed: looked at %v, want r-1", got)
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Get(ctx, key, pod); err != nil || pod.Annotations[AnnotationDoNotDisrupt] != "true" {
		t.Errorf("listed busy: annotations %v (%v), want the hints", pod.Annotations, err)
	}
	if err := cl.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	l.take("acme", time.Now().Add(time.Second))
	if got := looked(r.watch); len(got) != 0 {
		t.Errorf("after the pod was deleted: looked at %v, want none", got)
	}
}

// Hints a listing set go once the pod's job state has been unknown for
// staleHintsAfter (no listing of its scope since): a non-ephemeral runner
// whose scope no decision lists any more must not hold its node for good.
// A known state before then starts the count again.
func TestHintsFromAListingGoWhenItIsNotTakenAgain(t *testing.T) {
	pod := fixture.MakeLegacyRunnerPod("ci", "r-1").Label("runner", "true").Running().Obj()
	cl := fake.NewClientBuilder().WithObjects(pod).Build()
	l := &listingStub{taken: map[string]time.Time{"acme": time.Now()}, busy: map[string]bool{"r-1": true}}
	now := time.Unix(10_000, 0)
	r := &hintReconciler{pods: cl, guard: &guardStub{}, listing: l, enabled: AllHints(), now: func() time.Time { return now }}
	key := types.NamespacedName{Namespace: "ci", Name: "r-1"}
	ctx := context.Background()
	reconcileHints := func() reconcile.Result {
		t.Helper()
		res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	hinted := func() bool {
		t.Helper()
		if err := cl.Get(ctx, key, pod); err != nil {
			t.Fatal(err)
		}
		return pod.Annotations[AnnotationDoNotDisrupt] == "true"
	}
	setListed := func(listed bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.taken = map[string]time.Time{}
		if listed {
			l.taken["acme"] = now
		}
	}

	reconcileHints()
	if !hinted() {
		t.Fatal("listed busy: no hints")
	}
	setListed(false)
	if res := reconcileHints(); !hinted() || res.RequeueAfter <= 0 || res.RequeueAfter > staleHintsAfter {
		t.Fatalf("no listing any more: hinted %v, requeue %s; want the hints kept and a look within %s", hinted(), res.RequeueAfter, staleHintsAfter)
	}
	now = now.Add(staleHintsAfter - time.Minute)
	setListed(true)
	reconcileHints()
	setListed(false)
	now = now.Add(2 * time.Minute)
	if reconcileHints(); !hinted() {
		t.Fatal("hints removed 2 minutes after the listing said busy again")
	}
	now = now.Add(staleHintsAfter)
	if reconcileHints(); hinted() {
		t.Fatalf("job state unknown for %s: hints still set %v", staleHintsAfter, pod.Annotations)
	}
	if owned(pod.Annotations) != nil {
		t.Errorf("runner-guard still lists hints as its own: %v", pod.Annotations)
	}
}
