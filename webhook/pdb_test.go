package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// budget is a processed PodDisruptionBudget in namespace ci selecting the
// pods labelled app=runners; edit it to make a case.
func budget(name string, edit ...func(*policyv1.PodDisruptionBudget)) policyv1.PodDisruptionBudget {
	pdb := policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: name, Generation: 1},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "runners"}}},
		Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: 1,
			CurrentHealthy: 2, DesiredHealthy: 1, ExpectedPods: 2},
	}
	for _, e := range edit {
		e(&pdb)
	}
	return pdb
}

func allowsNone(p *policyv1.PodDisruptionBudget) {
	p.Status.DisruptionsAllowed, p.Status.CurrentHealthy, p.Status.DesiredHealthy = 0, 1, 1
}

func unhealthyPolicy(v policyv1.UnhealthyPodEvictionPolicyType) func(*policyv1.PodDisruptionBudget) {
	return func(p *policyv1.PodDisruptionBudget) { p.Spec.UnhealthyPodEvictionPolicy = &v }
}

// jobBudgetOf is a job budget as package disruption keeps it for pod,
// allowing no disruption.
func jobBudgetOf(pod *corev1.Pod) policyv1.PodDisruptionBudget {
	yes := true
	return budget("job", allowsNone, func(p *policyv1.PodDisruptionBudget) {
		p.Labels = map[string]string{LabelJobBudget: string(pod.UID)}
		p.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{LabelJobBudget: string(pod.UID)}}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: &yes}}
	})
}

func jobLabelled(pod *corev1.Pod) { pod.Labels[LabelJobBudget] = string(pod.UID) }

// runnerPodFor is a Running runner pod in ci labelled app=runners, Ready or not.
func runnerPodFor(ready bool, edit ...func(*corev1.Pod)) *corev1.Pod {
	pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
	pod.Labels["app"] = "runners"
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	conds := []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodReady {
			conds = append(conds, c)
		}
	}
	pod.Status.Conditions = conds
	for _, e := range edit {
		e(pod)
	}
	return pod
}

// pdbBlocks mirrors the API server's eviction subresource: it names a budget
// exactly when the API server refuses the eviction for it, and never when the
// API server lets the pod go or refuses for a reason of its own (more than
// one budget).
func TestPDBBlocks(t *testing.T) {
	tests := map[string]struct {
		pod  *corev1.Pod
		pdbs []policyv1.PodDisruptionBudget
		want string
	}{
		"no budget": {runnerPodFor(true), nil, ""},
		"budget allows a disruption": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb")}, ""},
		"budget allows none": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone)}, "pdb"},
		"budget of another namespace": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, func(p *policyv1.PodDisruptionBudget) { p.Namespace = "other" })}, ""},
		"budget selecting other pods": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, func(p *policyv1.PodDisruptionBudget) {
				p.Spec.Selector.MatchLabels = map[string]string{"app": "web"}
			})}, ""},
		"nil selector selects no pod": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, func(p *policyv1.PodDisruptionBudget) { p.Spec.Selector = nil })}, ""},
		"empty selector selects every pod": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, func(p *policyv1.PodDisruptionBudget) { p.Spec.Selector = &metav1.LabelSelector{} })}, "pdb"},
		"invalid selector selects no pod": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, func(p *policyv1.PodDisruptionBudget) {
				p.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}
			})}, ""},
		"two budgets: the API server refuses with a 500 itself": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("a", allowsNone), budget("b", allowsNone)}, ""},
		"budget not yet processed": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.Generation = 2 })}, "pdb"},
		"budget holding too many unconfirmed evictions": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb", func(p *policyv1.PodDisruptionBudget) {
				p.Status.DisruptedPods = map[string]metav1.Time{}
				for i := range maxDisruptedPods + 1 {
					p.Status.DisruptedPods[fmt.Sprint("pod-", i)] = metav1.NewTime(time.Now())
				}
			})}, "pdb"},
		"pending pod ignores budgets": {runnerPodFor(false, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone)}, ""},
		"succeeded pod ignores budgets": {runnerPodFor(false, func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone)}, ""},
		"failed pod ignores budgets": {runnerPodFor(false, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone)}, ""},
		"terminating pod ignores budgets": {runnerPodFor(true, func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now }),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone)}, ""},
		"pod of unknown phase is budgeted": {runnerPodFor(true, func(p *corev1.Pod) { p.Status.Phase = corev1.PodUnknown }),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone)}, "pdb"},
		"unready pod, AlwaysAllow, budget allows none": {runnerPodFor(false),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, unhealthyPolicy(policyv1.AlwaysAllow))}, ""},
		"unready pod, AlwaysAllow, budget not yet processed": {runnerPodFor(false),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, unhealthyPolicy(policyv1.AlwaysAllow), func(p *policyv1.PodDisruptionBudget) { p.Generation = 2 })}, ""},
		"ready pod, AlwaysAllow, budget allows none": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, unhealthyPolicy(policyv1.AlwaysAllow))}, "pdb"},
		"unready pod, IfHealthyBudget, application healthy": {runnerPodFor(false),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, unhealthyPolicy(policyv1.IfHealthyBudget))}, ""},
		"unready pod, default policy, application healthy": {runnerPodFor(false),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone)}, ""},
		"unready pod without a Ready condition, application healthy": {runnerPodFor(true, func(p *corev1.Pod) { p.Status.Conditions = nil }),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone)}, ""},
		"unready pod, default policy, application disrupted": {runnerPodFor(false),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, func(p *policyv1.PodDisruptionBudget) { p.Status.CurrentHealthy = 0 })}, "pdb"},
		"unready pod, default policy, nothing desired healthy": {runnerPodFor(false),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, func(p *policyv1.PodDisruptionBudget) { p.Status.CurrentHealthy, p.Status.DesiredHealthy = 0, 0 })}, "pdb"},
		"unready pod, default policy, nothing desired healthy, a disruption allowed": {runnerPodFor(false),
			[]policyv1.PodDisruptionBudget{budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.Status.CurrentHealthy, p.Status.DesiredHealthy = 0, 0 })}, ""},
		"unready pod, default policy, budget never processed": {runnerPodFor(false),
			[]policyv1.PodDisruptionBudget{budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.Status = policyv1.PodDisruptionBudgetStatus{} })}, "pdb"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := pdbBlocks(tc.pod, tc.pdbs); got != tc.want {
				t.Errorf("pdbBlocks = %q, want %q", got, tc.want)
			}
		})
	}
}

