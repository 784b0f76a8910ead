package webhook

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
)

// sharedReplica is one webhook replica deciding against c, sharing its
// budget reservations through c's Leases as replica.
func sharedReplica(c client.Client, gh GitHub, replica string, now func() time.Time) *decider {
	d := newDecider(DefaultConfig(), gh, c, now)
	d.budgets.Share(NewReservations(c, replica, logr.Discard()))
	return d
}

// leaseReservations reads the reservations the budget pdb's Lease holds.
func leaseReservations(t *testing.T, c client.Client, pdb string) reservationState {
	t.Helper()
	lease := &coordinationv1.Lease{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ci", Name: ReservationLeaseName(pdb)}, lease); apierrors.IsNotFound(err) {
		return reservationState{}
	} else if err != nil {
		t.Fatal(err)
	}
	s, err := parseReservations(lease.Annotations[ReservationsAnnotation], time.Now(), time.Hour)
	if err != nil {
		t.Fatalf("the Lease holds reservations runner-guard cannot read: %v", err)
	}
	return s
}

// Evictions sent at once, spread over the replicas as the Service spreads
// them: with reservations shared, no more runners are unregistered than the
// budget allows, whatever the number of replicas. Unshared, each replica
// lets its own share through (issue 37's two DELETEs for one disruption).
func TestReplicasShareBudgetReservations(t *testing.T) {
	tests := map[string]struct {
		replicas, evictions int
		allowed             int32
		shared              bool
		wantUnregistered    int
	}{
		"2 replicas, 3 evictions, budget 1":           {replicas: 2, evictions: 3, allowed: 1, shared: true, wantUnregistered: 1},
		"2 replicas, 20 evictions, budget 5":          {replicas: 2, evictions: 20, allowed: 5, shared: true, wantUnregistered: 5},
		"3 replicas, 20 evictions, budget 5":          {replicas: 3, evictions: 20, allowed: 5, shared: true, wantUnregistered: 5},
		"not shared: each replica lets one through":   {replicas: 2, evictions: 3, allowed: 1, shared: false, wantUnregistered: 2},
		"not shared: 3 replicas let 15 for 5 through": {replicas: 3, evictions: 20, allowed: 5, shared: false, wantUnregistered: 15},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) {
				p.ResourceVersion, p.Status.DisruptionsAllowed = "10", tc.allowed
				p.Status.CurrentHealthy, p.Status.ExpectedPods = int32(tc.evictions), int32(tc.evictions)
				p.Status.DesiredHealthy = int32(tc.evictions) - tc.allowed
			})
			b := fake.NewClientBuilder().WithObjects(&pdb)
			var pods []*corev1.Pod
			for i := range tc.evictions {
				pod := runnerPodFor(true, named(fmt.Sprintf("runner-%d", i)))
				pods = append(pods, pod)
				b = b.WithObjects(pod.DeepCopy())
			}
			c := b.Build()
			gh := &concurrentGitHub{}
			var replicas []*decider
			for i := range tc.replicas {
				d := newDecider(DefaultConfig(), gh, c, time.Now)
				if tc.shared {
					d = sharedReplica(c, gh, fmt.Sprintf("runner-guard-%d/boot", i), time.Now)
				}
				replicas = append(replicas, d)
			}
			var wg sync.WaitGroup
			for i, pod := range pods {
				wg.Go(func() {
					replicas[i%len(replicas)].decide(context.Background(), review{Operation: OperationEvict, Namespace: "ci", Name: pod.Name, Pod: pod.DeepCopy()})
				})
			}
			wg.Wait()
			if got := int(gh.n.Load()); got != tc.wantUnregistered {
				t.Errorf("%d runners unregistered, want %d", got, tc.wantUnregistered)
			}
			if tc.shared {
				if got := len(leaseReservations(t, c, "pdb").Reservations); got != tc.wantUnregistered {
					t.Errorf("the Lease holds %d reservations, want %d", got, tc.wantUnregistered)
				}
			}
		})
	}
}

