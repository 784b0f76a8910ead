// Package ghclient talks to GitHub's self-hosted runner API: authentication
// (token, token file or GitHub App, with the App's installation found per
// runner owner when none is configured), GitHub Enterprise Server base URLs,
// the runner-ID cache, rate-limit handling and the operations runner-guard
// needs, Unregister and Status. A Router picks a client per runner
// credentials (ARC's githubConfigSecret). It knows nothing about Kubernetes
// admission.
package ghclient

import (
	"fmt"
	"strings"
	"time"
)

// ScopeKind is the level a runner is registered at.
type ScopeKind string

const (
	ScopeEnterprise ScopeKind = "enterprise"
	ScopeOrg        ScopeKind = "org"
	ScopeRepo       ScopeKind = "repo"
)

// Scope names where a runner is registered. For ScopeRepo, Name is "owner/repo".
type Scope struct {
	Kind ScopeKind
	Name string
}

// String renders the scope for messages, e.g. `org "acme"` or `repo "acme/app"`.
func (s Scope) String() string { return fmt.Sprintf("%s %q", s.Kind, s.Name) }

// EnterpriseScope, OrgScope and RepoScope build validated scopes.
func EnterpriseScope(slug string) (Scope, error) { return newScope(ScopeEnterprise, slug) }
func OrgScope(org string) (Scope, error)         { return newScope(ScopeOrg, org) }
func RepoScope(ownerRepo string) (Scope, error)  { return newScope(ScopeRepo, ownerRepo) }

func newScope(kind ScopeKind, name string) (Scope, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return Scope{}, fmt.Errorf("empty %s name", kind)
	}
	if strings.ContainsAny(name, " \t\r\n?#%") {
		return Scope{}, fmt.Errorf("invalid %s name %q", kind, name)
	}
	slashes := strings.Count(name, "/")
	switch {
	case kind == ScopeRepo && (slashes != 1 || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/")):
		return Scope{}, fmt.Errorf("invalid repo %q: want owner/repo", name)
	case kind != ScopeRepo && slashes != 0:
		return Scope{}, fmt.Errorf("invalid %s name %q: must not contain '/'", kind, name)
	}
	return Scope{Kind: kind, Name: name}, nil
}

// Outcome is what Unregister did.
type Outcome int

const (
	// Removed: GitHub answered 204; the runner can get no more jobs.
	Removed Outcome = iota + 1
	// NotFound: GitHub does not know the runner (never registered or already gone).
	NotFound
	// Busy: GitHub answered 422; the runner is running a job and nothing changed.
	Busy
)

func (o Outcome) String() string {
	switch o {
	case Removed:
		return "removed"
	case NotFound:
		return "not-found"
	case Busy:
		return "busy"
	default:
		return fmt.Sprintf("outcome(%d)", int(o))
	}
}

// RunnerState is what a read-only Status look-up found.
type RunnerState string

const (
	StateNotFound RunnerState = "not-found"
	StateIdle     RunnerState = "idle"
	StateBusy     RunnerState = "busy"
)

// RunnerStatus is the read-only view of a runner, for dry runs.
type RunnerStatus struct {
	State  RunnerState
	ID     int64
	Online bool
}

// RateLimited reports that GitHub refused (or go-github refused client-side) a
// request because of a primary or secondary rate limit. Callers must not retry
// before RetryAfter has passed.
type RateLimited struct {
	RetryAfter time.Duration
	// Primary is true for the hourly limit (remaining 0), false for a secondary limit.
	Primary bool
	Err     error
}

func (e *RateLimited) Error() string {
	kind := "secondary"
	if e.Primary {
		kind = "primary"
	}
	return fmt.Sprintf("GitHub %s rate limit: retry after %s: %v", kind, e.RetryAfter.Round(time.Second), e.Err)
}

func (e *RateLimited) Unwrap() error { return e.Err }
