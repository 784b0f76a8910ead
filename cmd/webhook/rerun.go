package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/rerun"
	"github.com/runner-guard/runner-guard/webhook"
)

// rerunFlags configure the re-run of jobs lost with their runner (package rerun).
type rerunFlags struct {
	enabled   bool
	maxPerRun int
	exclude   string
	// excluded is exclude, parsed by check.
	excluded rerun.Exclusions
}

func (f *rerunFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "rerun-lost-jobs", false, "Re-run once a job whose runner pod went away holding it (node lost, force-deleted, ...) once its workflow run completed without it succeeding; the credential needs the repo scope (classic token) or actions: write (App, fine-grained token). Off, an Event still says the job was lost and why.")
	fs.IntVar(&f.maxPerRun, "rerun-max-per-run", rerun.DefaultMaxPerRun, "At most this many lost jobs of one workflow run are re-run (--rerun-lost-jobs).")
	fs.StringVar(&f.exclude, "rerun-exclude", "", `Comma-separated jobs never re-run (--rerun-lost-jobs), each OWNER/REPO, a workflow path as the run's path names it (.github/workflows/NAME.yml), or OWNER/REPO:PATH; each part a glob ("acme/*", ".github/workflows/release-*.yml").`)
}

// check validates the flags, naming the one at fault.
func (f *rerunFlags) check() error {
	if f.maxPerRun < 1 {
		return fmt.Errorf("--rerun-max-per-run: must be at least 1, got %d", f.maxPerRun)
	}
	x, err := rerun.ParseExclusions(strings.Split(f.exclude, ","))
	if err != nil {
		return fmt.Errorf("--rerun-exclude: %w", err)
	}
	f.excluded = x
	return nil
}

// checkRight fails start-up when the static credentials are an App
// installation without actions: write and re-runs are on; a right that
// cannot be read is said at the first refusal instead.
func (f *rerunFlags) checkRight(ctx context.Context, static *ghclient.Client, log logr.Logger) error {
	if !f.enabled || static == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	right, why, err := static.CheckRerunRight(ctx)
	switch {
	case err != nil:
		log.Info("cannot tell whether the GitHub credential may re-run jobs: the first refusal will say so", "flag", "--rerun-lost-jobs", "error", err.Error())
	case right == ghclient.RerunRightMissing:
		return fmt.Errorf("--rerun-lost-jobs: %s: grant it, or turn re-runs off", why)
	}
	return nil
}

// setup adds the lost-job and re-run controllers to the leader's manager.
func (f *rerunFlags) setup(mgr ctrl.Manager, o rerunSetup) error {
	return rerun.Setup(mgr, rerun.Options{
		Namespace: o.namespace, RunnerNamespaces: o.runnerNamespaces,
		Guard: o.handler, ARCCredentials: o.arcCredentials, StaticBaseURL: o.staticBaseURL, Exclude: f.excluded,
		Client: func(c *ghclient.Credentials) (rerun.Runs, error) {
			cl, err := o.router.ClientFor(c)
			if err != nil {
				return nil, err
			}
			return cl, nil
		},
		PodDeletes: o.podDeletes,
		JobKeys:    o.jobKeys,
		Enabled:    f.enabled, MaxPerRun: f.maxPerRun,
		Events: o.events, Metrics: o.metrics, Log: o.log, HonorNodeDeadlines: o.honorNodeDeadlines,
	})
}

// rerunSetup is what the controllers share with the rest of the binary.
type rerunSetup struct {
	handler          *webhook.Handler
	arcCredentials   bool
	staticBaseURL    string
	router           *ghclient.Router
	namespace        string
	runnerNamespaces []string
	podDeletes       *rerun.PodDeletes
	jobKeys          *jobannotation.Keyring
	events           events.EventRecorder
	metrics          *rerun.Metrics
	log              logr.Logger
	// honorNodeDeadlines is --honor-node-deadlines.
	honorNodeDeadlines bool
}
