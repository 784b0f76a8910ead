package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// Sizes of the disruption runs.
const (
	hintRuns    = 60
	drainRunner = 20
)

// disruptionRun drives the real binary's disruption controller on a real
// API server (the e2e harness: kube-apiserver, etcd, kube-controller-manager
// and the fake GitHub): the lag from an EphemeralRunner's job fields to the
// hints on its pod, and from `kubectl cordon` to the last idle runner's pod
// deleted.
func (e *env) disruptionRun() error {
	return onDisruptionBench(10*time.Minute, func(ctx context.Context, d *disruptionBench) error {
		if err := d.hintLag(ctx, e); err != nil {
			return fmt.Errorf("hint lag: %w", err)
		}
		if err := d.drainIdle(ctx, e); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
		if err := d.budgetLag(ctx, e); err != nil {
			return fmt.Errorf("budget lag: %w", err)
		}
		if err := d.budgetsPerRunner(ctx, e); err != nil {
			return fmt.Errorf("budgets per runner: %w", err)
		}
		// Last: it stops the webhook.
		if err := d.webhookDownEvictions(ctx, e); err != nil {
			return fmt.Errorf("evictions with runner-guard down: %w", err)
		}
		return nil
	})
}

// disruptionBench runs figures on the harness.
type disruptionBench struct {
	*harness
}

// runner creates a registered, idle scale-set runner: its EphemeralRunner
// (status set) and its running pod on node.
func (d *disruptionBench) runner(ctx context.Context, ns, name, node string, scope ghclient.Scope) error {
	id := d.fenv.GitHub.AddRunner(scope, name)
	w := fixture.MakeEphemeralRunner(ns, name).ConfigURL("https://github.com/" + scope.Name).RunnerID(id).RunnerName(name)
	want := w.Obj()
	want.SetUID("")
	want.SetFinalizers(nil)
	created, err := framework.CreateEphemeralRunner(ctx, d.dyn, want)
	if err != nil {
		return err
	}
	pod := fixture.MakeScaleSetRunnerPod(ns, name).OwnedByEphemeralRunner(&fixture.EphemeralRunnerWrapper{Unstructured: *created}).Obj()
	pod.Spec.NodeName = node
	if err := d.fenv.EnsureNode(ctx, node); err != nil {
		return err
	}
	_, err = d.fenv.CreateRunningPod(ctx, pod)
	return err
}

