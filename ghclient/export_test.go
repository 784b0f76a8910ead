package ghclient

import (
	"context"

	"github.com/google/go-github/v93/github"
)

// ScanAllForTest pages through every runner of scope without a name filter and
// returns the ID of the one named name (0 if none), to test paging.
func (c *Client) ScanAllForTest(ctx context.Context, scope Scope, name string) (int64, error) {
	r, err := c.scan(ctx, scope, "", func(r *github.Runner) bool { return r.GetName() == name })
	return r.GetID(), err
}
