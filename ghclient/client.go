package ghclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v93/github"
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

// AppCredentials authenticate as a GitHub App installation.
type AppCredentials struct {
	AppID          int64
	InstallationID int64
	PrivateKeyPEM  []byte
}

// Config configures a Client. Exactly one of Token and App must be set.
type Config struct {
	// BaseURL is the REST API root: DefaultBaseURL when empty; for GitHub
	// Enterprise Server "https://HOST/api/v3/". A trailing slash is added.
	BaseURL string
	// Token is a personal access or fine-grained token.
	Token string
	// App authenticates as a GitHub App installation.
	App *AppCredentials
	// UserAgent is sent with every request, e.g. "runner-guard/v0.1.0".
	UserAgent string
	// Transport is the base transport (tests); default a clone of http.DefaultTransport.
	Transport http.RoundTripper
	// Metrics, when set, records every request that reaches the network.
	Metrics *Metrics
	// CacheTTL is the lifetime of a name->ID cache entry; default DefaultCacheTTL.
	CacheTTL time.Duration
	// Now is the clock for cache expiry and RetryAfter; default time.Now.
	Now func() time.Time
}

// Client unregisters self-hosted runners. It is safe for concurrent use.
type Client struct {
	gh  *github.Client
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	cache map[lookupKey]cacheEntry
	calls map[lookupKey]*lookupCall
}

type lookupKey struct {
	scope Scope
	name  string
}

type cacheEntry struct {
	id      int64
	expires time.Time
}

