package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

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
	// The job budgets' figures need the budgets' status computed, as in a cluster.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, stop, err := startDisruptionBench(ctx, append(framework.DefaultControllers(), "disruption-controller"))
	if err != nil {
		return err
	}
	defer stop()
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
}

// startDisruptionBench starts the e2e harness with kube-controller-manager's
// controllers (nil: the harness's default); stop ends it.
func startDisruptionBench(ctx context.Context, controllers []string) (d *disruptionBench, stop func(), err error) {
	opts, err := framework.FromEnvironment()
	if err != nil {
		return nil, nil, fmt.Errorf("needs the control plane (`make bench` sets it up): %w", err)
	}
	opts.Controllers = controllers
	fenv, err := framework.Start(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	stop = func() {
		fenv.Stop()
		_ = os.RemoveAll(fenv.Dir)
	}
	dyn, err := dynamic.NewForConfig(fenv.Config)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return &disruptionBench{fenv: fenv, dyn: dyn}, stop, nil
}

type disruptionBench struct {
	fenv *framework.Env
	dyn  dynamic.Interface
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

// runners creates namespace ns and n idle scale-set runners named
// prefix-000, prefix-001, ... on node.
func (d *disruptionBench) runners(ctx context.Context, ns, prefix string, n int, node string, scope ghclient.Scope) error {
	if err := d.fenv.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	for i := range n {
		if err := d.runner(ctx, ns, fmt.Sprintf("%s-%03d", prefix, i), node, scope); err != nil {
			return err
		}
	}
	return nil
}

// hintLag: job fields set on the EphemeralRunner (the listener's patch) →
// karpenter.sh/do-not-disrupt on the pod, one runner at a time.
func (d *disruptionBench) hintLag(ctx context.Context, e *env) error {
	const ns = "bench-hints"
	scope := org("bench-hints")
	if err := d.runners(ctx, ns, "hint", hintRuns, framework.NodeName, scope); err != nil {
		return err
	}
	before := len(d.fenv.GitHub.Requests())
	var lags []time.Duration
	for i := range hintRuns {
		name := fmt.Sprintf("hint-%03d", i)
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"jobRequestId": 1000 + i, "jobId": fmt.Sprint(1000 + i), "jobRepositoryName": "acme/app", "jobDisplayName": "build"}})
		lag, err := hintLagOf(ctx, d.fenv, ns, name, func() error {
			_, err := d.dyn.Resource(framework.EphemeralRunnerResource()).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
			return err
		})
		if err != nil {
			return err
		}
		lags = append(lags, lag)
	}
	requests := len(d.fenv.GitHub.Requests()) - before
	slices.Sort(lags)
	p99, p50 := pct(lags, 0.99), pct(lags, 0.50)
	progress("hint lag: %d runners, p50 %s, p99 %s, %d GitHub requests", hintRuns, p50.Round(time.Millisecond), p99.Round(time.Millisecond), requests)
	e.record("hint_lag_p99_ms", ms(p99), "ms", "<= 1000, 0 GitHub requests", ms(p99) <= 1000 && requests == 0,
		fmt.Sprintf("job fields set on the EphemeralRunner -> %s on the pod, real API server; p50 %.0f ms; %d GitHub requests", disruption.AnnotationDoNotDisrupt, ms(p50), requests))
	return nil
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
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch closed before %s appeared", key)
			}
			if pod, isPod := ev.Object.(*corev1.Pod); isPod && pod.Annotations[key] != "" {
				return nil
			}
		}
	}
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
	if _, err := d.fenv.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		return err
	}
	for {
		pods, err := d.fenv.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		alive := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				alive++
			}
		}
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
