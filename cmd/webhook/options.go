package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook"
)

// options are the parsed command line.
type options struct {
	webhookPort         int
	webhookHost         string
	certDir             string
	githubURL           string
	githubTokenFile     string
	githubAppID         int64
	githubInstallID     int64
	githubAppKeyFile    string
	githubCABundle      string
	githubTimeout       time.Duration
	webhookTimeout      time.Duration
	onError             string
	configFile          string
	kubeconfig          string
	metricsBindAddress  string
	healthProbeBindAddr string
	enableHTTP2         bool
	githubAllowHTTP     bool
	metricsSecure       bool
	clientCAFile        string
	credentialsMode     string
	retireRunners       string
	honorNodeDeadlines  bool
	disruption          disruptionFlags
	rerun               rerunFlags
	activation          activationFlags
	selfCerts           selfCertFlags
	events              eventsFlags
	eventsOnly          bool
	printVersion        bool
	zap                 zap.Options
}

// parseFlags parses args; the error of a bad flag names the flag.
func parseFlags(args []string, output io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port the admission webhook server listens on (HTTPS).")
	fs.StringVar(&o.webhookHost, "webhook-host", "", "Address the webhook server binds to; empty means all interfaces.")
	fs.StringVar(&o.certDir, "cert-dir", filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs"), "Directory holding tls.crt and tls.key; reloaded when the files change.")
	fs.StringVar(&o.githubURL, "github-url", "https://api.github.com/", "GitHub API base URL; for GitHub Enterprise Server https://HOST/api/v3/.")
	fs.StringVar(&o.githubTokenFile, "github-token-file", "", "File holding a GitHub token (PAT). Without it, the GITHUB_TOKEN environment variable is used.")
	fs.Int64Var(&o.githubAppID, "github-app-id", 0, "GitHub App ID, for GitHub App authentication instead of a token.")
	fs.Int64Var(&o.githubInstallID, "github-app-installation-id", 0, "GitHub App installation ID.")
	fs.StringVar(&o.githubAppKeyFile, "github-app-private-key-file", "", "File holding the GitHub App's private key (PEM).")
	fs.StringVar(&o.githubCABundle, "github-ca-bundle", "", "PEM file of CA certificates to trust for GitHub besides the system pool (GitHub Enterprise Server behind a private CA). Proxies come from HTTPS_PROXY, HTTP_PROXY and NO_PROXY.")
	fs.DurationVar(&o.githubTimeout, "github-timeout", 0, fmt.Sprintf("Deadline of the GitHub part of one decision (default %s, or githubTimeout from --config).", webhook.DefaultGitHubTimeout))
	fs.DurationVar(&o.webhookTimeout, "webhook-timeout", 0, fmt.Sprintf("The webhook configuration's timeoutSeconds: every read and GitHub request of a decision ends 1s before it (default %s, or webhookTimeout from --config).", webhook.DefaultWebhookTimeout))
	fs.StringVar(&o.onError, "on-error", "", `What to do when GitHub fails or a runner's scope is unknown: "deny" (default) or "allow". Overrides onError from --config.`)
	fs.StringVar(&o.configFile, "config", "", "YAML file with runner pod selectors, scope sources, bypass list and force annotation.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Only required if out-of-cluster.")
	fs.StringVar(&o.metricsBindAddress, "metrics-bind-address", ":8080", `Address of the Prometheus metrics endpoint; "0" disables it.`)
	fs.StringVar(&o.healthProbeBindAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	fs.BoolVar(&o.githubAllowHTTP, "github-allow-http", false, "Allow a plain http:// --github-url. Only on a network you trust: the token travels unencrypted.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS, allowing only requesters the API server authenticates and authorizes for GET /metrics; false serves plain HTTP.")
	fs.StringVar(&o.clientCAFile, "client-ca-file", "", "CA bundle (PEM) that signs the API server's client certificate; when set, the webhook server requires and verifies a client certificate.")
	fs.StringVar(&o.credentialsMode, "credentials-mode", "", `Where runners' GitHub credentials come from: "static" (these flags, the default) or "arc" (each scale-set runner's EphemeralRunner githubConfigSecret in its namespace, with ARC's keys; legacy pods still use these flags). Overrides credentialsMode from --config.`)
	fs.StringVar(&o.retireRunners, "retire-ephemeral-runners", "", `"true" (default) or "false": delete the EphemeralRunner of a scale-set runner runner-guard unregistered, so ARC creates a fresh runner. Overrides retireEphemeralRunners from --config.`)
	fs.BoolVar(&o.honorNodeDeadlines, "honor-node-deadlines", true, "Let Karpenter delete a busy runner's pod once its NodeClaim's termination deadline (karpenter.sh/nodeclaim-termination-timestamp: deletionTimestamp plus terminationGracePeriod) less the pod's terminationGracePeriodSeconds has passed, as Karpenter does past budgets; the job is lost and recorded node-deadline (re-run with --rerun-lost-jobs). Off, the node is held until the job ends.")
	o.disruption.bind(fs)
	o.rerun.bind(fs)
	o.activation.bind(fs)
	o.selfCerts.bind(fs)
	o.events.bind(fs)
	fs.BoolVar(&o.eventsOnly, "events-only", false, "Serve only the GitHub events endpoint (--events-bind-address, with the webhook secrets), /metrics and the probes: no admission webhook, serving certificate, GitHub credentials, controllers or leader election. Reads --config to tell which pods are guarded and which runner each runs.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "Serve the webhook over HTTP/2 as well (off: HTTP/2 rapid-reset CVEs).")
	fs.BoolVar(&o.printVersion, "version", false, "Print the version, the commit and the Go version, and exit.")
	o.zap.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "runner-guard %s: admission webhook that unregisters GitHub Actions runners before their pods are deleted.\n\nUsage: webhook [flags]\n\n", version)
		// The flag package lists flags as "-name"; runner-guard documents them as
		// "--name" (both spellings are accepted), so print them that way.
		var b strings.Builder
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(output)
		fmt.Fprint(output, strings.ReplaceAll("\n"+b.String(), "\n  -", "\n  --")[1:])
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return o, nil
}

// errNoStaticCredentials: credentials mode arc without static credentials;
// the runners' own credentials serve scale-set pods.
var errNoStaticCredentials = errors.New("no static GitHub credentials")

// githubConfig builds the GitHub client config from flags and the environment.
// It reads the files the flags name (so a missing file names its flag); the
// credentials themselves are validated in one place, ghclient.New, whose
// errors githubConfigError maps back to these flags.
func (o *options) githubConfig(getenv func(string) string, arcMode bool) (ghclient.Config, error) {
	cfg := ghclient.Config{BaseURL: o.githubURL, AllowHTTP: o.githubAllowHTTP, UserAgent: "runner-guard/" + version}
	appFlags := o.githubAppID != 0 || o.githubInstallID != 0 || o.githubAppKeyFile != ""
	switch {
	case appFlags && o.githubTokenFile != "":
		return cfg, errors.New("--github-token-file and --github-app-* are mutually exclusive: choose token or GitHub App authentication")
	case appFlags:
		if o.githubAppID <= 0 {
			return cfg, errors.New("--github-app-id: required (a positive number) with GitHub App authentication")
		}
		if o.githubAppKeyFile == "" {
			return cfg, errors.New("--github-app-private-key-file: required with GitHub App authentication")
		}
		key, err := os.ReadFile(o.githubAppKeyFile)
		if err != nil {
			return cfg, fmt.Errorf("--github-app-private-key-file: %w", err)
		}
		// Without --github-app-installation-id the client finds the App's
		// installation for each runner's owner.
		cfg.App = &ghclient.AppCredentials{AppID: o.githubAppID, InstallationID: o.githubInstallID, PrivateKeyPEM: key}
	case o.githubTokenFile != "":
		b, err := os.ReadFile(o.githubTokenFile)
		if err != nil {
			return cfg, fmt.Errorf("--github-token-file: %w", err)
		}
		if strings.TrimSpace(string(b)) == "" {
			return cfg, fmt.Errorf("--github-token-file: %s is empty", o.githubTokenFile)
		}
		// The client re-reads the file when it changes: a rotated Secret needs no restart.
		cfg.TokenFile = o.githubTokenFile
	default:
		if cfg.Token = strings.TrimSpace(getenv("GITHUB_TOKEN")); cfg.Token == "" && arcMode {
			// Scale-set runners bring their own; legacy pods then cannot be asked.
			return cfg, errNoStaticCredentials
		}
		if cfg.Token == "" {
			return cfg, errors.New("no GitHub credentials: set --github-token-file, the GITHUB_TOKEN environment variable, or --github-app-id with --github-app-private-key-file")
		}
	}
	return cfg, nil
}

// caBundle reads --github-ca-bundle: nil without the flag; a file that
// cannot be read or holds no PEM certificate is an error naming the flag.
func (o *options) caBundle() ([]byte, error) {
	if o.githubCABundle == "" {
		return nil, nil
	}
	b, err := os.ReadFile(o.githubCABundle)
	if err != nil {
		return nil, fmt.Errorf("--github-ca-bundle: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--github-ca-bundle: %s holds no PEM certificate", o.githubCABundle)
	}
	return b, nil
}

// handlerConfig reads --config and applies the flags that override it.
func (o *options) handlerConfig(getenv func(string) string) (webhook.Config, error) {
	cfg := webhook.Config{}
	if o.configFile != "" {
		data, err := os.ReadFile(o.configFile)
		if err != nil {
			return cfg, fmt.Errorf("--config: %w", err)
		}
		if cfg, err = webhook.ParseConfig(data); err != nil {
			return cfg, fmt.Errorf("--config %s: %w", o.configFile, err)
		}
	}
	if o.onError != "" {
		p, err := webhook.ParseOnErrorPolicy(o.onError)
		if err != nil {
			return cfg, fmt.Errorf("--on-error: %w", err)
		}
		cfg.OnError, cfg.OnErrorSource = p, "--on-error="+string(p)
	}
	// The Deployment passes its namespace through the downward API.
	if ns := strings.TrimSpace(getenv("POD_NAMESPACE")); ns != "" && !slices.Contains(cfg.ExemptNamespaces, ns) {
		cfg.ExemptNamespaces = append(cfg.ExemptNamespaces, ns)
	}
	if o.credentialsMode != "" {
		cfg.CredentialsMode = webhook.CredentialsMode(strings.ToLower(strings.TrimSpace(o.credentialsMode)))
	}
	if o.retireRunners != "" {
		retire, err := strconv.ParseBool(o.retireRunners)
		if err != nil {
			return cfg, fmt.Errorf("--retire-ephemeral-runners: %q is not true or false", o.retireRunners)
		}
		cfg.RetireEphemeralRunners = &retire
	}
	cfg.HonorNodeDeadlines = o.honorNodeDeadlines
	if o.githubTimeout < 0 {
		return cfg, fmt.Errorf("--github-timeout: must be positive, got %s", o.githubTimeout)
	}
	if o.githubTimeout > 0 {
		cfg.GitHubTimeout.Duration = o.githubTimeout
	}
	if o.webhookTimeout < 0 {
		return cfg, fmt.Errorf("--webhook-timeout: must be positive, got %s", o.webhookTimeout)
	}
	if o.webhookTimeout > 0 {
		cfg.WebhookTimeout.Duration = o.webhookTimeout
	}
	cfg.Default()
	errs := cfg.Validate()
	// A value a flag set is reported by the flag's name, not the config key.
	for _, e := range errs {
		switch {
		case e.Field == "githubTimeout" && o.githubTimeout > 0:
			e.Field = "--github-timeout"
		case e.Field == "webhookTimeout" && o.webhookTimeout > 0:
			e.Field = "--webhook-timeout"
		case e.Field == "onError" && o.onError != "":
			e.Field = "--on-error"
		case e.Field == "credentialsMode" && o.credentialsMode != "":
			e.Field = "--credentials-mode"
		}
	}
	if err := errs.ToAggregate(); err != nil {
		if o.configFile != "" {
			return cfg, fmt.Errorf("--config %s: %w", o.configFile, err)
		}
		return cfg, err
	}
	return cfg, nil
}

// checkServing fails early on a port out of range or unreadable certificates,
// rather than letting the server die after start.
func (o *options) checkServing() error {
	if o.webhookPort < 1 || o.webhookPort > 65535 {
		return fmt.Errorf("--webhook-port: %d is not a TCP port", o.webhookPort)
	}
	crt, key := filepath.Join(o.certDir, "tls.crt"), filepath.Join(o.certDir, "tls.key")
	if _, err := tls.LoadX509KeyPair(crt, key); err != nil && !o.selfCerts.enabled() {
		return fmt.Errorf("--cert-dir: cannot load %s and %s: %w", crt, key, err)
	}
	if o.clientCAFile != "" {
		pem, err := os.ReadFile(o.clientCAFile)
		if err != nil {
			return fmt.Errorf("--client-ca-file: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return fmt.Errorf("--client-ca-file: %s holds no PEM certificate", o.clientCAFile)
		}
	}
	return nil
}

// oneLine keeps a joined, multi-line error on one line for the start-up message.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// githubFlags maps the GitHub client's config fields to the flags that set them.
func githubFlags() map[string]string {
	return map[string]string{
		"BaseURL":            "--github-url",
		"TokenFile":          "--github-token-file",
		"App.AppID":          "--github-app-id",
		"App.InstallationID": "--github-app-installation-id",
		"App.PrivateKeyPEM":  "--github-app-private-key-file",
	}
}

// githubConfigError names the flag behind a field the GitHub client rejected.
func githubConfigError(err error) error {
	var ce *ghclient.ConfigError
	if errors.As(err, &ce) {
		if flag, ok := githubFlags()[ce.Field]; ok {
			return fmt.Errorf("%s: %w", flag, ce.Err)
		}
	}
	return fmt.Errorf("GitHub client: %w", err)
}
