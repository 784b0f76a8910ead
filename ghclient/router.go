package ghclient

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// DefaultMaxClients bounds a Router's per-Secret clients when
// RouterConfig.MaxClients is 0.
const DefaultMaxClients = 64

// ErrNoDefaultCredentials: a runner named no credentials of its own and no
// default (flag-configured) credentials exist.
var ErrNoDefaultCredentials = errors.New("no GitHub credentials: the runner names none and no default credentials are configured")

// RouterConfig configures a Router. The settings besides Default and
// MaxClients apply to every client built from Credentials.
type RouterConfig struct {
	// Default serves runners without Credentials; nil when there are no
	// static credentials.
	Default *Client
	// MaxClients bounds the clients kept for Credentials (least recently used
	// is evicted); default DefaultMaxClients.
	MaxClients int
	// AllowHTTP permits plain http:// base URLs in Credentials.
	AllowHTTP bool
	UserAgent string
	Transport http.RoundTripper
	Metrics   *Metrics
	CacheTTL  time.Duration
	Now       func() time.Time
}

// Router sends each runner's requests through the client for its
// credentials: the default client, or one client per Credentials.Key, rebuilt
// when Credentials.Version changes. It is safe for concurrent use.
type Router struct {
	def  *Client
	max  int
	opts clientOptions
	http bool

	mu      sync.Mutex
	lru     *list.List               // of *routed, most recently used first
	clients map[string]*list.Element // by Credentials.Key
}

type routed struct {
	key, version string
	client       *Client
}

// NewRouter validates cfg and builds a Router. It makes no requests.
func NewRouter(cfg RouterConfig) (*Router, error) {
	switch {
	case cfg.MaxClients < 0:
		return nil, fmt.Errorf("invalid RouterConfig.MaxClients: must not be negative, got %d", cfg.MaxClients)
	case cfg.CacheTTL < 0:
		return nil, fmt.Errorf("invalid RouterConfig.CacheTTL: must not be negative, got %s", cfg.CacheTTL)
	}
	r := &Router{
		def:  cfg.Default,
		max:  cfg.MaxClients,
		http: cfg.AllowHTTP,
		opts: clientOptions{
			userAgent: cfg.UserAgent, transport: cfg.Transport, metrics: cfg.Metrics, ttl: cfg.CacheTTL, now: cfg.Now,
		},
		lru:     list.New(),
		clients: map[string]*list.Element{},
	}
	if r.max == 0 {
		r.max = DefaultMaxClients
	}
	return r, nil
}

// Unregister is Client.Unregister with the runner's client; rn.ID and
// rn.IDTrusted are its IDHint.
func (r *Router) Unregister(ctx context.Context, rn Runner) (Outcome, error) {
	c, err := r.ClientFor(rn.Creds)
	if err != nil {
		return 0, err
	}
	return c.Unregister(ctx, rn.Scope, rn.Name, IDHint{ID: rn.ID, Trusted: rn.IDTrusted})
}

// Status is Client.Status with the runner's client.
func (r *Router) Status(ctx context.Context, rn Runner) (RunnerStatus, error) {
	c, err := r.ClientFor(rn.Creds)
	if err != nil {
		return RunnerStatus{}, err
	}
	return c.Status(ctx, rn.Scope, rn.Name)
}

// ClientFor returns the client for creds (nil: the default client), building
// it when the key is new or its version changed. Invalid credentials give a
// *CredentialsError naming the field; nothing is cached for them.
func (r *Router) ClientFor(creds *Credentials) (*Client, error) {
	if creds == nil {
		if r.def == nil {
			return nil, ErrNoDefaultCredentials
		}
		return r.def, nil
	}
	if creds.Key == "" {
		return nil, &CredentialsError{Field: "Key", Err: errors.New("empty: credentials need a key to be cached by")}
	}
	if c := r.cached(creds.Key, creds.Version); c != nil {
		return c, nil
	}
	// Built outside the lock: parsing a key costs a millisecond or so. Two
	// callers racing build twice; the second one stored wins, both work.
	c, err := r.build(creds)
	if err != nil {
		return nil, err
	}
	r.store(creds.Key, creds.Version, c)
	return c, nil
}

// Len reports how many per-Credentials clients are kept.
func (r *Router) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Len()
}

func (r *Router) cached(key, version string) *Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.clients[key]
	if !ok {
		return nil
	}
	rt := el.Value.(*routed)
	if rt.version != version {
		return nil
	}
	r.lru.MoveToFront(el)
	return rt.client
}

func (r *Router) store(key, version string, c *Client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.clients[key]; ok {
		el.Value = &routed{key: key, version: version, client: c}
		r.lru.MoveToFront(el)
		return
	}
	r.clients[key] = r.lru.PushFront(&routed{key: key, version: version, client: c})
	for r.lru.Len() > r.max {
		oldest := r.lru.Back()
		r.lru.Remove(oldest)
		delete(r.clients, oldest.Value.(*routed).key)
	}
}

func (r *Router) build(creds *Credentials) (*Client, error) {
	a, ferr := checkAuth(credentialsAuthInput(creds, r.http))
	if ferr != nil {
		return nil, &CredentialsError{Key: creds.Key, Field: ferr.field, Err: ferr.err}
	}
	c, err := newClient(a, r.opts)
	if err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			return nil, &CredentialsError{Key: creds.Key, Field: fe.field, Err: fe.err}
		}
		return nil, fmt.Errorf("GitHub credentials %q: %w", creds.Key, err)
	}
	return c, nil
}

func credentialsAuthInput(c *Credentials, allowHTTP bool) authInput {
	in := authInput{baseURL: c.BaseURL, allowHTTP: allowHTTP, token: c.Token}
	if c.AppID != "" || c.InstallationID != 0 || len(c.PrivateKey) > 0 {
		in.app, in.appID, in.install, in.key = true, c.AppID, c.InstallationID, c.PrivateKey
	}
	return in
}
