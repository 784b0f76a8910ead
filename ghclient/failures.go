package ghclient

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
)

// FailureTTL is how long a scope's 404, 401 or 403 (not a rate limit) is
// answered from memory. Repeating such a request changes nothing
// (GITHUB-API.md), and one tenant's typo in RUNNER_REPO must not spend the
// credential every tenant shares: 30 deletes of one pod cost one request.
// It is longer than ListingTTL and short enough for a repository created (or
// an App installed) by hand to be seen within a couple of minutes.
const FailureTTL = time.Minute

// maxFailures bounds the scopes remembered; past it, the least recently
// used is dropped.
const maxFailures = 10000

// RememberedFailure is the error of a request not sent because GitHub
// answered the same scope with a 404, 401 or 403 moments ago. It wraps that
// answer, so callers classify it as they did the first time.
type RememberedFailure struct {
	Scope Scope
	// Status is GitHub's HTTP status.
	Status int
	// RetryAfter is when runner-guard asks GitHub about the scope again.
	RetryAfter time.Duration
	Err        error
}

func (e *RememberedFailure) Error() string {
	return fmt.Sprintf("GitHub answered %d for %s moments ago; not asked again for %s: %v",
		e.Status, e.Scope, roundWait(e.RetryAfter), e.Err)
}

func (e *RememberedFailure) Unwrap() error { return e.Err }

// scopeFailure is GitHub's permanent-looking answer for a scope, kept in
// Client.failures for FailureTTL.
type scopeFailure struct {
	status int
	err    error
	until  time.Time
	// token is the token file's token when GitHub answered 401: a new one
	// in the file ends the memory at once.
	token string
}

// rememberedStatus is the status of err worth remembering for its scope
// (404, 401, or a 403 that is not a rate limit), or 0.
func rememberedStatus(err error, now time.Time, cloud bool) int {
	switch s := anyStatusOf(err); s {
	case http.StatusNotFound, http.StatusUnauthorized:
		return s
	case http.StatusForbidden:
		if rateLimited(err, now, cloud) == nil {
			return s
		}
	}
	return 0
}

// failed remembers err (GitHub's raw error; wrapped, what callers return) for
// scope when it is worth remembering.
func (c *Client) failed(scope Scope, raw, wrapped error) {
	now := c.now()
	status := rememberedStatus(raw, now, c.cloud)
	if status == 0 {
		return
	}
	f := scopeFailure{status: status, err: wrapped, until: now.Add(FailureTTL)}
	if status == http.StatusUnauthorized && c.tokenFile != nil {
		f.token = c.tokenFile.get()
	}
	c.failures.Add(scope, f)
}

// recall is the remembered failure of scope, or nil. A remembered 401 of a
// token file ends when the file holds another token.
func (c *Client) recall(scope Scope) error {
	now := c.now() // before Get, so RetryAfter stays positive
	f, ok := c.failures.Get(scope)
	if !ok {
		return nil
	}
	if f.token != "" && c.tokenFile.get() != f.token {
		// Not atomic with Get: a failure of the new token remembered in
		// between is dropped too, which costs one request.
		c.failures.Remove(scope)
		return nil
	}
	return &RememberedFailure{Scope: scope, Status: f.status, RetryAfter: f.until.Sub(now), Err: f.err}
}

// installationGone reports whether err says the App installation itself is
// gone: a 401 (its token was revoked), or a 404 or 401 from the exchange of
// an installation token (POST /app/installations/{id}/access_tokens). A 404
// from a listing says only that the App cannot see that repository.
func installationGone(err error) bool {
	if statusOf(err) == http.StatusUnauthorized {
		return true
	}
	var he *ghinstallation.HTTPError
	if errors.As(err, &he) && he.Response != nil {
		s := he.Response.StatusCode
		return s == http.StatusNotFound || s == http.StatusUnauthorized
	}
	return false
}