// A reservation the decision gives back (GitHub said busy) leaves the Lease
// at once, so another replica may take the disruption without waiting for
// it to expire.
func TestRefusedEvictionReleasesItsReservation(t *testing.T) {
	pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
	one, two := runnerPodFor(true, named("runner-1")), runnerPodFor(true, named("runner-2"))
	c := fake.NewClientBuilder().WithObjects(&pdb, one.DeepCopy(), two.DeepCopy()).Build()
	busy := sharedReplica(c, &countingGitHub{}, "a/1", time.Now)
	dec, _ := busy.decide(context.Background(), review{Operation: OperationEvict, Namespace: "ci", Name: one.Name, Pod: one.DeepCopy()})
	if dec.Allowed {
		t.Fatalf("a busy runner's eviction was allowed: %s", dec.Message)
	}
	// Given back beside the answer: wait for the Lease's write.
	var left []reservation
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		left = leaseReservations(t, c, "pdb").Reservations
		return len(left) == 0, nil
	}); err != nil {
		t.Fatalf("the refused eviction's reservation stayed: %+v", left)
	}
	gh := &concurrentGitHub{}
	other := sharedReplica(c, gh, "b/1", time.Now)
	if dec, _ := other.decide(context.Background(), review{Operation: OperationEvict, Namespace: "ci", Name: two.Name, Pod: two.DeepCopy()}); !dec.Allowed || gh.n.Load() != 1 {
		t.Errorf("the other replica decided %s (%s), want the disruption given back", dec.Reason, dec.Message)
	}
}

// Another replica's reservation counts until the budget read shows its
// eviction or it expires; one for the pod under review is that pod's own.
func TestOtherReplicasReservations(t *testing.T) {
	start := time.Unix(100000, 0)
	const hold = DefaultWebhookTimeout + budgetHoldSlack
	tests := map[string]struct {
		reservation reservation
		edit        func(*policyv1.PodDisruptionBudget)
		later       time.Duration
		wantAllowed bool
	}{
		"live, not shown": {reservation: reservation{Replica: "b/1", Pod: "runner-2", PodUID: "uid-runner-2", Expires: start.Add(hold)}},
		"expired":         {reservation: reservation{Replica: "b/1", Pod: "runner-2", PodUID: "uid-runner-2", Expires: start.Add(hold)}, later: hold + time.Second, wantAllowed: true},
		"the same pod's":  {reservation: reservation{Replica: "b/1", Pod: "runner-1", PodUID: "uid-runner-1", Expires: start.Add(hold)}, wantAllowed: true},
		"another of mine": {reservation: reservation{Replica: "a/1", Pod: "runner-2", PodUID: "uid-runner-2", Expires: start.Add(hold)}, wantAllowed: true},
		"shown in disruptedPods, budget charged": {reservation: reservation{Replica: "b/1", Pod: "runner-2", PodUID: "uid-runner-2", Expires: start.Add(hold)},
			edit: func(p *policyv1.PodDisruptionBudget) {
				p.Status.DisruptionsAllowed = 1 // two allowed, one charged for runner-2
				p.Status.DisruptedPods = map[string]metav1.Time{"runner-2": metav1.NewTime(start)}
			}, wantAllowed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(start)
			pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
			if tc.edit != nil {
				tc.edit(&pdb)
			}
			value, err := reservationState{Reservations: []reservation{tc.reservation}}.encode()
			if err != nil {
				t.Fatal(err)
			}
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: ReservationLeaseName("pdb"),
				Annotations: map[string]string{ReservationsAnnotation: value}}}
			pod := runnerPodFor(true, named("runner-1"))
			c := fake.NewClientBuilder().WithObjects(&pdb, lease, pod.DeepCopy(), runnerPodFor(true, named("runner-2"))).Build()
			clock.Advance(tc.later)
			gh := &concurrentGitHub{}
			d := sharedReplica(c, gh, "a/1", clock.Now)
			dec, _ := d.decide(context.Background(), review{Operation: OperationEvict, Namespace: "ci", Name: pod.Name, Pod: pod.DeepCopy()})
			if dec.Allowed != tc.wantAllowed || (gh.n.Load() == 1) != tc.wantAllowed {
				t.Errorf("decided %s (%s) after %d unregisters; want allowed %v", dec.Reason, dec.Message, gh.n.Load(), tc.wantAllowed)
			}
		})
	}
}

