package disruption

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// userBudget is a budget someone else made, selecting pods labelled k=v.
func userBudget(name, k, v string) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}},
	}
}

func TestIsJobBudget(t *testing.T) {
	pod := runnerPod("r-1", "n")
	cases := map[string]struct {
		edit func(*policyv1.PodDisruptionBudget)
		want bool
	}{
		"as runner-guard makes it": {want: true},
		"no label":                 {edit: func(p *policyv1.PodDisruptionBudget) { delete(p.Labels, webhook.LabelJobBudget) }},
		"selects more":             {edit: func(p *policyv1.PodDisruptionBudget) { p.Spec.Selector.MatchLabels["app"] = "x" }},
		"selects another value": {edit: func(p *policyv1.PodDisruptionBudget) {
			p.Spec.Selector.MatchLabels[webhook.LabelJobBudget] = "other"
		}},
		"an expression too": {edit: func(p *policyv1.PodDisruptionBudget) {
			p.Spec.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: metav1.LabelSelectorOpExists}}
		}},
		"owned by another pod": {edit: func(p *policyv1.PodDisruptionBudget) { p.OwnerReferences[0].UID = "other" }},
		"not owned":            {edit: func(p *policyv1.PodDisruptionBudget) { p.OwnerReferences = nil }},
		"a user's budget":      {edit: func(p *policyv1.PodDisruptionBudget) { *p = *userBudget("u", "app", "x") }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			pdb := jobBudget(pod)
			if c.edit != nil {
				c.edit(pdb)
			}
			if got := webhook.IsJobBudget(pdb); got != c.want {
				t.Errorf("IsJobBudget = %v, want %v", got, c.want)
			}
		})
	}
}

func TestJobBudgetNamesAreValidAndDistinct(t *testing.T) {
	a, b := runnerPod("r-1", "n"), runnerPod("r-1", "n")
	b.UID = "another-uid"
	long := runnerPod(strings.Repeat("x", 253), "n")
	if jobBudgetName(a) == jobBudgetName(b) {
		t.Errorf("two pods of one name share budget name %q", jobBudgetName(a))
	}
	if n := jobBudgetName(long); len(n) > 253 {
		t.Errorf("budget name of %d characters, want at most 253", len(n))
	}
}

func TestPlanBudget(t *testing.T) {
	pod := runnerPod("r-1", "n")
	pod.Labels["app"] = "runner"
	ours := *jobBudget(pod)
	extra := *jobBudget(pod)
	extra.Name = "zz-extra"
	otherPods := *jobBudget(runnerPod("r-2", "n"))
	cases := map[string]struct {
		busy, enabled bool
		pdbs          []policyv1.PodDisruptionBudget
		want          budgetPlan
	}{
		"busy, none yet: create":                    {busy: true, enabled: true, want: budgetPlan{Want: true, Create: true}},
		"busy, ours there: nothing":                 {busy: true, enabled: true, pdbs: []policyv1.PodDisruptionBudget{ours}, want: budgetPlan{Want: true, Delete: []string{}}},
		"busy, two of ours: one goes":               {busy: true, enabled: true, pdbs: []policyv1.PodDisruptionBudget{extra, ours}, want: budgetPlan{Want: true, Delete: []string{"zz-extra"}}},
		"idle: ours goes":                           {enabled: true, pdbs: []policyv1.PodDisruptionBudget{ours}, want: budgetPlan{Delete: []string{ours.Name}}},
		"off: ours goes even while busy":            {busy: true, pdbs: []policyv1.PodDisruptionBudget{ours}, want: budgetPlan{Delete: []string{ours.Name}}},
		"another pod's budget is not ours":          {busy: true, enabled: true, pdbs: []policyv1.PodDisruptionBudget{otherPods}, want: budgetPlan{Want: true, Create: true}},
		"a user's budget selects it: none":          {busy: true, enabled: true, pdbs: []policyv1.PodDisruptionBudget{*userBudget("team", "app", "runner")}, want: budgetPlan{Others: []string{"team"}}},
		"a user's budget appears: ours goes":        {busy: true, enabled: true, pdbs: []policyv1.PodDisruptionBudget{ours, *userBudget("team", "app", "runner")}, want: budgetPlan{Delete: []string{ours.Name}, Others: []string{"team"}}},
		"a user's budget of other pods":             {busy: true, enabled: true, pdbs: []policyv1.PodDisruptionBudget{*userBudget("team", "app", "web")}, want: budgetPlan{Want: true, Create: true}},
		"a budget selecting everything counts":      {busy: true, enabled: true, pdbs: []policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "all"}, Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{}}}}, want: budgetPlan{Others: []string{"all"}}},
		"a budget with no selector selects nothing": {busy: true, enabled: true, pdbs: []policyv1.PodDisruptionBudget{{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "none"}}}, want: budgetPlan{Want: true, Create: true}},
		"idle, a user's budget: no Event":           {enabled: true, pdbs: []policyv1.PodDisruptionBudget{*userBudget("team", "app", "runner")}, want: budgetPlan{}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := planBudget(pod, c.busy, c.enabled, c.pdbs)
			if got.Want != c.want.Want || got.Create != c.want.Create || !slices.Equal(got.Delete, c.want.Delete) && len(got.Delete)+len(c.want.Delete) > 0 || !slices.Equal(got.Others, c.want.Others) {
				t.Errorf("plan %+v, want %+v", got, c.want)
			}
		})
	}
}

