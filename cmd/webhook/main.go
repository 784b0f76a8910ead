// Command webhook runs runner-guard: a validating admission webhook that
// unregisters a GitHub Actions runner before its pod may be deleted or evicted.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/certs/rotation"
	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/explain"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/rerun"
	"github.com/runner-guard/runner-guard/webhook"
	"github.com/runner-guard/runner-guard/webhook/activation"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// version and commit are set at build time with -ldflags "-X main.version=...
// -X main.commit=..." (make build); without commit, --version reports the
// revision Go recorded from the checkout, if any.
var (
	version = "dev"
	commit  = ""
)

func main() {
	os.Exit(run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// run starts runner-guard and blocks until ctx ends. Start-up problems print one
// line naming the flag or field and return 1.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) > 0 && args[0] == "explain" {
		// A command for people, with their own kubeconfig: nothing is served.
		return explain.Main(ctx, "runner-guard", args[1:], stdout, stderr)
	}
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "runner-guard: %s\n", oneLine(err))
		return 2
	}
	if opts.printVersion {
		info, _ := debug.ReadBuildInfo()
		fmt.Fprintln(stdout, versionString(version, commit, info))
		return 0
	}
	if opts.disruption.removeJobBudgets {
		if err := removeJobBudgets(ctx, opts, getenv, stdout); err != nil {
			fmt.Fprintf(stderr, "runner-guard: %s\n", oneLine(err))
			return 1
		}
		return 0
	}
	if opts.eventsOnly {
		if err := eventsOnly(ctx, opts, getenv, stderr); err != nil {
			fmt.Fprintf(stderr, "runner-guard: %s\n", oneLine(err))
			return 1
		}
		return 0
	}
	if err := start(ctx, opts, getenv, stderr); err != nil {
		fmt.Fprintf(stderr, "runner-guard: %s\n", oneLine(err))
		return 1
	}
	return 0
}

