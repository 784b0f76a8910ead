package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
)

// eventsFlags configure the GitHub webhook endpoint (package events).
type eventsFlags struct {
	bindAddress string
	secretFile  string
	secretsFile string
}

func (f *eventsFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.bindAddress, "events-bind-address", "", `Address of the GitHub webhook endpoint POST /github/events (plain HTTP: put TLS in front of it), which records the job of a signed workflow_job delivery on its legacy runner's pod; empty (the default) turns it off. Needs --github-webhook-secrets or --github-webhook-secret-file.`)
	fs.StringVar(&f.secretFile, "github-webhook-secret-file", "", "File holding one GitHub webhook secret for every scope: it verifies deliveries to --events-bind-address, and keys derived from it sign and verify the runner-guard.io/job annotations they write. With several organizations, use --github-webhook-secrets.")
	fs.StringVar(&f.secretsFile, "github-webhook-secrets", "", `YAML file (or a directory of them) mapping each GitHub webhook's secret to the scopes its webhook may speak for: "secrets: [{name, secretFile, scopes: [org:ORG, repo:OWNER/REPO, enterprise:SLUG], previousSecretFile, previousUntil}]" (docs/events.md).`)
}

// webhookSecrets are the configured webhook secrets and the annotation keys
// derived from them; both nil with events off.
type webhookSecrets struct {
	secrets []events.Secret
	keys    *jobannotation.Keyring
}

// secretName is what a secret's name may be: it names records and Events.
var secretName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// load reads the secret flags: none without either flag.
func (f *eventsFlags) load() (webhookSecrets, error) {
	var out webhookSecrets
	var err error
	switch {
	case f.secretFile != "" && f.secretsFile != "":
		return out, errors.New("--github-webhook-secrets: set it or --github-webhook-secret-file, not both")
	case f.secretFile != "":
		var b []byte
		if b, err = readSecret(f.secretFile); err != nil {
			return out, fmt.Errorf("--github-webhook-secret-file: %w", err)
		}
		out.secrets = []events.Secret{{Secret: jobannotation.Secret{Value: b}}}
	case f.secretsFile != "":
		if out.secrets, err = readSecretsConfig(f.secretsFile); err != nil {
			return out, fmt.Errorf("--github-webhook-secrets: %w", err)
		}
	case f.bindAddress != "":
		return out, errors.New("--github-webhook-secrets (or --github-webhook-secret-file): required with --events-bind-address")
	default:
		return out, nil
	}
	ks := make([]jobannotation.Secret, len(out.secrets))
	for i, s := range out.secrets {
		ks[i] = s.Secret
	}
	if out.keys, err = jobannotation.NewKeyring(ks, nil); err != nil {
		return out, fmt.Errorf("webhook secrets: %w", err)
	}
	return out, nil
}

// readSecret reads one secret file; a Secret written with a trailing
// newline holds the same secret.
func readSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	return b, nil
}

// readSecretsConfig reads the file (or every *.yaml, *.yml and *.json file
// of the directory) of --github-webhook-secrets and the secrets it names.
func readSecretsConfig(path string) ([]events.Secret, error) {
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if st.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		files = nil
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	var entries []events.SecretsEntry
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		var c events.SecretsFile
		if err := yaml.UnmarshalStrict(b, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		entries = append(entries, c.Secrets...)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%s names no secret", path)
	}
	secrets, errs := parseSecretEntries(entries, field.NewPath("secrets"))
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", path, errs.ToAggregate())
	}
	return secrets, nil
}