// The reconciler keeps a busy scale-set runner's budget and label, removes
// both when the job ends, and leaves a pod another budget selects alone
// with an Event.
func TestJobBudgetFollowsTheJob(t *testing.T) {
	ctx := context.Background()
	cases := map[string]struct {
		busy, done    bool
		budgetsOn     bool
		withOurs      bool
		user          *policyv1.PodDisruptionBudget
		wantBudget    bool
		wantLabel     bool
		wantEvent     bool
		wantUserStays bool
	}{
		"job running: budget and label":                 {busy: true, budgetsOn: true, wantBudget: true, wantLabel: true},
		"no job: none":                                  {budgetsOn: true},
		"job over (pod completed): budget and label go": {busy: true, done: true, budgetsOn: true, withOurs: true},
		// The budgets themselves go at start (removeJobBudgetsAtStart).
		"budgets off: the label goes": {busy: true, withOurs: true, wantBudget: true},
		"another budget selects the pod: none, an Event": {
			busy: true, budgetsOn: true, user: userBudget("team", "app", "runner"), wantEvent: true, wantUserStays: true,
		},
		"another budget appears: ours goes, theirs stays": {
			busy: true, budgetsOn: true, withOurs: true, user: userBudget("team", "app", "runner"), wantEvent: true, wantUserStays: true,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			w := fixture.MakeEphemeralRunner("ci", "r-1").ConfigURL("https://github.com/acme").RunnerID(5).RunnerName("r-1")
			if c.busy {
				w.JobID("7")
			}
			pw := fixture.MakeScaleSetRunnerPod("ci", "r-1").OwnedByEphemeralRunner(w).UID("uid-r-1").Label("runner", "true").Label("app", "runner")
			if !c.done {
				pw = pw.Running()
			}
			pod := pw.Obj()
			objs := []client.Object{w.Obj(), pod}
			if c.withOurs {
				pod.Labels[webhook.LabelJobBudget] = string(pod.UID)
				objs = append(objs, jobBudget(pod))
			}
			if c.user != nil {
				objs = append(objs, c.user)
			}
			cl := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).Build()
			rec := events.NewFakeRecorder(10)
			r := &hintReconciler{pods: cl, guard: &guardStub{}, ephemeral: arc.NewResolver(arc.Options{Reader: cl}),
				budgets: c.budgetsOn, events: rec, said: newOnce()}
			for range 2 { // a second pass changes nothing
				if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ci", Name: "r-1"}}); err != nil {
					t.Fatal(err)
				}
			}
			var pdbs policyv1.PodDisruptionBudgetList
			if err := cl.List(ctx, &pdbs); err != nil {
				t.Fatal(err)
			}
			var jobBudgets, users int
			for i := range pdbs.Items {
				if webhook.IsJobBudget(&pdbs.Items[i]) {
					jobBudgets++
				} else {
					users++
				}
			}
			if want := map[bool]int{true: 1}[c.wantBudget]; jobBudgets != want {
				t.Errorf("%d job budgets, want %d", jobBudgets, want)
			}
			if c.wantUserStays && users != 1 {
				t.Errorf("the user's budget was touched: %d left", users)
			}
			got := &corev1.Pod{}
			if err := cl.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				t.Fatal(err)
			}
			if v, ok := got.Labels[webhook.LabelJobBudget]; ok != c.wantLabel || ok && v != string(pod.UID) {
				t.Errorf("label %q=%q (present %v), want present %v with the pod's UID", webhook.LabelJobBudget, v, ok, c.wantLabel)
			}
			var evs []string
			for len(rec.Events) > 0 {
				evs = append(evs, <-rec.Events)
			}
			if c.wantEvent != (len(evs) == 1) || len(evs) > 1 {
				t.Errorf("events %q, want one JobBudgetSkipped: %v", evs, c.wantEvent)
			}
		})
	}
}