// Through the decider: a budget the API server would honour refuses the
// eviction without asking GitHub; one it would pass over (an unready pod
// under AlwaysAllow, two budgets) lets the runner be unregistered.
func TestEvictionDecidedOnBudgets(t *testing.T) {
	tests := map[string]struct {
		pod    *corev1.Pod
		pdbs   []policyv1.PodDisruptionBudget
		reason Reason
		asked  int
	}{
		"ready pod, budget allows none": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone)}, ReasonPDBBlocks, 0},
		"ready pod, budget allows one": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("pdb")}, ReasonUnregistered, 1},
		"unready pod under AlwaysAllow, budget allows none": {runnerPodFor(false),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone, unhealthyPolicy(policyv1.AlwaysAllow))}, ReasonUnregistered, 1},
		"unready pod, application healthy, budget allows none": {runnerPodFor(false),
			[]policyv1.PodDisruptionBudget{budget("pdb", allowsNone)}, ReasonUnregistered, 1},
		// runner-guard's own job budget is its knowledge, not a user's wish:
		// left out, so the runner is asked (a busy one keeps its reason).
		"ready pod, runner-guard's job budget allows none": {runnerPodFor(true, jobLabelled),
			[]policyv1.PodDisruptionBudget{jobBudgetOf(runnerPodFor(true))}, ReasonUnregistered, 1},
		"ready pod, a user's budget allows one besides runner-guard's": {runnerPodFor(true, jobLabelled),
			[]policyv1.PodDisruptionBudget{budget("pdb"), jobBudgetOf(runnerPodFor(true))}, ReasonUnregistered, 1},
		// The API server refuses it with a 500: refused alike, the runner kept.
		"ready pod under two budgets": {runnerPodFor(true),
			[]policyv1.PodDisruptionBudget{budget("a"), budget("b")}, ReasonPDBBlocks, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithObjects(tc.pod.DeepCopy())
			for i := range tc.pdbs {
				b = b.WithObjects(&tc.pdbs[i])
			}
			gh := &statusGitHub{}
			d := newDecider(DefaultConfig(), gh, b.Build(), time.Now)
			dec, _ := d.decide(context.Background(), review{Operation: OperationEvict, Namespace: "ci", Name: "runner-1", Pod: tc.pod.DeepCopy()})
			if name == "ready pod under two budgets" && (dec.Code != 500 || !strings.Contains(dec.Message, "a, b")) {
				t.Errorf("two budgets: code %d, message %q; want a 500 naming both", dec.Code, dec.Message)
			}
			if dec.Reason != tc.reason || gh.unregisters != tc.asked {
				t.Errorf("decided %s (%s) after %d unregisters, want %s after %d", dec.Reason, dec.Message, gh.unregisters, tc.reason, tc.asked)
			}
		})
	}
}

