package webhook

import (
	"context"

	"github.com/runner-guard/runner-guard/ghclient"
)

// noListing is the listing half of a test GitHub that has no listings and
// no budget: every decision goes to Unregister or Status.
type noListing struct{}

func (noListing) Listed(context.Context, ghclient.Runner, bool) (ghclient.Listing, error) {
	return ghclient.Listing{}, nil
}

func (noListing) Pressed(ghclient.Runner) bool { return false }
