package events

import (
	"context"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook"
)

// NoGitHub is the GitHub of a webhook.Handler that only resolves pods, as
// a Guard does for --events-only (and for explain): resolving never asks
// GitHub, so a call is a bug, answered with Err rather than a request.
type NoGitHub struct {
	// Err says who asks GitHub nothing.
	Err error
}

var _ webhook.GitHub = NoGitHub{}

// Unregister returns Err.
func (g NoGitHub) Unregister(context.Context, ghclient.Runner) (ghclient.Outcome, error) {
	return 0, g.Err
}

// Status returns Err.
func (g NoGitHub) Status(context.Context, ghclient.Runner) (ghclient.RunnerStatus, error) {
	return ghclient.RunnerStatus{}, g.Err
}

// Listed returns Err.
func (g NoGitHub) Listed(context.Context, ghclient.Runner, ghclient.Refresh) (ghclient.Listing, error) {
	return ghclient.Listing{}, g.Err
}

// Pressed is false: nothing spends a budget.
func (NoGitHub) Pressed(ghclient.Runner) bool { return false }