// ConfigError names the Config field New rejected, so a caller can point at
// its own flag or setting.
type ConfigError struct {
	Field string // e.g. "BaseURL", "App.PrivateKeyPEM"
	Err   error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("invalid Config.%s: %v", e.Field, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

// New validates cfg and builds a Client. It makes no requests.
func New(cfg Config) (*Client, error) {
	base, err := normalizeBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Token == "" && cfg.App == nil:
		return nil, errors.New("missing GitHub credentials: set Config.Token or Config.App")
	case cfg.Token != "" && cfg.App != nil:
		return nil, errors.New("conflicting GitHub credentials: set only one of Config.Token and Config.App")
	}
	if cfg.CacheTTL < 0 {
		return nil, &ConfigError{Field: "CacheTTL", Err: fmt.Errorf("must not be negative, got %s", cfg.CacheTTL)}
	}

	rt := cfg.Transport
	if rt == nil {
		rt = http.DefaultTransport.(*http.Transport).Clone()
	}
	// Metrics sit under authentication so the token exchange is counted too.
	if cfg.Metrics != nil {
		rt = &instrumentedTransport{next: rt, metrics: cfg.Metrics}
	}

	ua := cfg.UserAgent
	if ua == "" {
		ua = DefaultUserAgent
	}
	opts := []github.ClientOptionsFunc{
		github.WithURLs(&base, &base),
		github.WithUserAgent(ua),
		github.WithTimeout(requestTimeout),
		github.WithMaxSecondaryRateLimitRetryAfterDuration(maxRememberedSecondary),
	}
	if app := cfg.App; app != nil {
		switch {
		case app.AppID <= 0:
			return nil, &ConfigError{Field: "App.AppID", Err: fmt.Errorf("must be positive, got %d", app.AppID)}
		case app.InstallationID <= 0:
			return nil, &ConfigError{Field: "App.InstallationID", Err: fmt.Errorf("must be positive, got %d", app.InstallationID)}
		case len(app.PrivateKeyPEM) == 0:
			return nil, &ConfigError{Field: "App.PrivateKeyPEM", Err: errors.New("empty")}
		}
		itr, err := ghinstallation.New(rt, app.AppID, app.InstallationID, app.PrivateKeyPEM)
		if err != nil {
			return nil, &ConfigError{Field: "App.PrivateKeyPEM", Err: err}
		}
		// Installation tokens come from the same API root (GHES: HOST/api/v3).
		itr.BaseURL = strings.TrimSuffix(base, "/")
		rt = itr
	} else {
		opts = append(opts, github.WithAuthToken(cfg.Token))
	}
	opts = append(opts, github.WithTransport(rt))

	gh, err := github.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("create GitHub client: %w", err)
	}
	c := &Client{
		gh:    gh,
		ttl:   cfg.CacheTTL,
		now:   cfg.Now,
		cache: map[lookupKey]cacheEntry{},
		calls: map[lookupKey]*lookupCall{},
	}
	if c.ttl == 0 {
		c.ttl = DefaultCacheTTL
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

func normalizeBaseURL(raw string) (string, error) {
	if raw == "" {
		return DefaultBaseURL, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", &ConfigError{Field: "BaseURL", Err: err}
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", &ConfigError{Field: "BaseURL", Err: fmt.Errorf("%q: want an absolute http(s) URL such as %s or https://HOST/api/v3/", raw, DefaultBaseURL)}
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", &ConfigError{Field: "BaseURL", Err: fmt.Errorf("%q: must not carry a query, fragment or user info", raw)}
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u.String(), nil
}

// Unregister removes the runner from GitHub unless it is running a job. It makes
// one DELETE in steady state: the ID comes from idHint (>0), else the cache, else
// a list by name. A 404 on a known ID means the runner is gone or re-registered
// under a new ID, so the name is looked up once more.
//
// Errors: *RateLimited (use errors.As) for rate limits, else a wrapped error
// naming the operation, scope, runner and HTTP status. It never retries or
// sleeps; ctx bounds it.
func (c *Client) Unregister(ctx context.Context, scope Scope, runnerName string, idHint int64) (Outcome, error) {
	if err := checkArgs(scope, runnerName); err != nil {
		return 0, err
	}
	key := lookupKey{scope: scope, name: runnerName}
	id := idHint
	if id <= 0 {
		id = c.cached(key)
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
	if err := checkArgs(scope, runnerName); err != nil {
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

func checkArgs(scope Scope, runnerName string) error {
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

// deleteRunner answers Removed (2xx), NotFound (404) or Busy (422).
func (c *Client) deleteRunner(ctx context.Context, scope Scope, name string, id int64) (Outcome, error) {
	var resp *github.Response
	var err error
	switch scope.Kind {
	case ScopeRepo:
		owner, repo, _ := strings.Cut(scope.Name, "/")
		resp, err = c.gh.Actions.RemoveRunner(ctx, owner, repo, id)
	case ScopeOrg:
		resp, err = c.gh.Actions.RemoveOrganizationRunner(ctx, scope.Name, id)
	default:
		resp, err = c.gh.Enterprise.RemoveRunner(ctx, scope.Name, id)
	}
	switch {
	case err == nil:
		return Removed, nil
	case statusOf(err) == http.StatusNotFound:
		return NotFound, nil
	case statusOf(err) == http.StatusUnprocessableEntity:
		return Busy, nil
	}
	return 0, c.wrap(fmt.Sprintf("remove runner %q (id %d) from %s", name, id, scope), resp, err)
}

// wrap names the operation and maps rate limits to *RateLimited.
func (c *Client) wrap(op string, resp *github.Response, err error) error {
	if rl := rateLimited(err, c.now()); rl != nil {
		return fmt.Errorf("%s: %w", op, rl)
	}
	// API errors already carry method, URL and status; others (bad JSON) do not.
	if statusOf(err) == 0 && resp != nil && resp.Response != nil {
		return fmt.Errorf("%s: HTTP %d: %w", op, resp.StatusCode, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (c *Client) cached(k lookupKey) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cache[k]
	if !ok {
		return 0
	}
	if !c.now().Before(e.expires) {
		delete(c.cache, k)
		return 0
	}
	return e.id
}

func (c *Client) remember(k lookupKey, id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if _, ok := c.cache[k]; !ok && len(c.cache) >= maxCacheEntries {
		for ck, e := range c.cache {
			if !now.Before(e.expires) {
				delete(c.cache, ck)
			}
		}
		// Still full of live entries: drop an arbitrary tenth; a miss costs one list.
		for ck := range c.cache {
			if len(c.cache) < maxCacheEntries*9/10 {
				break
			}
			delete(c.cache, ck)
		}
	}
	c.cache[k] = cacheEntry{id: id, expires: now.Add(c.ttl)}
}

func (c *Client) forget(k lookupKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cache, k)
}
