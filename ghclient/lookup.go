package ghclient

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-github/v93/github"
)

// lookupCall is one list-by-name shared by every caller asking for the same
// (scope, name) while it runs. It runs on a context detached from any single
// caller, so the first caller giving up does not fail the others, and it is
// cancelled once the last waiter has gone. (singleflight.DoChan shares the
// result too, but cannot cancel a call nobody waits for any more.)
type lookupCall struct {
	done    chan struct{}
	cancel  context.CancelFunc
	waiters int
	runner  *github.Runner // nil: not registered
	err     error
}

// lookup finds the runner by listing its scope filtered by name. It caches the
// ID when found and forgets it when not. The returned runner is shared; do not
// modify it.
func (c *Client) lookup(ctx context.Context, k lookupKey) (*github.Runner, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("look up runner %q in %s: %w", k.name, k.scope, err)
	}
	c.mu.Lock()
	call, ok := c.calls[k]
	if !ok {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
		call = &lookupCall{done: make(chan struct{}), cancel: cancel}
		c.calls[k] = call
		go c.runLookup(lctx, k, call)
	}
	call.waiters++
	c.mu.Unlock()

	select {
	case <-call.done:
		return call.runner, call.err
	case <-ctx.Done():
		c.mu.Lock()
		call.waiters--
		if call.waiters == 0 {
			call.cancel()
			// A later caller must start afresh, not join a cancelled call.
			if c.calls[k] == call {
				delete(c.calls, k)
			}
		}
		c.mu.Unlock()
		return nil, fmt.Errorf("look up runner %q in %s: %w", k.name, k.scope, ctx.Err())
	}
}

func (c *Client) runLookup(ctx context.Context, k lookupKey, call *lookupCall) {
	defer call.cancel()
	r, err := c.scan(ctx, k.scope, k.name, func(r *github.Runner) bool { return r.GetName() == k.name })
	switch {
	case err != nil:
	case r != nil:
		c.remember(k, r.GetID())
	default:
		c.forget(k)
	}
	c.mu.Lock()
	call.runner, call.err = r, err
	if c.calls[k] == call {
		delete(c.calls, k)
	}
	c.mu.Unlock()
	close(call.done)
}

// scan lists the scope's runners (filtered by name when nameFilter is set),
// 100 a page, following the Link header until match returns true or the pages
// run out. It returns nil, nil when nothing matched.
func (c *Client) scan(ctx context.Context, scope Scope, nameFilter string, match func(*github.Runner) bool) (*github.Runner, error) {
	opts := &github.ListRunnersOptions{ListOptions: github.ListOptions{Page: 1, PerPage: listPerPage}}
	op := fmt.Sprintf("list runners for %s", scope)
	if nameFilter != "" {
		opts.Name = &nameFilter
		op = fmt.Sprintf("list runners named %q in %s", nameFilter, scope)
	}
	gh, err := c.api(ctx, scope)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for range maxListPages {
		runners, resp, err := listPage(ctx, gh, scope, opts)
		if err != nil {
			if opts.Page > 1 {
				op = fmt.Sprintf("%s (page %d)", op, opts.Page)
			}
			return nil, c.fail(scope, op, resp, err)
		}
		if runners != nil {
			for _, r := range runners.Runners {
				if match(r) {
					return r, nil
				}
			}
		}
		// Only move forward: a broken Link header must not loop.
		if resp.NextPage <= opts.Page {
			return nil, nil
		}
		opts.Page = resp.NextPage
	}
	return nil, fmt.Errorf("%s: more than %d pages", op, maxListPages)
}

func listPage(ctx context.Context, gh *github.Client, scope Scope, opts *github.ListRunnersOptions) (*github.Runners, *github.Response, error) {
	switch scope.Kind {
	case ScopeRepo:
		owner, repo, _ := strings.Cut(scope.Name, "/")
		return gh.Actions.ListRunners(ctx, owner, repo, opts)
	case ScopeOrg:
		return gh.Actions.ListOrganizationRunners(ctx, scope.Name, opts)
	default:
		return gh.Enterprise.ListRunners(ctx, scope.Name, opts)
	}
}
