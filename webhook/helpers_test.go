package webhook

import (
	"context"
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/ghclient"
)

// noListing is the listing half of a test GitHub that has no listings and
// no budget: every decision goes to Unregister or Status.
type noListing struct{}

func (noListing) Listed(context.Context, ghclient.Runner, ghclient.Refresh) (ghclient.Listing, error) {
	return ghclient.Listing{}, nil
}

func (noListing) Pressed(ghclient.Runner) bool { return false }

// checkErr fails t unless err is what want asks for: no error when want is
// "", else one containing want. It reports whether an error was wanted, so a
// case that wanted one stops there.
func checkErr(t *testing.T, err error, want string) (wantedErr bool) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v, want one containing %q", err, want)
	}
	return true
}