// parseSecretEntries validates the entries and reads their secret files.
func parseSecretEntries(entries []events.SecretsEntry, path *field.Path) ([]events.Secret, field.ErrorList) {
	var errs field.ErrorList
	var out []events.Secret
	var names []string
	for i, e := range entries {
		p := path.Index(i)
		s := events.Secret{Secret: jobannotation.Secret{Name: e.Name}, Scopes: []ghclient.ScopePattern{}}
		switch {
		case !secretName.MatchString(e.Name):
			errs = append(errs, field.Invalid(p.Child("name"), e.Name, "want a lower-case DNS label: it names the secret in annotations and Events"))
		case slices.Contains(names, e.Name):
			errs = append(errs, field.Duplicate(p.Child("name"), e.Name))
		}
		names = append(names, e.Name)
		if e.SecretFile == "" {
			errs = append(errs, field.Required(p.Child("secretFile"), "the file holding the webhook's secret"))
		} else if b, err := readSecret(e.SecretFile); err != nil {
			errs = append(errs, field.Invalid(p.Child("secretFile"), e.SecretFile, err.Error()))
		} else {
			s.Value = b
		}
		if len(e.Scopes) == 0 {
			errs = append(errs, field.Required(p.Child("scopes"), "the organizations (org:ORG), enterprises (enterprise:SLUG) or repositories (repo:OWNER/REPO) the webhook may speak for"))
		}
		for j, sc := range e.Scopes {
			sp, err := ghclient.ParseScopePattern(sc)
			if err != nil {
				errs = append(errs, field.Invalid(p.Child("scopes").Index(j), sc, err.Error()))
				continue
			}
			s.Scopes = append(s.Scopes, sp)
		}
		switch {
		case e.PreviousSecretFile == "" && e.PreviousUntil != "":
			errs = append(errs, field.Required(p.Child("previousSecretFile"), "previousUntil is set: the file holding the previous secret"))
		case e.PreviousSecretFile != "" && e.PreviousUntil == "":
			errs = append(errs, field.Required(p.Child("previousUntil"), "when the previous secret stops being accepted (RFC 3339)"))
		case e.PreviousSecretFile != "":
			if b, err := readSecret(e.PreviousSecretFile); err != nil {
				errs = append(errs, field.Invalid(p.Child("previousSecretFile"), e.PreviousSecretFile, err.Error()))
			} else {
				s.Previous = b
			}
			if t, err := time.Parse(time.RFC3339, e.PreviousUntil); err != nil {
				errs = append(errs, field.Invalid(p.Child("previousUntil"), e.PreviousUntil, "want an RFC 3339 time, such as 2027-01-31T00:00:00Z"))
			} else {
				s.PreviousUntil = t
			}
		}
		out = append(out, s)
	}
	return out, errs
}

// singleSecretWarning is logged when one secret speaks for every scope
// while namespaces are bound to scopes.
const singleSecretWarning = "WARNING: --github-webhook-secret-file is one secret for every scope, and scopeBindings are configured: whoever holds it (every organization whose webhook uses it) can sign a delivery naming any bound scope's runners; give each organization's webhook its own secret with --github-webhook-secrets"

// addEventsServer serves POST /github/events on address ("" serves nothing).
func addEventsServer(mgr ctrl.Manager, address string, secrets webhookSecrets, pods client.Client, guard events.Guard, namespaces []string, log logr.Logger) error {
	if address == "" {
		return nil
	}
	m := events.NewMetrics()
	for _, c := range m.Collectors() {
		if err := metrics.Registry.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	h, err := events.NewHandler(events.Options{Secrets: secrets.secrets, Keys: secrets.keys, Pods: pods, Guard: guard, Namespaces: namespaces, Metrics: m, Log: log})
	if err != nil {
		return fmt.Errorf("--events-bind-address: %w", err)
	}
	if err := mgr.Add(&events.Server{Addr: address, Handler: h}); err != nil {
		return fmt.Errorf("events server: %w", err)
	}
	names := make([]string, len(secrets.secrets))
	for i, s := range secrets.secrets {
		names[i] = s.Name
	}
	log.Info("serving GitHub webhook deliveries", "address", address, "path", events.Path, "secrets", strings.Join(names, ","))
	return nil
}