// Another replica's eviction whose pod is seen going before the budget is
// read is accounted for, even once disruptedPods no longer shows it.
func TestOtherReplicasEvictionSeenGoing(t *testing.T) {
	pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
	one, two, three := runnerPodFor(true, named("runner-1")), runnerPodFor(true, named("runner-2")), runnerPodFor(true, named("runner-3"))
	c := fake.NewClientBuilder().WithObjects(&pdb, one.DeepCopy(), two.DeepCopy(), three.DeepCopy()).Build()
	ctx := context.Background()
	a, b := sharedReplica(c, &concurrentGitHub{}, "a/1", time.Now), sharedReplica(c, &concurrentGitHub{}, "b/1", time.Now)
	if dec, _ := a.decide(ctx, review{Operation: OperationEvict, Namespace: "ci", Name: one.Name, Pod: one.DeepCopy()}); !dec.Allowed {
		t.Fatalf("the first eviction was refused: %s", dec.Message)
	}
	if dec, _ := b.decide(ctx, review{Operation: OperationEvict, Namespace: "ci", Name: two.Name, Pod: two.DeepCopy()}); dec.Allowed {
		t.Fatal("replica b let a second eviction through under a budget allowing one")
	}
	// The API server evicts runner-1 (charging the budget, then deleting
	// the pod) and the disruption controller recounts: one disruption again.
	if err := c.Delete(ctx, one.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if dec, _ := b.decide(ctx, review{Operation: OperationEvict, Namespace: "ci", Name: three.Name, Pod: three.DeepCopy()}); !dec.Allowed {
		t.Errorf("replica b still counts runner-1's eviction once its pod was seen gone: %s", dec.Message)
	}
}

// A replica that learns of another's reservation only after its pod went
// (the eviction done, the budget showing it) does not count it: the pod is
// looked at before the eviction under review is refused.
func TestOtherReplicasEvictionGoneBeforeFirstSeen(t *testing.T) {
	pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
	one, two := runnerPodFor(true, named("runner-1")), runnerPodFor(true, named("runner-2"))
	c := fake.NewClientBuilder().WithObjects(&pdb, one.DeepCopy(), two.DeepCopy()).Build()
	ctx := context.Background()
	a := sharedReplica(c, &concurrentGitHub{}, "a/1", time.Now)
	if dec, _ := a.decide(ctx, review{Operation: OperationEvict, Namespace: "ci", Name: one.Name, Pod: one.DeepCopy()}); !dec.Allowed {
		t.Fatalf("the first eviction was refused: %s", dec.Message)
	}
	if err := c.Delete(ctx, one.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	gh := &concurrentGitHub{}
	b := sharedReplica(c, gh, "b/1", time.Now)
	if dec, _ := b.decide(ctx, review{Operation: OperationEvict, Namespace: "ci", Name: two.Name, Pod: two.DeepCopy()}); !dec.Allowed || gh.n.Load() != 1 {
		t.Errorf("replica b counted runner-1's eviction, whose pod was gone before b first read the Lease: %s", dec.Message)
	}
}

// A Lease edited by hand into nonsense is never a reason to admit: the
// eviction is refused, the Lease rewritten valid, and every disruption
// counts as reserved until any reservation it may have held has expired.
func TestUnreadableReservations(t *testing.T) {
	const hold = DefaultWebhookTimeout + budgetHoldSlack
	tests := map[string]string{
		"not JSON":            "{{nonsense",
		"a list":              `["a"]`,
		"entry without a pod": `{"reservations":[{"replica":"b/1","podUID":"x","expires":"2030-01-01T00:00:00Z"}]}`,
		"expires in 2999":     `{"reservations":[{"replica":"b/1","pod":"p","podUID":"x","expires":"2999-01-01T00:00:00Z"}]}`,
		"unreadable for ever": `{"unreadableUntil":"2999-01-01T00:00:00Z"}`,
	}
	for name, value := range tests {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(time.Now())
			pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: ReservationLeaseName("pdb"),
				Annotations: map[string]string{ReservationsAnnotation: value}}}
			pod := runnerPodFor(true, named("runner-1"))
			c := fake.NewClientBuilder().WithObjects(&pdb, lease, pod.DeepCopy()).Build()
			gh := &concurrentGitHub{}
			d := sharedReplica(c, gh, "a/1", clock.Now)
			evict := func() Decision {
				dec, _ := d.decide(context.Background(), review{Operation: OperationEvict, Namespace: "ci", Name: pod.Name, Pod: pod.DeepCopy()})
				return dec
			}
			dec := evict()
			if dec.Allowed || dec.Reason != ReasonPDBBlocks || dec.Code != 429 || !strings.Contains(dec.Message, "unreadable") || gh.n.Load() != 0 {
				t.Fatalf("decided %s %d (%s) after %d unregisters; want a 429 saying the reservations were unreadable", dec.Reason, dec.Code, dec.Message, gh.n.Load())
			}
			if s := leaseReservations(t, c, "pdb"); s.UnreadableUntil == nil || len(s.Reservations) != 0 {
				t.Errorf("the Lease was rewritten as %+v, want no reservations and a time until which all count", s)
			}
			if dec := evict(); dec.Allowed {
				t.Errorf("admitted while reservations the Lease may have held could still be in flight")
			}
			clock.Advance(hold + time.Second)
			if dec := evict(); !dec.Allowed || gh.n.Load() != 1 {
				t.Errorf("decided %s (%s) once those would have expired, want the eviction admitted", dec.Reason, dec.Message)
			}
		})
	}
}

