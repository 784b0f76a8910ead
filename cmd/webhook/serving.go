package main

import (
	"crypto/tls"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runner-guard/runner-guard/metricsauth"
	"github.com/runner-guard/runner-guard/webhook"
)

// The parts the webhook's process (start) and --events-only (eventsOnly)
// build alike: one piece each, so the two cannot drift apart.

// setLogger makes the process's logger, writing to stderr, controller-runtime's.
func (o *options) setLogger(stderr io.Writer) logr.Logger {
	o.zap.DestWriter = stderr
	logger := zap.New(zap.UseFlagOptions(&o.zap))
	ctrl.SetLogger(logger)
	return logger
}

// apiConfig is the API server's config, the user agent naming the process
// (role "" for the webhook's), without client-side throttling: a namespace
// deletion sends hundreds of decisions at once and GitHub starts many jobs
// at once, waiting 10 s for each answer; throttling would turn them into
// failures. The API server's priority and fairness bounds us.
func (o *options) apiConfig(role string) (*rest.Config, error) {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.UserAgent = "runner-guard/" + version
	if role != "" {
		cfg.UserAgent += " (" + role + ")"
	}
	cfg.QPS, cfg.Burst = -1, 0
	return cfg, nil
}

// servingTLS is the TLS of every server the process runs: TLS 1.2 at least,
// and HTTP/1.1 only unless --enable-http2 (HTTP/2 rapid-reset CVEs).
func (o *options) servingTLS() []func(*tls.Config) {
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !o.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	return tlsOpts
}

// metricsServer serves /metrics on --metrics-bind-address. With
// --metrics-secure, as kubebuilder scaffolds: HTTPS with a self-signed
// certificate, and only requesters the API server authenticates
// (TokenReview) and authorizes for GET /metrics (SubjectAccessReview).
func (o *options) metricsServer(tlsOpts []func(*tls.Config)) metricsserver.Options {
	metricsOpts := metricsserver.Options{BindAddress: o.metricsBindAddress, TLSOpts: tlsOpts}
	if o.metricsSecure {
		metricsOpts.SecureServing = true
		metricsOpts.FilterProvider = metricsauth.Provider
	}
	return metricsOpts
}

// newGuard is the admission handler and, with --events-bind-address, the
// events endpoint that resolves pods with it. Both read pods live, in mgr's
// scheme, and sign and verify job annotations with the keys of the webhook
// secrets: newGuard sets handlerOpts' Pods, Scheme and JobKeys.
func newGuard(mgr ctrl.Manager, handlerOpts webhook.Options, eventsAddress string, secrets webhookSecrets, live client.Client, log logr.Logger) (*webhook.Handler, error) {
	handlerOpts.Pods, handlerOpts.Scheme, handlerOpts.JobKeys = live, mgr.GetScheme(), secrets.keys
	handler, err := webhook.NewHandler(handlerOpts)
	if err != nil {
		return nil, err
	}
	if err := addEventsServer(mgr, eventsAddress, secrets, live, handler, handlerOpts.Config.RunnerNamespaces, log.WithName("events")); err != nil {
		return nil, err
	}
	return handler, nil
}
