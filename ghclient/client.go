package ghclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v93/github"

	"github.com/runner-guard/runner-guard/internal/lru"
)

const (
	// DefaultBaseURL is github.com's REST API.
	DefaultBaseURL = "https://api.github.com/"
	// DefaultCacheTTL bounds how long a runner name maps to a cached ID.
	DefaultCacheTTL = time.Hour
	// DefaultUserAgent is sent when Config.UserAgent is empty.
	DefaultUserAgent = "runner-guard"

	// requestTimeout is a backstop for callers without a deadline; GitHub itself
	// ends requests after 10 seconds.
	requestTimeout = 30 * time.Second
	// lookupTimeout bounds a shared look-up; it is cancelled earlier when every
	// caller waiting for it has given up.
	lookupTimeout = 30 * time.Second
	// listPerPage is GitHub's maximum page size.
	listPerPage = 100
	// maxListPages stops a misbehaving server from paging us forever (100k runners).
	maxListPages = 1000
	// maxCacheEntries bounds the name->ID cache; ephemeral runners churn names.
	maxCacheEntries = 10000
)

// SameBaseURL reports whether two GitHub API base URLs name the same API:
// scheme, host and path, ignoring a trailing slash and the letter case of
// the scheme and host.
func SameBaseURL(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil {
		return false
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && strings.EqualFold(ua.Host, ub.Host) &&
		strings.TrimSuffix(ua.Path, "/") == strings.TrimSuffix(ub.Path, "/")
}

// AppCredentials authenticate as a GitHub App.
type AppCredentials struct {
	// AppID is the App's numeric ID; ClientID ("Iv1...") may be set instead.
	AppID    int64
	ClientID string
	// InstallationID 0 means: find the installation of each runner's owner
	// (GET /orgs/{org}/installation or /repos/{owner}/{repo}/installation).
	InstallationID int64
	PrivateKeyPEM  []byte
}

// Config configures a Client. Exactly one of Token, TokenFile and App must be set.
type Config struct {
	// BaseURL is the REST API root: DefaultBaseURL when empty; for GitHub
	// Enterprise Server "https://HOST/api/v3/". A trailing slash is added.
	BaseURL string
	// AllowHTTP permits a plain http:// BaseURL (a trusted network, tests).
	AllowHTTP bool
	// Token is a personal access or fine-grained token.
	Token string
	// TokenFile holds the token; it is re-read when it changes (a rotated
	// Secret), and once more before giving up on a 401.
	TokenFile string
	// App authenticates as a GitHub App installation.
	App *AppCredentials
	// UserAgent is sent with every request, e.g. "runner-guard/v0.1.0".
	UserAgent string
	// Transport is the base transport (tests); default a clone of http.DefaultTransport.
	Transport http.RoundTripper
	// Network adds CA certificates to trust and an explicit proxy; the zero
	// value trusts the system pool and uses HTTPS_PROXY, HTTP_PROXY and
	// NO_PROXY from the environment.
	Network Network
	// Metrics, when set, records every request that reaches the network.
	Metrics *Metrics
	// CacheTTL is the lifetime of a name->ID cache entry; default DefaultCacheTTL.
	CacheTTL time.Duration
	// Now is the clock for cache expiry, RetryAfter and token file checks; default time.Now.
	Now func() time.Time
	// Budgets holds the credential's share of GitHub's rate limits; nil: a
	// budget of its own with the defaults.
	Budgets *Budgets
}

// Client unregisters self-hosted runners. It is safe for concurrent use.
type Client struct {
	// gh serves every scope, unless installs is set (an App without a fixed
	// installation), which picks one client per runner owner.
	gh       *github.Client
	installs *installations
	isApp    bool
	cloud    bool // github.com or GHE.com: a bare 403 is a rate limit
	ttl      time.Duration
	now      func() time.Time
	metrics  *Metrics // nil: none
	// budget is the credential's: every request passes through it, until
	// release hands it back to budgets.
	budget  *Budget
	budgets *Budgets
	// base is the client's own connections (its CA bundle and proxy).
	base http.RoundTripper
	// listings are the shared per-scope runner listings (listing.go).
	listings *listings
	// failures are scopes GitHub answered 404, 401 or 403 (failures.go).
	failures *lru.Cache[Scope, scopeFailure]
	// tokenFile is the token's file, nil for other credentials.
	tokenFile *fileToken
	// install and appAPI are an App's fixed installation and a client
	// authenticated as the App, for CheckRerunRight (runs.go).
	install int64
	appAPI  *github.Client

	// ids maps runner names to IDs (bounded, least recently used dropped first).
	ids *lru.Cache[lookupKey, int64]

	mu    sync.Mutex
	calls map[lookupKey]*lookupCall
	// scopes are the X-OAuth-Scopes a classic token's last answer named.
	scopes     string
	scopesSeen bool
}

type lookupKey struct {
	scope Scope
	name  string
}

// ConfigError names the Config field New rejected, so a caller can point at
// its own flag or setting.
type ConfigError struct {
	Field string // e.g. "BaseURL", "App.PrivateKeyPEM"
	Err   error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("invalid Config.%s: %v", e.Field, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

// ErrAppEnterpriseScope: GitHub Apps cannot manage enterprise runners; they
// need a token. Returned (wrapped) before any request is made.
var ErrAppEnterpriseScope = errors.New("GitHub Apps cannot manage enterprise runners: enterprise scope needs a token")

// clientOptions are the settings that do not identify credentials; a Router
// shares them between its clients.
type clientOptions struct {
	userAgent string
	transport http.RoundTripper
	metrics   *Metrics
	ttl       time.Duration
	now       func() time.Time
	budgets   *Budgets
}

// New validates cfg and builds a Client. It makes no requests.
func New(cfg Config) (*Client, error) {
	a, ferr := checkAuth(configAuthInput(cfg))
	if ferr != nil {
		return nil, configError(cfg, ferr)
	}
	if a.net, ferr = checkNetwork([][]byte{cfg.Network.CABundle}, cfg.Network.Proxy); ferr != nil {
		return nil, configError(cfg, ferr)
	}
	if cfg.CacheTTL < 0 {
		return nil, &ConfigError{Field: "CacheTTL", Err: fmt.Errorf("must not be negative, got %s", cfg.CacheTTL)}
	}
	c, err := newClient(a, clientOptions{
		userAgent: cfg.UserAgent, transport: cfg.Transport, metrics: cfg.Metrics, ttl: cfg.CacheTTL, now: cfg.Now,
		budgets: cfg.Budgets,
	})
	if err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			return nil, configError(cfg, fe)
		}
		return nil, err
	}
	return c, nil
}

func configAuthInput(cfg Config) authInput {
	in := authInput{baseURL: cfg.BaseURL, allowHTTP: cfg.AllowHTTP, token: cfg.Token, tokenFile: cfg.TokenFile}
	if app := cfg.App; app != nil {
		in.app, in.install, in.key = true, app.InstallationID, app.PrivateKeyPEM
		in.appID = app.ClientID
		if in.appID == "" && app.AppID != 0 {
			in.appID = strconv.FormatInt(app.AppID, 10)
		}
	}
	return in
}

// configError renders a credential problem with the Config field's name.
func configError(cfg Config, fe *fieldError) error {
	field := map[CredentialField]string{
		FieldBaseURL:        "BaseURL",
		FieldToken:          "Token",
		FieldAppID:          "App.AppID",
		FieldInstallationID: "App.InstallationID",
		FieldPrivateKey:     "App.PrivateKeyPEM",
		FieldCABundle:       "Network.CABundle",
		FieldProxy:          "Network.Proxy",
	}[fe.field]
	if fe.field == FieldToken && cfg.TokenFile != "" {
		field = "TokenFile"
	}
	return &ConfigError{Field: field, Err: fe.err}
}

// newClient builds a Client from validated credentials.
func newClient(a auth, o clientOptions) (*Client, error) {
	// The CA bundle and proxy apply to every request, token exchanges too.
	rt := a.net.transport(o.transport)
	base := rt
	// Metrics sit under authentication so the token exchange is counted too.
	if o.metrics != nil {
		rt = &instrumentedTransport{next: rt, metrics: o.metrics}
	}
	budgets := o.budgets
	if budgets == nil {
		var err error
		if budgets, err = NewBudgets(BudgetConfig{Now: o.now}, o.metrics); err != nil {
			return nil, err
		}
	}
	budget := budgets.For(budgets.credentialID(a))
	// The budget sees every request of the credential, token exchanges too,
	// and holds back what would overspend it before it reaches the network.
	rt = &budgetTransport{next: rt, budget: budget}
	c := &Client{
		budget:   budget,
		budgets:  budgets,
		base:     base,
		listings: newListings(),
		isApp:    a.app != nil,
		cloud:    a.cloud,
		ttl:      o.ttl,
		now:      o.now,
		metrics:  o.metrics,
		calls:    map[lookupKey]*lookupCall{},
	}
	if c.ttl == 0 {
		c.ttl = DefaultCacheTTL
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.ids = lru.New[lookupKey, int64](maxCacheEntries, c.ttl, c.now)
	c.failures = lru.New[Scope, scopeFailure](maxFailures, FailureTTL, c.now)
	var err error
	switch {
	case a.app != nil:
		err = c.setupApp(a, rt, o.userAgent)
	case a.tokenFile != "":
		var src *fileToken
		if src, err = newFileToken(a.tokenFile, c.now); err == nil {
			c.tokenFile = src
			c.gh, err = newGitHub(a.base, o.userAgent, &tokenTransport{src: src, next: rt})
		}
	default:
		c.gh, err = newGitHub(a.base, o.userAgent, rt, github.WithAuthToken(a.token))
	}
	if err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// release hands the client's budget back: a Router calls it for a client it
// no longer keeps. The client must not be used after.
func (c *Client) release() {
	c.budgets.Release(c.budget)
	// Its connections go too: a Secret rotated in a loop must not keep one
	// idle connection per version open.
	if t, ok := c.base.(interface{ CloseIdleConnections() }); ok && c.base != http.DefaultTransport {
		t.CloseIdleConnections()
	}
}

// setupApp authenticates as the App's fixed installation, or prepares to find
// the installation of each runner owner with one shared key.
func (c *Client) setupApp(a auth, rt http.RoundTripper, userAgent string) error {
	atr, err := appsTransport(rt, a.app)
	if err != nil {
		return err
	}
	// Installation tokens come from the same API root (GHES: HOST/api/v3).
	atr.BaseURL = strings.TrimSuffix(a.base, "/")
	if a.app.install > 0 {
		// A copy for the installation: ghinstallation writes the apps
		// transport's fields on each token refresh, and appAPI uses it too.
		itr := *atr
		c.gh, err = newGitHub(a.base, userAgent, ghinstallation.NewFromAppsTransport(&itr, a.app.install))
		if err != nil {
			return err
		}
		c.install = a.app.install
		c.appAPI, err = newGitHub(a.base, userAgent, atr)
		return err
	}
	appAPI, err := newGitHub(a.base, userAgent, atr)
	if err != nil {
		return err
	}
	c.installs = &installations{
		atr:    atr,
		appAPI: appAPI,
		build:  func(itr http.RoundTripper) (*github.Client, error) { return newGitHub(a.base, userAgent, itr) },
		owners: map[string]*installation{},
	}
	return nil
}

func newGitHub(base, userAgent string, rt http.RoundTripper, extra ...github.ClientOptionsFunc) (*github.Client, error) {
	if userAgent == "" {
		userAgent = DefaultUserAgent
	}
	opts := []github.ClientOptionsFunc{
		github.WithURLs(&base, &base),
		github.WithUserAgent(userAgent),
		github.WithTimeout(requestTimeout),
		github.WithMaxSecondaryRateLimitRetryAfterDuration(maxRememberedSecondary),
		github.WithTransport(rt),
	}
	gh, err := github.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("create GitHub client: %w", err)
	}
	return gh, nil
}

// IDHint is a runner ID the caller already knows; the zero value is none.
type IDHint struct {
	// ID is the runner's ID on GitHub, 0 if unknown.
	ID int64
	// Trusted says ID comes from a source that cannot name another runner
	// (ARC's own object). An untrusted ID, e.g. from a pod annotation a tenant
	// can write, is used only once GitHub's record for it carries the runner's
	// name.
	Trusted bool
}

// Unregister removes the runner from GitHub unless it is running a job. It makes
// one DELETE in steady state: the ID comes from a trusted hint, else the cache,
// else a fresh listing of the scope, else a list by name. An untrusted hint is
// verified first (see verifyHint: the cache, the scope's listing, or a GET of
// the ID); when GitHub's record names another runner or does not exist, the
// hint is ignored and Unregister proceeds as without one. A 404 on a known ID means the runner
// is gone or re-registered under a new ID, so the name is looked up once more.
//
// Errors: *RateLimited (use errors.As) for rate limits, else a wrapped error
// naming the operation, scope, runner and HTTP status. It never retries or
// sleeps; ctx bounds it.
func (c *Client) Unregister(ctx context.Context, scope Scope, runnerName string, hint IDHint) (Outcome, error) {
	if err := c.checkArgs(scope, runnerName); err != nil {
		return 0, err
	}
	key := lookupKey{scope: scope, name: runnerName}
	id := max(hint.ID, 0)
	if id > 0 && !hint.Trusted {
		ok, err := c.verifyHint(ctx, key, id)
		if err != nil {
			return 0, err
		}
		if !ok {
			id = 0
		}
	}
	if id == 0 {
		id = c.cached(key)
	}
	if id == 0 {
		// GitHub's listing of the scope, if one is fresh; a 404 on it
		// (re-registered since) looks the name up below.
		id = c.listedIDOf(scope, runnerName)
	}
	if id > 0 {
		out, err := c.deleteRunner(ctx, scope, runnerName, id)
		switch {
		case err != nil:
			return 0, err
		case out == Removed:
			c.forget(key)
			return Removed, nil
		case out == Busy:
			return Busy, nil
		}
		c.forget(key)
	}

	r, err := c.lookup(ctx, key)
	if err != nil {
		return 0, err
	}
	if r == nil || r.GetID() == id {
		// Not listed, or listed under the very ID GitHub just answered 404 for.
		c.forget(key)
		return NotFound, nil
	}
	out, err := c.deleteRunner(ctx, scope, runnerName, r.GetID())
	if err != nil {
		return 0, err
	}
	if out != Busy {
		c.forget(key)
	}
	return out, nil
}

// Status looks the runner up without changing anything (dry runs). It costs one
// list request (more only when the name filter returns several pages).
func (c *Client) Status(ctx context.Context, scope Scope, runnerName string) (RunnerStatus, error) {
	if err := c.checkArgs(scope, runnerName); err != nil {
		return RunnerStatus{}, err
	}
	r, err := c.lookup(ctx, lookupKey{scope: scope, name: runnerName})
	if err != nil {
		return RunnerStatus{}, err
	}
	if r == nil {
		return RunnerStatus{State: StateNotFound}, nil
	}
	st := RunnerStatus{State: StateIdle, ID: r.GetID(), Online: r.GetStatus() == "online"}
	if r.GetBusy() {
		st.State = StateBusy
	}
	return st, nil
}

func (c *Client) checkArgs(scope Scope, runnerName string) error {
	if c.isApp && scope.Kind == ScopeEnterprise {
		return fmt.Errorf("runner %q in %s: %w", runnerName, scope, ErrAppEnterpriseScope)
	}
	switch scope.Kind {
	case ScopeEnterprise, ScopeOrg, ScopeRepo:
	default:
		return fmt.Errorf("unknown scope kind %q", scope.Kind)
	}
	if _, err := newScope(scope.Kind, scope.Name); err != nil {
		return err
	}
	if runnerName == "" {
		return errors.New("empty runner name")
	}
	return nil
}

// verifyHint reports whether GitHub's record for the untrusted ID id carries
// k's name: the cache mapping k to id answers without a request, else the
// scope's listing (see listedName), else a GET of the ID; a yes fills the
// cache. A record naming another runner, or none, is not an error: the hint
// is not to be used.
func (c *Client) verifyHint(ctx context.Context, k lookupKey, id int64) (bool, error) {
	if c.cached(k) == id {
		return true, nil
	}
	name, listed := c.listedName(ctx, k.scope, id)
	if !listed {
		r, err := c.getRunner(ctx, k.scope, k.name, id)
		switch {
		case err != nil:
			return false, err
		case r == nil:
			c.metrics.hintRejected(hintNotFound)
			return false, nil
		}
		name = r.GetName()
	}
	if name != k.name {
		c.metrics.hintRejected(hintOtherRunner)
		return false, nil
	}
	c.remember(k, id)
	return true, nil
}

// getRunner gets the runner with ID id in scope: nil, nil on a 404.
func (c *Client) getRunner(ctx context.Context, scope Scope, name string, id int64) (*github.Runner, error) {
	op := fmt.Sprintf("verify runner %q (id %d) in %s", name, id, scope)
	gh, err := c.api(ctx, scope)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	var r *github.Runner
	var resp *github.Response
	switch scope.Kind {
	case ScopeRepo:
		owner, repo, _ := strings.Cut(scope.Name, "/")
		r, resp, err = gh.Actions.GetRunner(ctx, owner, repo, id)
	case ScopeOrg:
		r, resp, err = gh.Actions.GetOrganizationRunner(ctx, scope.Name, id)
	default:
		r, resp, err = gh.Enterprise.GetRunner(ctx, scope.Name, id)
	}
	switch {
	case err == nil && r != nil:
		return r, nil
	case err == nil:
		// 200 without a body: nothing names the runner.
		return nil, fmt.Errorf("%s: GitHub answered without a runner", op)
	case statusOf(err) == http.StatusNotFound:
		// Unregister lists next; a lost installation shows there.
		return nil, nil
	}
	return nil, c.fail(scope, op, resp, err)
}

// deleteRunner answers Removed (2xx), NotFound (404) or Busy (422 saying the
// runner is running a job).
func (c *Client) deleteRunner(ctx context.Context, scope Scope, name string, id int64) (Outcome, error) {
	op := fmt.Sprintf("remove runner %q (id %d) from %s", name, id, scope)
	gh, err := c.api(ctx, scope)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	var resp *github.Response
	switch scope.Kind {
	case ScopeRepo:
		owner, repo, _ := strings.Cut(scope.Name, "/")
		resp, err = gh.Actions.RemoveRunner(ctx, owner, repo, id)
	case ScopeOrg:
		resp, err = gh.Actions.RemoveOrganizationRunner(ctx, scope.Name, id)
	default:
		resp, err = gh.Enterprise.RemoveRunner(ctx, scope.Name, id)
	}
	switch {
	case err == nil:
		return Removed, nil
	case statusOf(err) == http.StatusNotFound:
		// Unregister lists next; a lost installation shows there.
		return NotFound, nil
	case statusOf(err) == http.StatusUnprocessableEntity:
		// GitHub words it `Runner "NAME" is still running a job`, but any 422
		// is busy, as ARC reads it (runner_graceful_stop.go): a refusal costs
		// a retry, while a reworded answer sent to the on-error policy could
		// admit the delete and cancel the job.
		return Busy, nil
	}
	return 0, c.fail(scope, op, resp, err)
}

// api returns the GitHub client for scope: the one client, or the client of
// the App installation on the scope's owner.
func (c *Client) api(ctx context.Context, scope Scope) (*github.Client, error) {
	if err := c.recall(scope); err != nil {
		return nil, err
	}
	if c.installs == nil {
		return c.gh, nil
	}
	return c.installs.client(ctx, c, scope)
}

// fail is the error of a failed request about scope: GitHub's 404, 401 or
// 403 is remembered for the scope (failures.go), and a discovered
// installation GitHub says is gone is dropped.
func (c *Client) fail(scope Scope, op string, resp *github.Response, err error) error {
	wrapped := c.wrap(op, resp, err)
	if c.forgetInstallation(scope, err) {
		// The next request asks with a new installation: nothing to remember.
		return wrapped
	}
	c.failed(scope, err, wrapped)
	return wrapped
}

// forgetInstallation drops a discovered installation when GitHub says it is
// gone (see installationGone): the App was uninstalled or reinstalled under
// a new ID. A 404 from a listing is not that: the App may simply not see
// that one repository, and every other team under the owner would pay a new
// look-up and token.
func (c *Client) forgetInstallation(scope Scope, err error) bool {
	if c.installs == nil || !installationGone(err) {
		return false
	}
	c.installs.forget(scope)
	return true
}

// wrap names the operation and maps rate limits to *RateLimited.
func (c *Client) wrap(op string, resp *github.Response, err error) error {
	if rl := rateLimited(err, c.now(), c.cloud); rl != nil {
		if !rl.Primary {
			// A secondary limit holds the whole credential for its wait, also
			// when GitHub named none (at least a minute): the budget's own
			// look at the answer cannot tell it from a permission 403.
			c.budget.hold(rl.RetryAfter)
		}
		return fmt.Errorf("%s: %w", op, rl)
	}
	// API errors already carry method, URL and status; others (bad JSON) do not.
	if statusOf(err) == 0 && resp != nil && resp.Response != nil {
		return fmt.Errorf("%s: HTTP %d: %w", op, resp.StatusCode, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
func (c *Client) cached(k lookupKey) int64 {
	id, _ := c.ids.Get(k)
	return id
}

func (c *Client) remember(k lookupKey, id int64) { c.ids.Add(k, id) }

func (c *Client) forget(k lookupKey) { c.ids.Remove(k) }
