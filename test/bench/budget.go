package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// Sizes of the budget runs: a node of budgetRunners idle runners under a
// budget that allows budgetAllows disruptions.
const (
	budgetRunners = 20
	budgetAllows  = 5
	budgetLabel   = "bench-budget"
)

// budgetRun drives runner-guard under a PodDisruptionBudget that
// kube-controller-manager's disruption controller keeps (it runs here,
// unlike in the e2e suite): evictions sent all at once, as kubectl drain
// sends them, over one replica and then over 2 and 3 behind one address
// (issue 37), and runner-guard's own drain of the same node by the chart's
// replicas.
func (e *env) budgetRun() error {
	return onDisruptionBench(8*time.Minute, func(ctx context.Context, d *disruptionBench) error {
		b := &budgetBench{disruptionBench: *d}
		turnaround, err := b.evictAll(ctx, e, 1)
		if err != nil {
			return fmt.Errorf("evictions at once: %w", err)
		}
		for _, n := range []int{2, 3} {
			if _, err := b.evictAll(ctx, e, n); err != nil {
				return fmt.Errorf("evictions at once over %d replicas: %w", n, err)
			}
		}
		if err := b.drain(ctx, e, turnaround, chartReplicas); err != nil {
			return fmt.Errorf("drain over %d replicas: %w", chartReplicas, err)
		}
		return nil
	})
}

// budgetPlace is where one budget run happens: its namespace and node, and
// the figure it reports.
type budgetPlace struct{ ns, node, figure string }

// placeBudgetRun names a run of prefix over replicas: the figure is
// figure when replicas is plainAt, else figure_<n>_replicas.
func placeBudgetRun(prefix, figure string, replicas, plainAt int) budgetPlace {
	p := budgetPlace{ns: prefix, node: prefix + "-node", figure: figure}
	if replicas != plainAt {
		suffix := fmt.Sprintf("-%d-replicas", replicas)
		p = budgetPlace{ns: prefix + suffix, node: prefix + "-node" + suffix, figure: fmt.Sprintf("%s_%d_replicas", figure, replicas)}
	}
	return p
}

type budgetBench struct {
	disruptionBench
}

// node makes a namespace with budgetRunners idle scale-set runners on node,
// labelled for a budget (minAvailable budgetRunners-budgetAllows) it creates.
func (b *budgetBench) node(ctx context.Context, ns, node string, scope ghclient.Scope) error {
	if err := b.fenv.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	if err := b.fenv.EnsureNode(ctx, node); err != nil {
		return err
	}
	for i := range budgetRunners {
		name := fmt.Sprintf("idle-%03d", i)
		id := b.fenv.GitHub.AddRunner(scope, name)
		w := fixture.MakeEphemeralRunner(ns, name).ConfigURL("https://github.com/" + scope.Name).RunnerID(id).RunnerName(name)
		want := w.Obj()
		want.SetUID("")
		created, err := framework.CreateEphemeralRunner(ctx, b.dyn, want)
		if err != nil {
			return err
		}
		pod := fixture.MakeScaleSetRunnerPod(ns, name).OwnedByEphemeralRunner(&fixture.EphemeralRunnerWrapper{Unstructured: *created}).Obj()
		pod.Labels[budgetLabel] = "runners"
		pod.Spec.NodeName = node
		if _, err := b.fenv.CreateRunningPod(ctx, pod); err != nil {
			return err
		}
	}
	minAvailable := intstr.FromInt32(budgetRunners - budgetAllows)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runners"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{budgetLabel: "runners"}}},
	}
	if _, err := b.fenv.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := b.allows(ctx, ns, time.Minute)
	return err
}

// replace plays ARC and the scheduler: a Ready pod the budget selects, on
// another node, for each runner pod gone from the drained one.
func (b *budgetBench) replace(ctx context.Context, ns, name string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "new-" + name, Labels: map[string]string{budgetLabel: "runners"}},
		Spec:       corev1.PodSpec{NodeName: framework.NodeName, Containers: []corev1.Container{{Name: "runner", Image: "actions-runner:bench"}}},
	}
	_, err := b.fenv.CreateRunningPod(ctx, pod)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// allows waits until kube-controller-manager says the budget allows a