func TestRemoveJobBudgetsLeavesOthers(t *testing.T) {
	ctx := context.Background()
	a, b := runnerPod("r-1", "n"), runnerPod("r-2", "n")
	b.Namespace = "other"
	forged := userBudget("forged", webhook.LabelJobBudget, "x")
	forged.Labels = map[string]string{webhook.LabelJobBudget: "x"}
	cl := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).
		WithObjects(jobBudget(a), jobBudget(b), userBudget("team", "app", "x"), forged).Build()
	n, err := RemoveJobBudgets(ctx, cl, []string{"ci"})
	if err != nil || n != 1 {
		t.Fatalf("RemoveJobBudgets(ci) = %d, %v; want 1", n, err)
	}
	if n, err = RemoveJobBudgets(ctx, cl, nil); err != nil || n != 1 {
		t.Fatalf("RemoveJobBudgets(all) = %d, %v; want 1 (the other namespace's)", n, err)
	}
	var left policyv1.PodDisruptionBudgetList
	if err := cl.List(ctx, &left); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 2 {
		t.Errorf("%d budgets left, want the user's two", len(left.Items))
	}
}

// A budget's events reach the runner pods they concern: a job budget its
// own pod; another budget, created or deleted or with a new selector, the
// runner pods of its namespace it selects; a status update nothing.
func TestBudgetEventsReachTheirPods(t *testing.T) {
	scheme, err := cacheScheme()
	if err != nil {
		t.Fatal(err)
	}
	runner := func(name string, labels map[string]string) *cachedPod {
		p := runnerPod(name, "n1")
		for k, v := range labels {
			p.Labels[k] = v
		}
		return decodeCached(t, p)
	}
	other := runner("other-ns", map[string]string{"app": "x"})
	other.Namespace = "elsewhere"
	web := decodeCached(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: "web", Labels: map[string]string{"app": "x"}}})
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(runner("a", map[string]string{"app": "x"}), runner("b", nil), other, web).Build()
	h := budgetPods(c, func(cp *cachedPod) bool { return cp.labels.Get("runner") == "true" })
	names := func(q *queueStub) []string {
		var out []string
		for _, r := range q.added {
			out = append(out, r.Namespace+"/"+r.Name)
		}
		slices.Sort(out)
		return out
	}
	ctx := context.Background()
	user := userBudget("team", "app", "x")
	job := jobBudget(runnerPod("b", "n1"))

	statusOnly := user.DeepCopy()
	statusOnly.Status.DisruptionsAllowed = 3
	reselected := user.DeepCopy()
	reselected.Generation++
	reselected.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"runner": "true"}}

	cases := map[string]struct {
		// before nil: a create; after nil: a delete; both: an update.
		before, after *policyv1.PodDisruptionBudget
		want          []string
	}{
		"a user's budget created: the runner pods it selects": {after: user, want: []string{"ci/a"}},
		"a user's budget deleted: the same":                   {before: user, want: []string{"ci/a"}},
		"a job budget: its pod":                               {before: job, want: []string{"ci/b"}},
		"a status update: nothing":                            {before: user, after: statusOnly},
		"a new selector: the pods of both":                    {before: user, after: reselected, want: []string{"ci/a", "ci/a", "ci/b"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			q := &queueStub{}
			switch {
			case tc.before == nil:
				h.Create(ctx, event.TypedCreateEvent[*policyv1.PodDisruptionBudget]{Object: tc.after}, q)
			case tc.after == nil:
				h.Delete(ctx, event.TypedDeleteEvent[*policyv1.PodDisruptionBudget]{Object: tc.before}, q)
			default:
				h.Update(ctx, event.TypedUpdateEvent[*policyv1.PodDisruptionBudget]{ObjectOld: tc.before, ObjectNew: tc.after}, q)
			}
			if got := names(q); !slices.Equal(got, tc.want) {
				t.Errorf("enqueued %v, want %v", got, tc.want)
			}
		})
	}
}

// queueStub records what a handler adds.
type queueStub struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	added []reconcile.Request
}

func (q *queueStub) Add(r reconcile.Request) { q.added = append(q.added, r) }