// runners creates namespace ns and n idle scale-set runners of the
// organization named ns, prefix-000, prefix-001, ... on the harness's node,
// and returns their names.
func (d *disruptionBench) runners(ctx context.Context, ns, prefix string, n int) ([]string, error) {
	if err := d.fenv.CreateNamespace(ctx, ns); err != nil {
		return nil, err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
		if err := d.runner(ctx, ns, names[i], framework.NodeName, org(ns)); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// runnerLags is measureLags over n idle scale-set runners made in ns.
func (d *disruptionBench) runnerLags(ctx context.Context, e *env, ns, prefix string, n int, figure, target, what string, measure func(i int, name string) ([]time.Duration, error)) error {
	names, err := d.runners(ctx, ns, prefix, n)
	if err != nil {
		return err
	}
	return e.measureLags(figure, target, what, d.fenv.GitHub, names, measure)
}

// measureLags runs measure for each name in turn and records the p99 of
// every lag it took as figure, met when it is at most a second and no
// GitHub request was made meanwhile.
func (e *env) measureLags(figure, target, what string, gh framework.GitHub, names []string, measure func(i int, name string) ([]time.Duration, error)) error {
	before := len(gh.Requests())
	var lags []time.Duration
	for i, name := range names {
		l, err := measure(i, name)
		if err != nil {
			return err
		}
		lags = append(lags, l...)
	}
	requests := len(gh.Requests()) - before
	slices.Sort(lags)
	p99, p50 := pct(lags, 0.99), pct(lags, 0.50)
	progress("%s: %d lags, p50 %s, p99 %s, %d GitHub requests", figure, len(lags), p50.Round(time.Millisecond), p99.Round(time.Millisecond), requests)
	e.record(figure, ms(p99), "ms", target, ms(p99) <= 1000 && requests == 0,
		fmt.Sprintf("%s; p50 %.0f ms; %d GitHub requests", what, ms(p50), requests))
	return nil
}

// hintLag: job fields set on the EphemeralRunner (the listener's patch) →
// karpenter.sh/do-not-disrupt on the pod, one runner at a time.
func (d *disruptionBench) hintLag(ctx context.Context, e *env) error {
	const ns = "bench-hints"
	return d.runnerLags(ctx, e, ns, "hint", hintRuns, "hint_lag_p99_ms", "<= 1000, 0 GitHub requests", fmt.Sprintf("job fields set on the EphemeralRunner -> %s on the pod, real API server", disruption.AnnotationDoNotDisrupt), func(i int, name string) ([]time.Duration, error) {
		lag, err := hintLagOf(ctx, d.fenv, ns, name, func() error { return d.setStatus(ctx, ns, name, jobFields(1000+i)) })
		return []time.Duration{lag}, err
	})
}

// hintLagOf watches pod ns/name, runs start, and returns how long until the
// pod carries karpenter.sh/do-not-disrupt.
func hintLagOf(ctx context.Context, fenv *framework.Env, ns, name string, start func() error) (time.Duration, error) {
	w, err := fenv.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	began := time.Now()
	if err := start(); err != nil {
		return 0, err
	}
	if err := untilAnnotated(ctx, w, disruption.AnnotationDoNotDisrupt); err != nil {
		return 0, fmt.Errorf("pod %s: %w", name, err)
	}
	return time.Since(began), nil
}

// untilAnnotated waits on a pod watch until the pod carries the annotation.
func untilAnnotated(ctx context.Context, w watch.Interface, key string) error {
	return untilEvent(ctx, w, key+" on the pod", func(ev watch.Event) bool {
		pod, isPod := ev.Object.(*corev1.Pod)
		return isPod && pod.Annotations[key] != ""
	})
}

// untilEvent waits on w for an event match accepts (what names it).
func untilEvent(ctx context.Context, w watch.Interface, what string, match func(watch.Event) bool) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch closed before %s", what)
			}
			if match(ev) {
				return nil
			}
		}
	}
}

// cordon marks node unschedulable, as `kubectl cordon` does.
func (d *disruptionBench) cordon(ctx context.Context, node string) error {
	_, err := d.fenv.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	return err
}

// podsOnNode lists the pods of ns on node: those not terminating, and those
// leaving (terminating).
func (d *disruptionBench) podsOnNode(ctx context.Context, ns, node string) (alive, leaving []corev1.Pod, err error) {
	pods, err := d.fenv.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for _, p := range pods.Items {
		switch {
		case p.Spec.NodeName != node:
		case p.DeletionTimestamp == nil:
			alive = append(alive, p)
		default:
			leaving = append(leaving, p)
		}
	}
	return alive, leaving, nil
}

// drainIdle: cordon a node with drainRunner idle runners → the last one's
// pod deleted (unregistered first).
func (d *disruptionBench) drainIdle(ctx context.Context, e *env) error {
	const ns, node = "bench-drain", "bench-drain-node"
	scope := org("bench-drain")
	if err := d.fenv.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	for i := range drainRunner {
		if err := d.runner(ctx, ns, fmt.Sprintf("idle-%03d", i), node, scope); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := d.cordon(ctx, node); err != nil {
		return err
	}
	for {
		pods, _, err := d.podsOnNode(ctx, ns, node)
		if err != nil {
			return err
		}
		alive := len(pods)
		if alive == 0 {
			break
		}
		if time.Since(start) > time.Minute {
			return fmt.Errorf("%d of %d idle runner pods still alive a minute after the cordon", alive, drainRunner)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	registered := 0
	for i := range drainRunner {
		if _, ok := d.fenv.GitHub.Runner(scope, fmt.Sprintf("idle-%03d", i)); ok {
			registered++
		}
	}
	progress("drain: %d idle runners released %s after the cordon; %d still registered", drainRunner, took.Round(time.Millisecond), registered)
	e.record("drain_idle_node_s", took.Seconds(), "s", "<= 5", took <= 5*time.Second && registered == 0,
		fmt.Sprintf("cordon -> the last of %d idle runners' pods deleted, each unregistered first; %d left registered", drainRunner, registered))
	return nil
}
