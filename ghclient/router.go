package ghclient

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxClients bounds a Router's clients for Credentials when
// RouterConfig.MaxClients is 0. Clients are kept per distinct credentials
// (Fingerprint), not per Secret: hundreds of scale sets sharing a few
// Secrets' contents hold a few clients.
const DefaultMaxClients = 256

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
	// CABundle holds PEM certificates every client built from Credentials
	// trusts besides the system pool and the credentials' own bundle (the
	// --github-ca-bundle flag's).
	CABundle  []byte
	UserAgent string
	Transport http.RoundTripper
	Metrics   *Metrics
	CacheTTL  time.Duration
	Now       func() time.Time
	// Budgets is shared by every client built from Credentials, so a
	// rebuilt client keeps its credential's budget; nil: defaults.
	Budgets *Budgets
}

// Router sends each runner's requests through the client for its
// credentials: the default client, or one client per Fingerprint of
// Credentials, so Secrets with the same contents share one client (one
// installation token, one name->ID cache) and a Secret whose contents change
// gets a new one. It is safe for concurrent use.
type Router struct {
	def  *Client
	max  int
	opts clientOptions
	http bool
	ca   []byte

	mu      sync.Mutex
	lru     *list.List               // of *routed, most recently used first
	clients map[string]*list.Element // by Fingerprint
}

type routed struct {
	fingerprint string
	client      *Client
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
		ca:   cfg.CABundle,
		opts: clientOptions{
			userAgent: cfg.UserAgent, transport: cfg.Transport, metrics: cfg.Metrics, ttl: cfg.CacheTTL, now: cfg.Now,
			budgets: cfg.Budgets,
		},
		lru:     list.New(),
		clients: map[string]*list.Element{},
	}
	if r.max == 0 {
		r.max = DefaultMaxClients
	}
	if r.opts.budgets == nil {
		budgets, err := NewBudgets(BudgetConfig{Now: cfg.Now}, cfg.Metrics)
		if err != nil {
			return nil, err
		}
		r.opts.budgets = budgets
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
// it when no client holds the same credentials (Fingerprint). Invalid
// credentials give a *CredentialsError naming the field; nothing is cached
// for them.
func (r *Router) ClientFor(creds *Credentials) (*Client, error) {
	if creds == nil {
		if r.def == nil {
			return nil, ErrNoDefaultCredentials
		}
		return r.def, nil
	}
	if creds.Key == "" {
		return nil, &CredentialsError{Field: "Key", Err: errors.New("empty: credentials need a key to name them by")}
	}
	fp := creds.Fingerprint()
	if c := r.cached(fp); c != nil {
		return c, nil
	}
	// Built outside the lock: parsing a key costs a millisecond or so. Two
	// callers racing build twice; the first one stored wins, both work.
	c, err := r.build(creds)
	if err != nil {
		return nil, err
	}
	return r.store(fp, c), nil
}

// Len reports how many per-Credentials clients are kept.
func (r *Router) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Len()
}

// Collectors returns the Router's own collectors: the gauge of clients it
// holds (runner_guard_github_clients).
func (r *Router) Collectors() []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "runner_guard_github_clients",
		Help: "GitHub clients held for runners' own credentials (ARC's githubConfigSecret), one per distinct credentials, CA bundle and proxy; bounded by an LRU.",
	}, func() float64 { return float64(r.Len()) })}
}

func (r *Router) cached(fp string) *Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	el, ok := r.clients[fp]
	if !ok {
		return nil
	}
	r.lru.MoveToFront(el)
	return el.Value.(*routed).client
}

// store keeps c unless a racing caller stored a client for fp first; it
// returns the client kept.
func (r *Router) store(fp string, c *Client) *Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.clients[fp]; ok {
		r.lru.MoveToFront(el)
		c.release()
		return el.Value.(*routed).client
	}
	r.clients[fp] = r.lru.PushFront(&routed{fingerprint: fp, client: c})
	for r.lru.Len() > r.max {
		oldest := r.lru.Back()
		r.lru.Remove(oldest)
		gone := oldest.Value.(*routed)
		delete(r.clients, gone.fingerprint)
		// Its budget, listings and metric series go with it. A decision
		// still using it finishes; its budget is simply no longer shared.
		gone.client.release()
	}
	return c
}

func (r *Router) build(creds *Credentials) (*Client, error) {
	a, ferr := checkAuth(credentialsAuthInput(creds, r.http))
	if ferr == nil {
		a.net, ferr = checkNetwork([][]byte{r.ca, creds.Network.CABundle}, creds.Network.Proxy)
	}
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

// Fingerprint identifies what the credentials are: API base, token or App
// (ID, installation, key), CA bundle and proxy, but not Key or Version. Two
// Secrets with the same contents have the same fingerprint; a Secret whose
// contents change gets another. It is a SHA-256, so it names no secret.
func (c *Credentials) Fingerprint() string {
	h := sha256.New()
	field := func(h hash.Hash, b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	for _, s := range []string{c.BaseURL, c.Token, c.AppID, strconv.FormatInt(c.InstallationID, 10)} {
		field(h, []byte(s))
	}
	// A key file's trailing newline does not make it another key.
	field(h, bytes.TrimSpace(c.PrivateKey))
	field(h, c.Network.CABundle)
	if p := c.Network.Proxy; p != nil {
		field(h, []byte("proxy"))
		field(h, []byte(p.HTTPS))
		field(h, []byte(p.HTTP))
		for _, np := range p.NoProxy {
			field(h, []byte(np))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
