package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// eventsOnly is --events-only: the process serves GitHub's workflow_job
// deliveries (--events-bind-address), /metrics and the probes, and nothing
// else: no admission webhook (so no serving certificate), no activation, no
// disruption or re-run controllers, no leader election, and no GitHub
// client. The chart runs it as a Deployment of its own, so a flood of
// deliveries cannot take the memory of the process that answers admission.
//
// It resolves pods exactly as the webhook does (the same --config: runner
// pod specs, scope bindings, runnerNamespaces), reading ARC's objects but
// never a runner's credentials, in credentials mode arc too: which runner a
// pod runs and its scope come from the EphemeralRunner or Runner that
// controls the pod, not from its githubConfigSecret. So its ServiceAccount
// needs no Secret.
func eventsOnly(ctx context.Context, opts *options, getenv func(string) string, stderr io.Writer) error {
	if opts.events.bindAddress == "" {
		return errors.New("--events-bind-address: required with --events-only")
	}
	// The same secrets, and the same annotation keys, as the webhook's.
	secrets, err := opts.events.load()
	if err != nil {
		return err
	}
	hcfg, err := opts.handlerConfig(getenv)
	if err != nil {
		return err
	}
	logger := opts.setLogger(stderr)
	log := logger.WithName("setup")

	// As the webhook's; only signed deliveries reach the API server.
	restCfg, err := opts.apiConfig("events")
	if err != nil {
		return err
	}
	// No webhook server is asked for, so none is started; no leader election.
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{Metrics: opts.metricsServer(opts.servingTLS()), HealthProbeBindAddress: opts.healthProbeBindAddr})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if err := metrics.Registry.Register(buildInfo(version)); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	// Live reads, as the webhook's: a delivery names a pod by name, and the
	// runner it resolves must be the current one.
	live, err := client.New(restCfg, client.Options{Scheme: mgr.GetScheme(), Mapper: webhook.DecisionRESTMapper()})
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	// Identity only: the EphemeralRunner or Runner that controls a pod (its
	// runner's name and scope, and that it is the pod's owner), never its
	// githubConfigSecret, whatever credentialsMode says; no Writer, so
	// nothing is retired.
	runners := arc.NewResolver(arc.Options{Reader: live})
	handler, err := newGuard(mgr, webhook.Options{
		Config:  hcfg,
		GitHub:  events.NoGitHub{Err: errNoGitHub},
		Runners: runners,
	}, opts.events.bindAddress, secrets, live, logger)
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("events", listening(opts.events.bindAddress)); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	if !handler.ScopesOpen() && opts.events.secretFile != "" {
		log.Info(singleSecretWarning)
	}
	log.Info("starting runner-guard's events endpoint only (--events-only)", "version", version, "address", opts.events.bindAddress)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	log.Info("stopped")
	return nil
}

// listening is ready once the events endpoint accepts connections.
func listening(address string) healthz.Checker {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return func(*http.Request) error { return fmt.Errorf("--events-bind-address %q: %w", address, err) }
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	target := net.JoinHostPort(host, port)
	return func(req *http.Request) error {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(req.Context(), "tcp", target)
		if err != nil {
			return fmt.Errorf("events endpoint %s: %w", target, err)
		}
		return c.Close()
	}
}

// errNoGitHub answers the resolver's GitHub calls: the events endpoint
// asks GitHub nothing, and nothing of the handler but resolving runs.
var errNoGitHub = errors.New("--events-only asks GitHub nothing")