// named renames a runner pod and gives it its own UID.
func named(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Name, p.UID = name, types.UID("uid-"+name) }
}

// concurrentGitHub counts unregisters from concurrent decisions.
type concurrentGitHub struct {
	statusGitHub
	n atomic.Int32
}

func (c *concurrentGitHub) Unregister(context.Context, ghclient.Runner) (ghclient.Outcome, error) {
	c.n.Add(1)
	return ghclient.Removed, nil
}

// Three evictions sent at once under a budget allowing one, as kubectl drain
// sends them: each reads disruptionsAllowed 1 before the API server charges
// any, so only the ledger keeps two runners registered.
func TestConcurrentEvictionsUnderOneBudget(t *testing.T) {
	pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
	b := fake.NewClientBuilder().WithObjects(&pdb)
	var pods []*corev1.Pod
	for _, name := range []string{"runner-1", "runner-2", "runner-3"} {
		pod := runnerPodFor(true, named(name))
		pods = append(pods, pod)
		b = b.WithObjects(pod.DeepCopy())
	}
	gh := &concurrentGitHub{}
	d := newDecider(DefaultConfig(), gh, b.Build(), time.Now)
	reasons := make([]Reason, len(pods))
	var wg sync.WaitGroup
	for i, pod := range pods {
		wg.Go(func() {
			dec, _ := d.decide(context.Background(), review{Operation: OperationEvict, Namespace: "ci", Name: pod.Name, Pod: pod.DeepCopy()})
			reasons[i] = dec.Reason
		})
	}
	wg.Wait()
	slices.Sort(reasons)
	want := []Reason{ReasonPDBBlocks, ReasonPDBBlocks, ReasonUnregistered}
	if !slices.Equal(reasons, want) || gh.n.Load() != 1 {
		t.Errorf("decided %v after %d unregisters, want %v after 1", reasons, gh.n.Load(), want)
	}
}

// The ledger counts an eviction until the budget shows it; a refused one is
// given back at once, and one the API server never made after the hold.
func TestBudgetLedger(t *testing.T) {
	const deadline = 10 * time.Second
	start := time.Unix(1000, 0)
	rewrite := func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "11" }
	tests := map[string]struct {
		answered, cancelled bool
		// edit changes the budget once "runner-1" was let through; later is
		// how long after.
		edit         func(p *policyv1.PodDisruptionBudget)
		later        time.Duration
		wantInFlight int
	}{
		"let through, budget unchanged": {answered: true, later: time.Second, wantInFlight: 1},
		"shown in disruptedPods": {answered: true, edit: func(p *policyv1.PodDisruptionBudget) {
			p.Status.DisruptedPods = map[string]metav1.Time{"runner-1": metav1.NewTime(start)}
		}, wantInFlight: 0},
		// Another eviction's write makes a new version while this one is on
		// its way to the API server.
		"answered, budget written since, within the deadline": {answered: true, edit: rewrite, later: time.Second, wantInFlight: 1},
		"answered, budget written since, past the deadline":   {answered: true, edit: rewrite, later: deadline + time.Second, wantInFlight: 0},
		// Still asking GitHub: a status write is not this eviction's.
		"not answered yet, budget written since": {edit: rewrite, later: deadline + time.Second, wantInFlight: 1},
		"refused: given back":                    {cancelled: true, wantInFlight: 0},
		"never made, past the hold":              {answered: true, later: deadline + budgetHoldSlack + time.Second, wantInFlight: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clock := start
			l := NewBudgetLedger(deadline, func() time.Time { return clock })
			pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
			h := reserveFirst(t, l, &pdb)
			if tc.answered {
				h.Admitted()
			}
			if tc.cancelled {
				h.Cancel()
			}
			if tc.edit != nil {
				tc.edit(&pdb)
			}
			clock = clock.Add(tc.later)
			if got := l.InFlight(&pdb, readNow(l)); got != tc.wantInFlight {
				t.Errorf("in flight %d, want %d", got, tc.wantInFlight)
			}
			_, _, ok := l.Reserve(&pdb, runnerPodFor(true, named("runner-2")), readNow(l))
			if ok != (tc.wantInFlight == 0) {
				t.Errorf("second eviction reserved %v with %d in flight under a budget allowing one", ok, tc.wantInFlight)
			}
			// The pod holding the disruption is not counted against itself
			// (the drain reserves, then its eviction reaches the webhook).
			if tc.wantInFlight == 1 {
				if _, _, ok := l.Reserve(&pdb, runnerPodFor(true, named("runner-1")), readNow(l)); !ok {
					t.Error("the pod holding the reservation was refused its own eviction")
				}
			}
		})
	}
}