// When Leases may not be read or written (RBAC not granted, the API server
// failing), the eviction waits: it is refused with a 429 and no runner is
// unregistered, rather than let through uncounted by the other replicas.
func TestReservationsFailingRefuse(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "runner-guard-pdb-pdb", fmt.Errorf("RBAC"))
	tests := map[string]interceptor.Funcs{
		"get forbidden": {Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				return forbidden
			}
			return c.Get(ctx, key, obj, opts...)
		}},
		"create forbidden": {Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			return forbidden
		}},
		"get times out": {Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok {
				return apierrors.NewTimeoutError("etcd", 1)
			}
			return c.Get(ctx, key, obj, opts...)
		}},
	}
	for name, funcs := range tests {
		t.Run(name, func(t *testing.T) {
			pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
			pod := runnerPodFor(true, named("runner-1"))
			c := fake.NewClientBuilder().WithObjects(&pdb, pod.DeepCopy()).WithInterceptorFuncs(funcs).Build()
			gh := &concurrentGitHub{}
			d := sharedReplica(c, gh, "a/1", time.Now)
			dec, _ := d.decide(context.Background(), review{Operation: OperationEvict, Namespace: "ci", Name: pod.Name, Pod: pod.DeepCopy()})
			if dec.Allowed || dec.Code != 429 || dec.Reason != ReasonPDBBlocks || !strings.Contains(dec.Message, "other replicas") || gh.n.Load() != 0 {
				t.Errorf("decided %s %d (%s) after %d unregisters; want a 429 and the runner kept", dec.Reason, dec.Code, dec.Message, gh.n.Load())
			}
			if got := d.budgets.InFlight(&pdb, readNow(d.budgets)); got != 0 {
				t.Errorf("the refused eviction still counts in the ledger: %d", got)
			}
		})
	}
}

