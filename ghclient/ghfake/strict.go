package ghfake

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
)

// Option configures a Fake at New. The fake is as strict as GitHub unless a
// test asks for leniency with one of these, where it builds the fake.
type Option func(*Fake)

// Leniency lists the ways a fake may be kinder than GitHub. The zero value
// is GitHub's behaviour.
type Leniency struct {
	// AnyScope holds every owner, repository and enterprise: a listing of
	// one nobody registered answers 200 with no runners instead of 404, and
	// a repository's installation look-up finds its owner's installation.
	AnyScope bool `json:"anyScope,omitempty"`
	// AuthOff accepts a request without a credential, or with a token it
	// does not know, any well-formed JWT while no App is registered (or
	// whose App it cannot verify), and mints an unscoped token for an
	// installation ID it does not know. A token it minted still reaches only
	// its installation's owners.
	AuthOff bool `json:"authOff,omitempty"`
}

// WithAnyScope is Leniency.AnyScope.
func WithAnyScope() Option { return func(f *Fake) { f.lenient.AnyScope = true } }

// WithAuthOff is Leniency.AuthOff.
func WithAuthOff() Option { return func(f *Fake) { f.lenient.AuthOff = true } }

// Lenient is every leniency at once: the fake of old, for demos and tests
// that are not about GitHub's answers.
func Lenient() Option { return WithLeniency(Leniency{AnyScope: true, AuthOff: true}) }

// WithLeniency sets the leniencies l names.
func WithLeniency(l Leniency) Option { return func(f *Fake) { f.lenient = l } }

// WithStatelessTokens has every installation token issued in GitHub's new
// format (see StatelessTokenHeader), as GitHub will once the format is the
// default, whether or not the request asks for it.
func WithStatelessTokens() Option { return func(f *Fake) { f.statelessTokens = true } }

// WithListingDelay is SetListingDelay.
func WithListingDelay(d time.Duration) Option { return func(f *Fake) { f.listingDelay = d } }

// WithToken is SetToken.
func WithToken(token string) Option { return func(f *Fake) { f.token = token } }

// WithScopes is AddScope.
func WithScopes(scopes ...ghclient.Scope) Option {
	return func(f *Fake) {
		for _, s := range scopes {
			f.held[keyOf(s)] = true
		}
	}
}

// SetLeniency replaces the fake's leniencies (the zero Leniency is GitHub's
// strictness).
func (f *Fake) SetLeniency(l Leniency) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lenient = l
}

// AddScope makes owners (as organisations), repositories and enterprises
// exist with no runners: their listings answer 200 instead of GitHub's 404.
// AddRunner, RegisterJITRunner and AddInstallation (for its owners) do the
// same for the scopes they name.
func (f *Fake) AddScope(scopes ...ghclient.Scope) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range scopes {
		f.held[keyOf(s)] = true
	}
}

// RemoveScope deletes an owner, repository or enterprise with its runners,
// as when a repository is deleted or renamed: its endpoints answer 404 from
// then on. It returns false if the fake did not hold it.
func (f *Fake) RemoveScope(scope ghclient.Scope) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := keyOf(scope)
	if !f.held[k] {
		return false
	}
	delete(f.held, k)
	for id, r := range f.runners {
		if r.scope == k {
			delete(f.runners, id)
		}
	}
	for id, r := range f.gone {
		if r.scope == k {
			delete(f.gone, id)
		}
	}
	return true
}

// AddToken accepts token as well as SetToken's, with its own primary and
// secondary limits, as each personal access token has on GitHub.
func (f *Fake) AddToken(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens[token] = true
}

// SetListingDelay makes the list endpoints lag by d: a runner registered
// (AddRunner, generate-jitconfig, RegisterJITRunner) is listed only d after,
// and one removed (DELETE, RemoveRunnerByName, a re-registration) is still
// listed for d, as GitHub's listing lags its runner service. Zero (the
// default) lists the truth at once. GET by ID, DELETE and Runners do not lag.
func (f *Fake) SetListingDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listingDelay = d
}

// holdsLocked reports whether the scope exists for GitHub.
func (f *Fake) holdsLocked(k scopeKey) bool { return f.lenient.AnyScope || f.held[k] }

// knownTokenLocked reports whether tok is a token the fake was given.
func (f *Fake) knownTokenLocked(tok string) bool {
	return f.token != "" && tok == f.token || f.tokens[tok]
}

// dropLocked removes a registered runner; the listing keeps showing it for
// the listing delay.
func (f *Fake) dropLocked(r *runner) {
	delete(f.runners, r.ID)
	if f.listingDelay > 0 {
		r.listedUntil = f.now().Add(f.listingDelay)
		f.gone[r.ID] = r
	}
}

// listedLocked reports whether the listing shows r now.
func (f *Fake) listedLocked(r *runner, now time.Time) bool {
	if _, live := f.runners[r.ID]; live {
		return !now.Before(r.listedFrom)
	}
	return now.Before(r.listedUntil)
}

// RateLimit is one credential's primary rate-limit window.
type RateLimit struct {
	Limit     int       `json:"limit"`
	Remaining int       `json:"remaining"`
	Reset     time.Time `json:"reset"`
}

// primaryLocked returns cred's primary window, rolled over if its reset has
// passed. A credential first seen starts from SetRateLimit's window.
func (f *Fake) primaryLocked(cred string, now time.Time) *RateLimit {
	w, ok := f.primary[cred]
	if !ok {
		cp := f.primaryStart
		w = &cp
		f.primary[cred] = w
	}
	if !now.Before(w.Reset) {
		w.Remaining = w.Limit
		w.Reset = now.Add(time.Hour)
	}
	return w
}

// SetCredentialRateLimit sets one credential's primary window (credential
// as TokenCredential, InstallationCredential, AppCredential or Anonymous
// name it); a zero reset means an hour from now.
func (f *Fake) SetCredentialRateLimit(cred string, limit, remaining int, reset time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if reset.IsZero() {
		reset = f.now().Add(time.Hour)
	}
	f.primary[cred] = &RateLimit{Limit: limit, Remaining: remaining, Reset: reset}
}

// PrimaryRateLimit returns cred's primary window as its next answer would
// start from.
func (f *Fake) PrimaryRateLimit(cred string) RateLimit {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.primaryLocked(cred, f.now())
}

// spendPrimaryLocked counts an authenticated request against cred's primary
// limit, or returns the answer GitHub gives once it is spent. StyleGHES has
// no primary limit.
func (f *Fake) spendPrimaryLocked(h http.Header, cred string, now time.Time) (response, bool) {
	if f.style == StyleGHES {
		return response{}, true
	}
	w := f.primaryLocked(cred, now)
	if w.Remaining <= 0 {
		f.rateHeadersLocked(h, cred)
		return errorResponseDocs(f.rateLimitStatus, h,
			"API rate limit exceeded for installation. If you reach out to GitHub Support for help, please include the request ID.", PrimaryDocsURL), false
	}
	w.Remaining--
	f.rateHeadersLocked(h, cred)
	return response{}, true
}

func (f *Fake) rateHeadersLocked(h http.Header, cred string) {
	w := f.primaryLocked(cred, f.now())
	h.Set("X-RateLimit-Limit", strconv.Itoa(w.Limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max(w.Remaining, 0)))
	h.Set("X-RateLimit-Used", strconv.Itoa(w.Limit-max(w.Remaining, 0)))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(w.Reset.Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
}

// ownerOf is the owner part of a scope's name (the enterprise for one).
func ownerOf(k scopeKey) string {
	owner, _, _ := strings.Cut(k.name, "/")
	return owner
}
