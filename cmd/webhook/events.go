package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runner-guard/runner-guard/events"
)

// eventsFlags configure the GitHub webhook endpoint (package events).
type eventsFlags struct {
	bindAddress string
	secretFile  string
}

func (f *eventsFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.bindAddress, "events-bind-address", "", `Address of the GitHub webhook endpoint POST /github/events (plain HTTP: put TLS in front of it), which puts the job of a signed workflow_job delivery on its legacy runner's pod; empty (the default) turns it off. Needs --github-webhook-secret-file.`)
	fs.StringVar(&f.secretFile, "github-webhook-secret-file", "", "File holding the GitHub webhook's secret: it verifies deliveries to --events-bind-address and the runner-guard.io/job annotations they write.")
}

// secret reads --github-webhook-secret-file: nil without the flag.
func (f *eventsFlags) secret() ([]byte, error) {
	if f.secretFile == "" {
		if f.bindAddress != "" {
			return nil, errors.New("--github-webhook-secret-file: required with --events-bind-address")
		}
		return nil, nil
	}
	b, err := os.ReadFile(f.secretFile)
	if err != nil {
		return nil, fmt.Errorf("--github-webhook-secret-file: %w", err)
	}
	// A Secret written with a trailing newline holds the same secret.
	b = bytes.TrimRight(b, "\r\n")
	if len(b) == 0 {
		return nil, fmt.Errorf("--github-webhook-secret-file: %s is empty", f.secretFile)
	}
	return b, nil
}

// addEventsServer serves POST /github/events on address ("" serves nothing),
// on every replica.
func addEventsServer(mgr ctrl.Manager, address string, secret []byte, pods client.Client, guard events.Guard, namespaces []string, log logr.Logger) error {
	if address == "" {
		return nil
	}
	m := events.NewMetrics()
	for _, c := range m.Collectors() {
		if err := metrics.Registry.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	h, err := events.NewHandler(events.Options{Secret: secret, Pods: pods, Guard: guard, Namespaces: namespaces, Metrics: m, Log: log})
	if err != nil {
		return fmt.Errorf("--events-bind-address: %w", err)
	}
	if err := mgr.Add(&events.Server{Addr: address, Handler: h}); err != nil {
		return fmt.Errorf("events server: %w", err)
	}
	log.Info("serving GitHub webhook deliveries", "address", address, "path", events.Path)
	return nil
}