func TestReservationLeaseName(t *testing.T) {
	long := strings.Repeat("a", 253)
	tests := map[string]struct {
		pdb  string
		want func(string) bool
	}{
		"short":   {"ci-runners", func(n string) bool { return n == "runner-guard-pdb-ci-runners" }},
		"longest": {long, func(n string) bool { return len(n) == 253 && strings.HasPrefix(n, ReservationLeasePrefix) }},
		"two long names differing at the end": {long[:252] + "b", func(n string) bool {
			return len(n) == 253 && n != ReservationLeaseName(long)
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ReservationLeaseName(tc.pdb); !tc.want(got) {
				t.Errorf("ReservationLeaseName(%q) = %q", tc.pdb, got)
			}
		})
	}
}

func TestParseReservations(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		value   string
		want    int
		wantErr bool
	}{
		"absent":                  {value: "", want: 0},
		"two":                     {value: `{"reservations":[{"replica":"a/1","pod":"p","podUID":"u","expires":"2026-12-06T12:00:10Z"},{"replica":"b/1","pod":"q","podUID":"v","expires":"2026-12-06T12:00:20Z"}]}`, want: 2},
		"unknown fields":          {value: `{"reservations":[],"v":2}`, want: 0},
		"bad JSON":                {value: `{`, wantErr: true},
		"no expiry":               {value: `{"reservations":[{"replica":"a/1","pod":"p","podUID":"u"}]}`, wantErr: true},
		"no replica":              {value: `{"reservations":[{"pod":"p","podUID":"u","expires":"2026-12-06T12:00:10Z"}]}`, wantErr: true},
		"too far ahead":           {value: `{"reservations":[{"replica":"a/1","pod":"p","podUID":"u","expires":"2026-12-06T13:00:00Z"}]}`, wantErr: true},
		"expires not a time":      {value: `{"reservations":[{"replica":"a/1","pod":"p","podUID":"u","expires":"soon"}]}`, wantErr: true},
		"reservations not a list": {value: `{"reservations":{}}`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := parseReservations(tc.value, now, time.Minute)
			if (err != nil) != tc.wantErr || len(s.Reservations) != tc.want {
				t.Errorf("parseReservations(%s) = %+v, %v; want %d reservations, error %v", tc.value, s, err, tc.want, tc.wantErr)
			}
		})
	}
}

// Another replica's reservation, once expired, is forgotten: the pods
// SeePods looks at are only those of reservations that may still count.
func TestExpiredOtherReservationsAreForgotten(t *testing.T) {
	clock := fakeclock.New(time.Unix(100000, 0))
	const hold = DefaultWebhookTimeout + budgetHoldSlack
	pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
	l := NewBudgetLedger(DefaultWebhookTimeout, clock.Now)
	key := types.NamespacedName{Namespace: "ci", Name: "pdb"}
	l.mu.Lock()
	l.noteForeign(key, &pdb, []reservation{{Replica: "b/1", Pod: "runner-2", PodUID: "uid-runner-2", Expires: clock.Now().Add(hold)}})
	l.mu.Unlock()
	var gets int
	c := fake.NewClientBuilder().WithObjects(runnerPodFor(true, named("runner-2"))).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	l.SeePods(context.Background(), c, "ci")
	if gets != 1 {
		t.Fatalf("SeePods read %d pods for a live reservation of another replica, want 1", gets)
	}
	clock.Advance(hold + time.Second)
	l.SeePods(context.Background(), c, "ci")
	if gets != 1 || len(l.foreign) != 0 {
		t.Errorf("an expired reservation of another replica is still looked at (%d reads, %d budgets remembered)", gets, len(l.foreign))
	}
}