// An eviction whose pod is seen going before the budget is read is
// accounted for, even once the disruption controller has cleared it from
// status.disruptedPods; one whose pod stays keeps counting.
func TestBudgetLedgerSeesPodsGo(t *testing.T) {
	now := metav1.Now()
	tests := map[string]struct {
		pod          *corev1.Pod // the live pod runner-1; nil: gone
		wantInFlight int
	}{
		"pod gone":                {nil, 0},
		"pod terminating":         {runnerPodFor(true, named("runner-1"), func(p *corev1.Pod) { p.DeletionTimestamp, p.Finalizers = &now, []string{"example.com/hold"} }), 0},
		"another pod of the name": {runnerPodFor(true, named("runner-1"), func(p *corev1.Pod) { p.UID = "newer" }), 0},
		"pod stays":               {runnerPodFor(true, named("runner-1")), 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder()
			if tc.pod != nil {
				b = b.WithObjects(tc.pod)
			}
			l := NewBudgetLedger(10*time.Second, time.Now)
			pdb := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
			reserveFirst(t, l, &pdb).Admitted()
			read := l.SeePods(context.Background(), b.Build(), "ci")
			if got := l.InFlight(&pdb, read); got != tc.wantInFlight {
				t.Errorf("in flight %d, want %d", got, tc.wantInFlight)
			}
		})
	}
}

// Two reviews read the budget side by side. The first read it before
// runner-1's eviction was written; the second saw runner-1's pod go, then
// read it. The first must still count runner-1: its read does not show the
// eviction, and the API server would refuse a second one (a runner
// unregistered whose pod stays).
func TestBudgetLedgerCountsForAnEarlierRead(t *testing.T) {
	l := NewBudgetLedger(10*time.Second, time.Now)
	before := budget("pdb", func(p *policyv1.PodDisruptionBudget) { p.ResourceVersion = "10" })
	reserveFirst(t, l, &before).Admitted()

	early := readNow(l) // review A begins its read of the budget: before
	// runner-1's eviction is written and its pod deleted; review B sees the
	// pod gone and reads the budget after.
	late := l.SeePods(context.Background(), fake.NewClientBuilder().Build(), "ci")
	after := budget("pdb", func(p *policyv1.PodDisruptionBudget) {
		p.ResourceVersion, p.Status.DisruptionsAllowed = "11", 0
	})
	if _, _, ok := l.Reserve(&after, runnerPodFor(true, named("runner-3")), late); ok {
		t.Error("review B reserved a disruption of a budget that allows none")
	}
	if _, inFlight, ok := l.Reserve(&before, runnerPodFor(true, named("runner-2")), early); ok {
		t.Errorf("review A reserved the disruption runner-1's eviction took (in flight %d): its read predates that eviction", inFlight)
	}
	// A read begun after runner-1's pod was seen gone shows its eviction.
	if got := l.InFlight(&after, readNow(l)); got != 0 {
		t.Errorf("in flight %d for a read begun after runner-1's pod went, want 0", got)
	}
}

// reserveFirst reserves runner-1's eviction, the first under pdb, which
// allows one.
func reserveFirst(t *testing.T, l *BudgetLedger, pdb *policyv1.PodDisruptionBudget) BudgetHold {
	t.Helper()
	h, _, ok := l.Reserve(pdb, runnerPodFor(true, named("runner-1")), readNow(l))
	if !ok {
		t.Fatal("the first eviction under a budget allowing one was refused")
	}
	return h
}

// readNow stamps a budget read beginning now.
func readNow(l *BudgetLedger) ReadStamp {
	return l.SeePods(context.Background(), fake.NewClientBuilder().Build(), "none")
}

// The drain's hold and a review's on the same pod overlap (both reserve its
// eviction): the one given back first must not give back the other's, which
// still evicts; only the last one given back frees the disruption.
func TestOverlappingHoldsOnOnePod(t *testing.T) {
	pdb := budget("pdb")
	l := NewBudgetLedger(10*time.Second, time.Now)
	review := reserveFirst(t, l, &pdb)
	drain := reserveFirst(t, l, &pdb)
	other := runnerPodFor(true, named("runner-2"))
	review.Cancel() // the review's runner was busy a moment before
	if _, n, ok := l.Reserve(&pdb, other, readNow(l)); ok || n != 1 {
		t.Fatalf("with the drain's hold on runner-1 kept, another eviction was let through (in flight %d), want it refused", n)
	}
	drain.Cancel()
	if _, n, ok := l.Reserve(&pdb, other, readNow(l)); !ok || n != 0 {
		t.Errorf("with both holds given back, another eviction was refused (in flight %d)", n)
	}
}