// removeJobBudgets is --remove-job-budgets: delete the job budgets
// runner-guard made where it guards pods, and say how many.
func removeJobBudgets(ctx context.Context, opts *options, getenv func(string) string, stdout io.Writer) error {
	hcfg, err := opts.handlerConfig(getenv)
	if err != nil {
		return err
	}
	restCfg, err := restConfig(opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	c, err := client.New(restCfg, client.Options{})
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	n, err := disruption.RemoveJobBudgets(ctx, c, hcfg.RunnerNamespaces)
	if err != nil {
		return fmt.Errorf("--remove-job-budgets: %w", err)
	}
	fmt.Fprintf(stdout, "removed %d job budgets\n", n)
	return nil
}

func start(ctx context.Context, opts *options, getenv func(string) string, stderr io.Writer) error {
	hcfg, err := opts.handlerConfig(getenv)
	if err != nil {
		return err
	}
	arcMode := hcfg.CredentialsMode == webhook.CredentialsARC
	gcfg, err := opts.githubConfig(getenv, arcMode)
	staticCreds := !errors.Is(err, errNoStaticCredentials)
	if err != nil && staticCreds {
		return err
	}
	ca, err := opts.caBundle()
	if err != nil {
		return err
	}
	gcfg.Network.CABundle = ca
	if err := opts.checkServing(); err != nil {
		return err
	}
	if err := opts.selfCerts.check(opts.activation.configurationName, getenv("POD_NAMESPACE")); err != nil {
		return err
	}
	if err := opts.disruption.check(); err != nil {
		return err
	}
	if err := opts.rerun.check(); err != nil {
		return err
	}
	webhookSecrets, err := opts.events.load()
	if err != nil {
		return err
	}
	logger := opts.setLogger(stderr)
	log := logger.WithName("setup")

	ghMetrics := ghclient.NewMetrics()
	gcfg.Metrics = ghMetrics
	// One budget per credential, shared by the static client and every
	// client built from runners' own credentials, whatever sends the request.
	budgets, err := ghclient.NewBudgets(hcfg.GitHubBudget.BudgetConfig(), ghMetrics)
	if err != nil {
		return fmt.Errorf("githubBudget in --config: %w", err)
	}
	gcfg.Budgets = budgets
	var static *ghclient.Client
	if staticCreds {
		if static, err = ghclient.New(gcfg); err != nil {
			return githubConfigError(err)
		}
	}
	if err := opts.rerun.checkRight(ctx, static, log); err != nil {
		return err
	}
	gh, err := ghclient.NewRouter(ghclient.RouterConfig{Default: static, AllowHTTP: opts.githubAllowHTTP,
		CABundle: ca, UserAgent: gcfg.UserAgent, Metrics: ghMetrics, Budgets: budgets})
	if err != nil {
		return fmt.Errorf("GitHub client: %w", err)
	}

	// Every runner-pod decision reads the live pod.
	restCfg, err := opts.apiConfig("")
	if err != nil {
		return err
	}

	tlsOpts := opts.servingTLS()
	serverOpts := ctrlwebhook.Options{
		Host:    opts.webhookHost,
		Port:    opts.webhookPort,
		CertDir: opts.certDir,
		TLSOpts: tlsOpts,
	}
	var rotator *rotation.Rotator
	if opts.selfCerts.enabled() {
		if rotator, err = opts.selfCerts.rotator(restCfg, opts.activation.configurationName, getenv("POD_NAMESPACE"), logger.WithName("certificates")); err != nil {
			return err
		}
		// The webhook (not the metrics server) serves the rotator's certificate.
		serverOpts.TLSOpts = append(slices.Clone(tlsOpts), func(c *tls.Config) { c.GetCertificate = rotator.GetCertificate })
	}
	if opts.clientCAFile != "" {
		// controller-runtime reads ClientCAName from CertDir and then requires
		// and verifies client certificates (tls.RequireAndVerifyClientCert).
		serverOpts.ClientCAName, err = filepath.Rel(opts.certDir, opts.clientCAFile)
		if err != nil || strings.HasPrefix(serverOpts.ClientCAName, "..") {
			return fmt.Errorf("--client-ca-file: %s must be inside --cert-dir %s", opts.clientCAFile, opts.certDir)
		}
	}
	server := ctrlwebhook.NewServer(serverOpts)
	metricsOpts := opts.metricsServer(tlsOpts)
	cacheOpts := cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
	if len(hcfg.RunnerNamespaces) > 0 {
		// The controllers watch runner pods and EphemeralRunners only where
		// runner-guard guards them (and is granted them).
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range hcfg.RunnerNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Metrics:                metricsOpts,
		HealthProbeBindAddress: opts.healthProbeBindAddr,
		WebhookServer:          server,
		// No leader election here: the webhook and the Retirer serve on
		// every replica; the hint and drain controllers elect a leader in
		// a manager of their own (leader.go).
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}

	hMetrics := webhook.NewMetrics()
	dMetrics := disruption.NewMetrics()
	// One runner_guard_jobs_lost_total, defined in disruption, counted by the re-run controller.
	rerunMetrics := rerun.NewMetrics(dMetrics.JobsLost)
	for _, c := range slices.Concat(hMetrics.Collectors(), ghMetrics.Collectors(), gh.Collectors(), dMetrics.Collectors(), rerunMetrics.Collectors(), []prometheus.Collector{buildInfo(version)}) {
		if err := metrics.Registry.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	// A decision reads live, never from a cache: it needs the current pod and
	// EphemeralRunner. Deletes (retiring a runner) go straight to the API. The
	// mapper is fixed, so no discovery request without a deadline ever runs
	// inside a decision.
	live, err := client.New(restCfg, client.Options{Scheme: mgr.GetScheme(), Mapper: webhook.DecisionRESTMapper()})
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	runners := arc.NewResolver(arc.Options{Reader: live, Writer: live, CredentialsFromARC: arcMode, StaticCredentials: staticCreds})
	// Retiring happens after the admission call, on the replica that
	// admitted the deletion.
	var retirements webhook.Retirements
	retirer := disruption.NewRetirer(runners, live, hMetrics, logger.WithName("retire"))
	if *hcfg.RetireEphemeralRunners {
		if err := mgr.Add(retirer); err != nil {
			return fmt.Errorf("retirer: %w", err)
		}
		retirements = retirer
	} else {
		retirer = nil
	}
	events := mgr.GetEventRecorder("runner-guard")
	// Replicas count each other's evictions under a budget (issue 37).
	reservations, err := budgetReservations(live, getenv, logger.WithName("budget-reservations"))
	if err != nil {
		return err
	}
	handler, err := newGuard(mgr, webhook.Options{
		Reservations:  reservations,
		ReleasedBy:    selfUser(ctx, restCfg, log),
		Retirements:   retirements,
		Config:        hcfg,
		GitHub:        gh,
		Runners:       runners,
		GitHubBaseURL: staticBaseURL(staticCreds, gcfg.BaseURL),
		Events:        events,
		Metrics:       hMetrics,
	}, opts.events.bindAddress, webhookSecrets, live, logger)
	if err != nil {
		return err
	}
	// GetWebhookServer, not server: the manager starts the server only once it has been asked for it.
	mgr.GetWebhookServer().Register(webhook.Path, &admission.Webhook{Handler: handler})

	if opts.disruption.enabled() {
		controllers := newLeaderElected(restCfg, cacheOpts, opts.disruption.leaderElect, opts.disruption.leaseNamespace(getenv),
			logger.WithName("disruption"), func(ctx context.Context, cmgr ctrl.Manager) error {
				// The lost-job watch hears of deleted pods from the disruption
				// controllers' cache: one cache of pods.
				deletes := rerun.NewPodDeletes()
				if err := disruption.Setup(ctx, cmgr, disruption.Options{
					Guard: handler, PodDeleted: deletes.Deleted, GitHub: gh, Listing: disruption.RouterListing{Router: gh, Refresh: true},
					HintListing: opts.disruption.hintListing(gh), Retirer: retirer,
					Hints: opts.disruption.hints(), Budgets: opts.disruption.budgets, Drain: opts.disruption.drain, HonorNodeDeadlines: hcfg.HonorNodeDeadlines,
					BusyRetryMax: opts.disruption.busyRetryMax, Events: events, Metrics: dMetrics, Log: logger.WithName("disruption"),
					// Watched only where runner-guard guards pods (and is granted them).
					Namespaces: hcfg.RunnerNamespaces, JobKeys: webhookSecrets.keys,
				}); err != nil {
					return err
				}
				return opts.rerun.setup(cmgr, rerunSetup{handler: handler, arcCredentials: arcMode, staticBaseURL: staticBaseURL(staticCreds, gcfg.BaseURL), router: gh, namespace: opts.disruption.leaseNamespace(getenv),
					runnerNamespaces: hcfg.RunnerNamespaces, podDeletes: deletes, jobKeys: webhookSecrets.keys, honorNodeDeadlines: hcfg.HonorNodeDeadlines, events: events, metrics: rerunMetrics, log: logger.WithName("rerun")})
			})
		if controllers.restart, err = addARCServed(mgr, restCfg, logger.WithName("disruption")); err != nil {
			return err
		}
		if err := mgr.Add(controllers); err != nil {
			return fmt.Errorf("disruption controllers: %w", err)
		}
	}

	timeoutShort := activation.NewShortTimeoutGauge()
	if err := metrics.Registry.Register(timeoutShort); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	timeoutCheck := activation.TimeoutCheck{Want: hcfg.WebhookTimeout.Duration, Fit: handler.FitTimeout, Short: timeoutShort}
	if err := opts.activation.setup(mgr, restCfg, timeoutCheck, logger.WithName("activation")); err != nil {
		return err
	}
	if rotator != nil {
		if err := mgr.Add(rotator); err != nil {
			return fmt.Errorf("--self-managed-cert-secret: %w", err)
		}
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}

	if !handler.ScopesOpen() && opts.events.secretFile != "" {
		log.Info(singleSecretWarning)
	}
	if handler.ScopesOpen() {
		log.Info("WARNING: no scopeBindings in --config: a runner pod in any guarded namespace may name any GitHub scope, and runner-guard unregisters runners there with its credentials; bind namespaces to scopes to stop that (metric runner_guard_scope_bindings_open=1)")
	}
	log.Info("starting runner-guard", "version", version, "githubURL", opts.githubURL,
		"onError", hcfg.OnError, "githubTimeout", hcfg.GitHubTimeout.Duration, "webhookPort", opts.webhookPort)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	log.Info("stopped")
	return nil
}

// versionString is what --version prints: the version and commit the build
// stamped, else the commit Go recorded from the checkout it was built in
// (vcs.revision, "-dirty" when vcs.modified; absent with -buildvcs=false),
// and the Go version and platform.
func versionString(version, commit string, info *debug.BuildInfo) string {
	goVersion := "unknown"
	if info != nil {
		goVersion = info.GoVersion
		var revision string
		var modified bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if commit == "" && revision != "" {
			commit = revision
			if modified {
				commit += "-dirty"
			}
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("runner-guard %s (commit %s, %s %s/%s)", version, commit, goVersion, runtime.GOOS, runtime.GOARCH)
}

// restConfig loads --kubeconfig, else KUBECONFIG, ~/.kube/config or the in-cluster config.
func restConfig(path string) (*rest.Config, error) {
	if path != "" {
		return clientcmd.BuildConfigFromFlags("", path)
	}
	return ctrl.GetConfig()
}

// staticBaseURL is the API base the static credentials serve, "" without any.
func staticBaseURL(staticCreds bool, flag string) string {
	switch {
	case !staticCreds:
		return ""
	case flag == "":
		return ghclient.DefaultBaseURL
	}
	return flag
}