// disruption, and returns how many.
func (b *budgetBench) allows(ctx context.Context, ns string, within time.Duration) (int32, error) {
	deadline := time.Now().Add(within)
	for {
		pdb, err := b.fenv.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "runners", metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		if pdb.Status.ObservedGeneration >= pdb.Generation && pdb.Status.DisruptionsAllowed > 0 {
			return pdb.Status.DisruptionsAllowed, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("budget %s/runners allows no disruption %s on (status %+v)", ns, within, pdb.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive lists the pods on node that are not terminating.
func (b *budgetBench) alive(ctx context.Context, ns, node string) ([]corev1.Pod, error) {
	pods, _, err := b.podsOnNode(ctx, ns, node)
	return pods, err
}

// unregisteredStaying lists runners gone from GitHub whose pod on node is
// not terminating: the figure the budget work is about.
func (b *budgetBench) unregisteredStaying(ctx context.Context, ns, node string, scope ghclient.Scope) ([]string, error) {
	pods, err := b.alive(ctx, ns, node)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods {
		if _, ok := b.fenv.GitHub.Runner(scope, p.Name); !ok {
			out = append(out, p.Name)
		}
	}
	return out, nil
}

// evictAll: every idle runner pod of the node evicted at once, again and
// again until the node is empty; each round's evicted pods are replaced
// elsewhere so the budget opens again. It returns the budget's turnaround:
// the longest wait from a round's evictions to kube-controller-manager
// allowing a disruption again. With replicas > 1 the webhook runs as that
// many replicas behind one address, and the figure is
// unregistered_beyond_budget_<n>_replicas.
func (b *budgetBench) evictAll(ctx context.Context, e *env, replicas int) (time.Duration, error) {
	p := placeBudgetRun("bench-budget-evict", "unregistered_beyond_budget", replicas, 1)
	ns, node, figure := p.ns, p.node, p.figure
	if err := b.scaleTo(ctx, replicas); err != nil {
		return 0, err
	}
	scope := org(ns)
	if err := b.node(ctx, ns, node, scope); err != nil {
		return 0, err
	}
	var (
		beyond, rounds       int
		turnaround, fromLast time.Duration
		start                = time.Now()
	)
	for {
		pods, err := b.alive(ctx, ns, node)
		if err != nil {
			return 0, err
		}
		if len(pods) == 0 {
			break
		}
		if rounds++; rounds > 4*budgetRunners {
			return 0, fmt.Errorf("%d pods still on the node after %d rounds", len(pods), rounds)
		}
		evicted := make([]time.Time, len(pods))
		var wg sync.WaitGroup
		for i := range pods {
			wg.Go(func() {
				ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pods[i].Name}}
				err := b.fenv.Client.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pods[i].Name).
					SubResource("eviction").Body(ev).MaxRetries(0).Do(ctx).Error()
				if err == nil {
					evicted[i] = time.Now()
				}
			})
		}
		wg.Wait()
		// The turnaround runs from the round's first admitted eviction: the
		// API server answers the others later when their budget writes
		// conflict (it retries a conflict after 500 ms), and a drain waits
		// for those too.
		var admitted time.Time
		for _, at := range evicted {
			if !at.IsZero() && (admitted.IsZero() || at.Before(admitted)) {
				admitted = at
			}
		}
		lastAnswer := time.Now()
		for i, at := range evicted {
			if !at.IsZero() {
				if err := b.replace(ctx, ns, pods[i].Name); err != nil {
					return 0, err
				}
			}
		}
		// Every eviction has been answered: an unregistered runner whose pod
		// is not terminating now stays.
		staying, err := b.unregisteredStaying(ctx, ns, node, scope)
		if err != nil {
			return 0, err
		}
		beyond = max(beyond, len(staying))
		if left, err := b.alive(ctx, ns, node); err != nil || len(left) == 0 {
			if err != nil {
				return 0, err
			}
			break
		}
		if _, err := b.allows(ctx, ns, time.Minute); err != nil {
			return 0, err
		}
		if !admitted.IsZero() {
			turnaround = max(turnaround, time.Since(admitted))
		}
		fromLast = max(fromLast, time.Since(lastAnswer))
	}
	progress("budget: %d idle runners evicted at once under a budget allowing %d over %d replica(s): node empty after %d rounds (%s), at most %d unregistered runners whose pod stayed; budget turnaround %s (%s from the round's last answer)",
		budgetRunners, budgetAllows, replicas, rounds, time.Since(start).Round(time.Millisecond), beyond, turnaround.Round(time.Millisecond), fromLast.Round(time.Millisecond))
	over := ""
	if replicas > 1 {
		over = fmt.Sprintf(", spread over %d webhook replicas behind one address", replicas)
	}
	e.record(figure, float64(beyond), "runners", "0", beyond == 0,
		fmt.Sprintf("%d idle Ready runner pods, a budget allowing %d, all evicted at once until the node is empty (%d rounds%s): runners unregistered whose pod then stayed", budgetRunners, budgetAllows, rounds, over))
	if replicas == 1 {
		e.record("budget_turnaround_s", turnaround.Seconds(), "s", "reported", true,
			fmt.Sprintf("from a round's first admitted eviction to kube-controller-manager allowing a disruption again (%.2f s from the round's last answer)", fromLast.Seconds()))
	}
	return turnaround, nil
}

// drain: the same node drained by runner-guard's drain controller (cordon),
// the evicted pods replaced elsewhere as ARC would, the webhook running as
// `replicas` replicas behind one address (the leader drains; any replica
// decides its evictions). The figure is drain_budget_node_s at the chart's
// replicas, drain_budget_node_s_<n>_replicas at others.
func (b *budgetBench) drain(ctx context.Context, e *env, turnaround time.Duration, replicas int) error {
	p := placeBudgetRun("bench-budget-drain", "drain_budget_node_s", replicas, chartReplicas)
	ns, node, figure := p.ns, p.node, p.figure
	if err := b.scaleTo(ctx, replicas); err != nil {
		return err
	}
	scope := org(ns)
	if err := b.node(ctx, ns, node, scope); err != nil {
		return err
	}
	start := time.Now()
	if err := b.cordon(ctx, node); err != nil {
		return err
	}
	// The drain evicts a pod a moment after it unregistered the runner: a
	// pod counts once it stays for stayFor with its runner gone.
	const stayFor = 2 * time.Second
	seen := map[string]time.Time{}
	counted := map[string]bool{}
	for {
		pods, leaving, err := b.podsOnNode(ctx, ns, node)
		if err != nil {
			return err
		}
		alive := len(pods)
		for _, p := range leaving {
			if err := b.replace(ctx, ns, p.Name); err != nil {
				return err
			}
		}
		staying, err := b.unregisteredStaying(ctx, ns, node, scope)
		if err != nil {
			return err
		}
		for _, name := range staying {
			if _, ok := seen[name]; !ok {
				seen[name] = time.Now()
			}
			if time.Since(seen[name]) > stayFor {
				counted[name] = true
			}
		}
		if alive == 0 {
			break
		}
		if time.Since(start) > 3*time.Minute {
			return fmt.Errorf("%d of %d runner pods still on the node 3 minutes after the cordon", alive, budgetRunners)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	limit := 4 * turnaround
	beyond := len(counted)
	progress("budget drain over %d replica(s): %d idle runners released %s after the cordon (budget turnaround %s); at most %d unregistered runners whose pod stayed",
		replicas, budgetRunners, took.Round(time.Millisecond), turnaround.Round(time.Millisecond), beyond)
	e.record(figure, took.Seconds(), "s", fmt.Sprintf("<= 4 x turnaround (%.1f s)", limit.Seconds()), took <= limit && beyond == 0,
		fmt.Sprintf("cordon -> the last of %d idle runners' pods gone under a budget allowing %d, %d webhook replica(s); turnaround %.2f s; %d unregistered whose pod stayed", budgetRunners, budgetAllows, replicas, turnaround.Seconds(), beyond))
	return nil
}
