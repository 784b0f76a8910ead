package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// leaderRetryWait is how long a replica that lost the lease waits before it
// stands for election again.
const leaderRetryWait = 5 * time.Second

// leaderElected runs the controllers that need one leader in a manager of
// their own, so losing the lease (a slow API server, a partition) stops only
// them: the webhook on the same replica keeps answering, since a webhook that
// exits with its lease would turn a slow API server into failed deletions
// cluster-wide. After a loss the replica stands for election again.
type leaderElected struct {
	cfg   *rest.Config
	opts  ctrl.Options
	setup func(ctx context.Context, mgr ctrl.Manager) error
	log   logr.Logger
	// restart, when set, returns a channel closed when the controllers must
	// be set up anew (ARC's CRDs came or went).
	restart func() <-chan struct{}
}

// errSetUpAnew stops the controllers' manager so that it is built again at once.
var errSetUpAnew = errors.New("the controllers are set up anew")

var _ manager.Runnable = &leaderElected{}

// newLeaderElected prepares the controllers' manager: leader-elected (unless
// elect is false: one replica, or tests), with
// cacheOpts, and no servers of its own (the main manager serves metrics,
// probes and the webhook).
func newLeaderElected(cfg *rest.Config, cacheOpts cache.Options, elect bool, leaseNamespace string, log logr.Logger,
	setup func(ctx context.Context, mgr ctrl.Manager) error) *leaderElected {
	return &leaderElected{
		cfg: cfg,
		opts: ctrl.Options{
			Cache:                         cacheOpts,
			Metrics:                       metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress:        "0",
			LeaderElection:                elect,
			LeaderElectionID:              "runner-guard-disruption",
			LeaderElectionNamespace:       leaseNamespace,
			LeaderElectionReleaseOnCancel: true,
			// A manager is built anew after each lost lease, with the same
			// controller names.
			Controller:              config.Controller{SkipNameValidation: ptr.To(true)},
			GracefulShutdownTimeout: ptr.To(controllersShutdownGrace),
		},
		setup: setup,
		log:   log,
	}
}

// Start runs the controllers until ctx ends, standing for election again
// after every lost lease.
func (l *leaderElected) Start(ctx context.Context) error {
	for {
		err := l.runOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errSetUpAnew) {
			continue
		}
		l.log.Info("the disruption controllers stopped; the webhook keeps serving, and this replica stands for election again", "error", err, "in", leaderRetryWait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(leaderRetryWait):
		}
	}
}

func (l *leaderElected) runOnce(ctx context.Context) error {
	var restart <-chan struct{}
	if l.restart != nil {
		restart = l.restart()
	}
	mgr, err := ctrl.NewManager(l.cfg, l.opts)
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	if err := l.setup(ctx, mgr); err != nil {
		return err
	}
	mctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	select {
	case err := <-done:
		if err == nil && ctx.Err() == nil {
			err = errors.New("controller manager stopped")
		}
		return err
	case <-restart:
		// The lease is released on the way out and taken again by the next manager.
		stop()
		select {
		case err := <-done:
			if err != nil {
				l.log.Info("the disruption controllers stopped with an error before being set up anew", "error", err.Error())
			}
		case <-time.After(controllersShutdownGrace):
		}
		return errSetUpAnew
	case <-ctx.Done():
	}
	// Shutting down: controllers still waiting for a cache that cannot sync
	// (RBAC, a partition) must not hold the webhook's exit past its grace.
	select {
	case err := <-done:
		return err
	case <-time.After(controllersShutdownGrace):
		l.log.Info("the disruption controllers did not stop in time; exiting without them", "grace", controllersShutdownGrace)
	}
	return nil
}

// controllersShutdownGrace bounds how long shutdown waits for the
// controllers; the main manager's own grace is 30s.
const controllersShutdownGrace = 10 * time.Second
