package main

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/runner-guard/runner-guard/test/e2e/framework"
)

// chartReplicas is the chart's replicaCount: the figures taken on a real API
// server run the webhook as the chart does, that many replicas behind one
// address (issue 37), unless a figure says otherwise.
const chartReplicas = 2

// harness is the e2e harness (kube-apiserver, etcd, kube-controller-manager
// and the fake GitHub) with the webhook running as replicas behind the
// address the API server calls.
type harness struct {
	fenv *framework.Env
	dyn  dynamic.Interface
	// replicas, when set, run in place of the harness's single webhook.
	replicas *framework.Replicas
	// args are the flags each replica runs with.
	args []string
}

// harnessOptions are the harness's options as `make bench` sets them up.
func harnessOptions() (framework.Options, error) {
	opts, err := framework.FromEnvironment()
	if err != nil {
		return opts, fmt.Errorf("needs the control plane (`make bench` sets it up): %w", err)
	}
	return opts, nil
}

// startHarness starts the harness with opts and runs the webhook as
// `replicas` replicas (1: the harness's single process, with
// opts.WebhookArgs); stop ends it all.
func startHarness(ctx context.Context, opts framework.Options, replicas int) (h *harness, stop func(), err error) {
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
	h = &harness{fenv: fenv, dyn: dyn, args: opts.WebhookArgs}
	if replicas == 1 {
		return h, stop, nil
	}
	if err := h.scale(ctx, replicas); err != nil {
		stop()
		return nil, nil, err
	}
	return h, stop, nil
}

// startHarnessWithin is startHarness under a context that ends after
// timeout or at stop.
func startHarnessWithin(timeout time.Duration, opts framework.Options, replicas int) (ctx context.Context, h *harness, stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	h, stopHarness, err := startHarness(ctx, opts, replicas)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, h, func() { stopHarness(); cancel() }, nil
}

// onDisruptionBench runs fn on a fresh harness with kube-controller-manager's
// disruption controller too (job budgets get their status, as in a cluster)
// and the chart's replicas, within timeout.
func onDisruptionBench(timeout time.Duration, fn func(context.Context, *disruptionBench) error) error {
	opts, err := harnessOptions()
	if err != nil {
		return err
	}
	opts.Controllers = append(framework.DefaultControllers(), "disruption-controller")
	ctx, h, stop, err := startHarnessWithin(timeout, opts, chartReplicas)
	if err != nil {
		return err
	}
	defer stop()
	return fn(ctx, &disruptionBench{harness: h})
}

// scale runs the webhook as n replicas behind the registered address (1:
// the harness's single process) and waits until one of them leads the
// disruption controllers.
func (h *harness) scale(ctx context.Context, n int) error {
	if h.replicas != nil {
		// Stop starts the single webhook again, with the same flags.
		if err := h.replicas.Stop(ctx); err != nil {
			return fmt.Errorf("stop %d replicas: %w", len(h.replicas.Served()), err)
		}
		h.replicas = nil
	}
	if n > 1 {
		r, err := h.fenv.StartReplicas(ctx, n, h.args...)
		if err != nil {
			return err
		}
		h.replicas = r
	}
	return h.waitForLeader(ctx, n)
}

// running is how many replicas run.
func (h *harness) running() int {
	if h.replicas == nil {
		return 1
	}
	return len(h.replicas.Served())
}

// scaleTo is scale unless n replicas already run.
func (h *harness) scaleTo(ctx context.Context, n int) error {
	if h.running() == n {
		return nil
	}
	return h.scale(ctx, n)
}

// scaleToZero stops every replica: runner-guard scaled to 0.
func (h *harness) scaleToZero(ctx context.Context) error {
	if err := h.scale(ctx, 1); err != nil {
		return err
	}
	return h.fenv.StopWebhook()
}

// waitForLeader waits until the disruption controllers' Lease has a holder:
// a stopped replica gives it up (ReleaseOnCancel), so the holder is live.
func (h *harness) waitForLeader(ctx context.Context, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		lease, err := h.fenv.Client.CoordinationV1().Leases("runner-guard-system").Get(ctx, "runner-guard-disruption", metav1.GetOptions{})
		if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no replica of %d leads the disruption controllers a minute on (%v)", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
