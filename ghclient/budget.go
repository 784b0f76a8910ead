package ghclient

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runner-guard/runner-guard/internal/waitctx"
)

// GitHub's secondary limits for REST, per credential (GITHUB-API.md): 900
// points a minute, where a GET, HEAD or OPTIONS costs 1 point and any other
// method 5, and at most 100 requests in flight.
const (
	GitHubPointsPerMinute = 900
	GitHubConcurrency     = 100
	readPoints            = 1
	writePoints           = 5
	budgetWindow          = time.Minute
)

// Defaults hold half of GitHub's limits for the whole Deployment: a margin
// for other clients of the same credential (ARC itself) and for GitHub
// counting differently from us.
const (
	DefaultBudgetPointsPerMinute = GitHubPointsPerMinute / 2
	DefaultBudgetConcurrency     = GitHubConcurrency / 2
	// recheckShare is the part of the window a re-check (of a runner known
	// to be busy) may use: the rest is kept for unregisters that can let a
	// pod go.
	recheckShare = 0.5
	// pressedShare is the part of the window past which callers are told to
	// prefer cheap knowledge (a shared listing) over a DELETE.
	pressedShare = 0.25
	// primaryReserve is the share of the hourly (primary) limit kept for
	// unregisters that can let a pod go.
	primaryReserve = 0.05
	// DefaultNamespaceShare is the part of a credential's window one
	// namespace may take while others want it: one team's flood of failing
	// deletes leaves the rest for every other team's.
	DefaultNamespaceShare = 0.5
)

// Priority orders requests when the budget is short.
type Priority int

const (
	// PriorityRelease: an unregister that can let a pod go (a runner not
	// known to be busy). It may wait for room until its deadline.
	PriorityRelease Priority = iota
	// PriorityRecheck: asking again about a runner known to be busy. It never
	// waits and may use only part of the budget: the caller answers from
	// what it knows.
	PriorityRecheck
)

func (p Priority) String() string {
	if p == PriorityRecheck {
		return "recheck"
	}
	return "release"
}

// contextKey keys the one value of type T that ghclient keeps in a context:
// a Priority, a namespace, a limitName.
type contextKey[T any] struct{}

func withValue[T any](ctx context.Context, v T) context.Context {
	return context.WithValue(ctx, contextKey[T]{}, v)
}

// valueOf is the value withValue gave ctx, or T's zero value.
func valueOf[T any](ctx context.Context) T {
	v, _ := ctx.Value(contextKey[T]{}).(T)
	return v
}

// WithPriority marks every GitHub request made with ctx.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return withValue(ctx, p)
}

// PriorityOf is the priority WithPriority gave ctx (PriorityRelease when none).
func PriorityOf(ctx context.Context) Priority { return valueOf[Priority](ctx) }

// namespace is the Kubernetes namespace a request is charged to.
type namespace string

// WithNamespace charges every GitHub request made with ctx to the Kubernetes
// namespace ns, for the namespace's fair share of the budget
// (BudgetConfig.NamespaceShare). Requests without one (controllers) are
// charged to nobody and held only by the window.
func WithNamespace(ctx context.Context, ns string) context.Context {
	return withValue(ctx, namespace(ns))
}

func namespaceOf(ctx context.Context) string { return string(valueOf[namespace](ctx)) }

// BudgetConfig sets how much of GitHub's limits a credential's requests may
// use. The figures are for the whole Deployment; each of Replicas replicas
// holds its share, so the sum stays inside GitHub's limit whichever replica
// the API server asks.
type BudgetConfig struct {
	// PointsPerMinute for the Deployment; default DefaultBudgetPointsPerMinute.
	PointsPerMinute int
	// Concurrency for the Deployment; default DefaultBudgetConcurrency.
	Concurrency int
	// Replicas sharing the budget; default 1.
	Replicas int
	// NamespaceShare is the most of the window one namespace may take while
	// another namespace wants it (has spent in the last minute, or waits);
	// default DefaultNamespaceShare. 1 turns fair sharing off.
	NamespaceShare float64
	// Unlimited sends every request at once (GitHub's own retry-after still
	// holds them): a GitHub Enterprise Server with rate limiting off.
	Unlimited bool
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Sleep waits d or until ctx ends; default a timer. Simulations that
	// drive Now replace it.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Validate names the field that is wrong.
func (c BudgetConfig) Validate() error {
	switch {
	case c.PointsPerMinute < 0:
		return fmt.Errorf("BudgetConfig.PointsPerMinute must not be negative, got %d", c.PointsPerMinute)
	case c.PointsPerMinute > GitHubPointsPerMinute:
		return fmt.Errorf("BudgetConfig.PointsPerMinute %d is more than GitHub allows a credential (%d a minute): GitHub would limit or ban it", c.PointsPerMinute, GitHubPointsPerMinute)
	case c.Concurrency < 0:
		return fmt.Errorf("BudgetConfig.Concurrency must not be negative, got %d", c.Concurrency)
	case c.Concurrency > GitHubConcurrency:
		return fmt.Errorf("BudgetConfig.Concurrency %d is more than GitHub allows a credential (%d requests at once)", c.Concurrency, GitHubConcurrency)
	case c.Replicas < 0:
		return fmt.Errorf("BudgetConfig.Replicas must not be negative, got %d", c.Replicas)
	case c.NamespaceShare < 0 || c.NamespaceShare > 1:
		return fmt.Errorf("BudgetConfig.NamespaceShare must be between 0 (the default, %g) and 1, got %g", DefaultNamespaceShare, c.NamespaceShare)
	}
	return nil
}

// share is one replica's part of the Deployment's figures.
func (c BudgetConfig) share() (points, concurrent int) {
	points, concurrent, n := c.PointsPerMinute, c.Concurrency, max(c.Replicas, 1)
	if points == 0 {
		points = DefaultBudgetPointsPerMinute
	}
	if concurrent == 0 {
		concurrent = DefaultBudgetConcurrency
	}
	// A DELETE must always fit, however many replicas share the budget.
	return max(points/n, writePoints), max(concurrent/n, 1)
}

// Budgets holds one Budget per credential, shared by every client built for
// that credential (a rebuilt client keeps what the old one spent). It is safe
// for concurrent use.
//
// A budget lives as long as a client holds it: For counts a holder, Release
// drops one, and the last Release forgets the budget and its metric series.
// A Router releases the client it evicts, so a tenant rotating its Secret in
// a loop holds at most the Router's clients' budgets.
type Budgets struct {
	cfg     BudgetConfig
	metrics *Metrics
	// idKey keys the hashes that name credentials (credentialID): a
	// per-process secret, so a name in metrics cannot be matched against
	// guessed tokens.
	idKey []byte

	mu  sync.Mutex
	all map[string]*Budget
}

// NewBudgets validates cfg.
func NewBudgets(cfg BudgetConfig, m *Metrics) (*Budgets, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = waitctx.Sleep
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("key for credential names: %w", err)
	}
	return &Budgets{cfg: cfg, metrics: m, idKey: key, all: map[string]*Budget{}}, nil
}

// Len is how many budgets are held.
func (bs *Budgets) Len() int {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return len(bs.all)
}

// Release drops one holder of b (see For); the last one forgets b and its
// metric series.
func (bs *Budgets) Release(b *Budget) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b.refs--; b.refs > 0 || bs.all[b.id] != b {
		return
	}
	delete(bs.all, b.id)
	bs.metrics.forgetCredential(b.id)
}

// For returns the budget of the credential called id (see credentialID),
// counting the caller as one more holder until it calls Release.
func (bs *Budgets) For(id string) *Budget {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b, ok := bs.all[id]; ok {
		b.refs++
		return b
	}
	points, concurrent := bs.cfg.share()
	share := bs.cfg.NamespaceShare
	if share == 0 {
		share = DefaultNamespaceShare
	}
	b := &Budget{
		id: id, points: points, recheck: max(int(float64(points)*recheckShare), writePoints),
		share: share, perNamespace: max(int(float64(points)*share), writePoints), byNamespace: map[string]int{}, waiting: map[string]int{}, heldBack: map[string]time.Time{},
		now: bs.cfg.Now, sleep: bs.cfg.Sleep, metrics: bs.metrics,
		slots: make(chan struct{}, concurrent), hourly: map[string]*hourlyLimit{}, unlimited: bs.cfg.Unlimited,
		refs: 1,
	}
	bs.all[id] = b
	b.mu.Lock()
	b.reportLocked()
	b.mu.Unlock()
	return b
}

// credentialID names a credential without revealing it: the API base and a
// keyed hash (HMAC-SHA256 with a per-process key, 128 bits) of the token,
// the token file's path, or the App (and installation) ID with a keyed hash
// of its public key. GitHub counts secondary limits per token or per App
// installation; an App discovering installations shares one budget across
// them, which is stricter than GitHub and never looser. The key is part of
// it because App and installation IDs are not secret: a tenant's Secret
// naming another team's App with a key of its own must not spend that
// team's budget on token exchanges GitHub refuses.
func (bs *Budgets) credentialID(a auth) string {
	base := strings.TrimSuffix(a.base, "/")
	sum := func(b []byte) string {
		h := hmac.New(sha256.New, bs.idKey)
		h.Write(b)
		return hex.EncodeToString(h.Sum(nil)[:16])
	}
	switch {
	case a.app != nil:
		id := "app:" + a.app.issuer
		if a.app.install > 0 {
			id += "/" + strconv.FormatInt(a.app.install, 10)
		}
		if a.app.key != nil {
			id += "#" + sum(a.app.key.N.Bytes())
		}
		return id + "@" + base
	case a.tokenFile != "":
		return "token-file:" + sum([]byte(a.tokenFile)) + "@" + base
	}
	return "token:" + sum([]byte(a.token)) + "@" + base
}

// Budget is one credential's share of GitHub's limits, counted over a
// rolling minute (GitHub's window) so no 60 seconds ever hold more than it.
type Budget struct {
	id      string
	points  int // per rolling minute
	recheck int // what re-checks may use of it
	now     func() time.Time
	sleep   func(ctx context.Context, d time.Duration) error
	metrics *Metrics
	slots   chan struct{} // concurrency
	// unlimited counts but never holds back, but for GitHub's own limit.
	unlimited bool
	// refs counts the clients holding the budget (Budgets.mu).
	refs int
	// share (perNamespace points) is the most one namespace may take of
	// the window while another namespace wants it.
	share        float64
	perNamespace int

	mu    sync.Mutex
	spent []spend // oldest first, within the last minute
	sum   int
	// byNamespace is what each namespace spent of sum; waiting counts the
	// requests of each namespace waiting for room. Both want the window.
	byNamespace map[string]int
	waiting     map[string]int
	// heldBack is when each namespace was last held back for room: it
	// wants the window for a minute after.
	heldBack map[string]time.Time
	// blocked is when GitHub's secondary limit (its retry-after, or a
	// minute) lets the credential's requests go again: none is sent before,
	// since a client that keeps sending while limited can be banned.
	blocked time.Time
	// hourly is GitHub's primary limit, by limitKey: one for a token or a
	// fixed installation, one per installation an App discovers (each has
	// its own), and one for the App's JWT.
	hourly map[string]*hourlyLimit
}

// hourlyLimit is what GitHub's last answer said of one primary limit.
type hourlyLimit struct {
	remaining, limit int
	// blocked: the limit is spent until its reset.
	blocked time.Time
}

// limitName is the primary limit a request counts against.
type limitName string

// limitKey names the primary limit req counts against: the App's own when
// it is authenticated by a JWT (the token exchanges), else the one its
// context names (an installation's), else the credential's.
func limitKey(req *http.Request) string {
	if a := req.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") && strings.Count(a, ".") == 2 {
		return "app-jwt"
	}
	return string(valueOf[limitName](req.Context()))
}

// limitKeyTransport marks every request of one installation's client with
// the installation's primary limit.
type limitKeyTransport struct {
	next http.RoundTripper
	key  string
}

func (t *limitKeyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.next.RoundTrip(req.WithContext(withValue(req.Context(), limitName(t.key))))
}

type spend struct {
	at        time.Time
	points    int
	namespace string
}

// Spent is the error of a request the budget did not send. It carries the
// wait after which a request of the same priority fits.
type Spent struct {
	Credential string
	Priority   Priority
	RetryAfter time.Duration
	// GitHub is set when GitHub's own limit (not runner-guard's) holds.
	GitHub bool
	// Reserve is set when runner-guard keeps the rest of GitHub's hourly
	// limit for releases (a re-check while under 5 % of it is left).
	Reserve bool
	// Namespace is set when what is spent is that namespace's share of the
	// window (BudgetConfig.NamespaceShare), others wanting the rest.
	Namespace string
	// Share is the namespace's share, with Namespace.
	Share float64
}

func (e *Spent) Error() string {
	who := "runner-guard's GitHub request budget"
	switch {
	case e.GitHub:
		who = "GitHub's rate limit"
	case e.Namespace != "":
		return fmt.Sprintf("namespace %s's share (%d%%) of runner-guard's GitHub request budget for this credential is spent while other namespaces use the rest: no request sent (%s priority); room again in %s",
			e.Namespace, int(e.Share*100), e.Priority, roundWait(e.RetryAfter))
	case e.Reserve:
		return fmt.Sprintf("GitHub's hourly limit for this credential is nearly spent and runner-guard keeps the last %d%% for unregisters that can let a pod go: no request sent (%s priority); room again in %s",
			int(primaryReserve*100), e.Priority, roundWait(e.RetryAfter))
	}
	return fmt.Sprintf("%s for this credential is spent: no request sent (%s priority); room again in %s", who, e.Priority, roundWait(e.RetryAfter))
}

func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return time.Second
	}
	return d.Round(time.Second)
}

// cost is GitHub's secondary-limit price of a request.
func cost(method string) int {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return readPoints
	}
	return writePoints
}

// take reserves room for one request of method, counted against the primary
// limit key (see limitKey), waiting (release priority only) while the wait
// ends before ctx's deadline. The returned func frees the concurrency slot.
func (b *Budget) take(ctx context.Context, method, key string) (func(), error) {
	prio, points, ns := PriorityOf(ctx), cost(method), namespaceOf(ctx)
	waited := false
	for {
		wait, nsFull, err := b.reserve(prio, points, key, ns)
		if err != nil {
			b.metrics.budgetDeferred(b.id, prio, "refused")
			return nil, err
		}
		if wait == 0 {
			break
		}
		spent := &Spent{Credential: b.id, Priority: prio, RetryAfter: wait}
		if nsFull {
			spent.Namespace, spent.Share = ns, b.share
		}
		if prio == PriorityRecheck || !fitsBefore(ctx, wait) {
			b.metrics.budgetDeferred(b.id, prio, "refused")
			return nil, spent
		}
		if !waited {
			b.metrics.budgetDeferred(b.id, prio, "waited")
			waited = true
		}
		b.wait(ns, +1)
		err = b.sleep(ctx, wait)
		b.wait(ns, -1)
		if err != nil {
			return nil, spent
		}
	}
	if b.unlimited {
		return func() {}, nil
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		b.refund(points, ns)
		return nil, fmt.Errorf("waiting for one of %d concurrent GitHub requests: %w", cap(b.slots), ctx.Err())
	}
	return func() { <-b.slots }, nil
}

// fitsBefore reports whether a wait ends early enough in ctx's life for a
// request to follow it.
func fitsBefore(ctx context.Context, wait time.Duration) bool {
	deadline, ok := ctx.Deadline()
	if !ok {
		return wait <= budgetWindow
	}
	return time.Until(deadline)-wait >= minRequestTime
}

// minRequestTime is the least time a request is started with.
const minRequestTime = time.Second

// wait counts a request of namespace ns waiting for room (d +1) or done
// waiting (d -1): a waiting namespace wants the window.
func (b *Budget) wait(ns string, d int) {
	if ns == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiting[ns] += d; b.waiting[ns] <= 0 {
		delete(b.waiting, ns)
	}
}

// othersWantLocked reports whether a namespace other than ns wants more of
// the window than it gets: it waits for room, or was held back within the
// last minute. A namespace whose requests all fit wants nothing of the
// others' room, so a namespace alone, or beside quiet ones, may take the
// whole window. b.mu must be held.
func (b *Budget) othersWantLocked(ns string, now time.Time) bool {
	for other := range b.waiting {
		if other != ns {
			return true
		}
	}
	for other, at := range b.heldBack {
		switch {
		case now.Sub(at) >= budgetWindow:
			delete(b.heldBack, other)
		case other != ns:
			return true
		}
	}
	return false
}

// reserve books points now, or says how long until they fit (0, nil: booked);
// nsFull says the wait is for namespace ns's share of the window.
func (b *Budget) reserve(prio Priority, points int, key, ns string) (time.Duration, bool, error) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.reportLocked()
	b.expire(now)
	h := b.hourly[key]
	blocked := b.blocked
	if h != nil {
		blocked = later(blocked, h.blocked)
	}
	if now.Before(blocked) {
		return 0, false, &Spent{Credential: b.id, Priority: prio, RetryAfter: blocked.Sub(now), GitHub: true}
	}
	if b.unlimited {
		b.bookLocked(now, points, ns)
		return 0, false, nil
	}
	limit := b.points
	if prio == PriorityRecheck {
		limit = b.recheck
		if h != nil && h.limit > 0 && float64(h.remaining) < primaryReserve*float64(h.limit) {
			// The hourly limit runs low: keep what is left for releases.
			// runner-guard's own choice: GitHub refused nothing.
			return 0, false, &Spent{Credential: b.id, Priority: prio, RetryAfter: budgetWindow, Reserve: true}
		}
	}
	if ns != "" && b.share < 1 && b.byNamespace[ns]+points > b.perNamespace && b.othersWantLocked(ns, now) {
		// Another namespace wants the window: this one has had its share.
		// Room comes when enough of its own spends leave the window.
		need := b.byNamespace[ns] + points - b.perNamespace
		for _, s := range b.spent {
			if s.namespace != ns {
				continue
			}
			if need -= s.points; need <= 0 {
				return max(s.at.Add(budgetWindow).Sub(now), time.Millisecond), true, nil
			}
		}
		return budgetWindow, true, nil
	}
	if b.sum+points <= limit {
		b.bookLocked(now, points, ns)
		return 0, false, nil
	}
	// Room comes when enough of the oldest spends leave the window. Until
	// then the namespace wants more than it gets.
	if ns != "" {
		b.heldBack[ns] = now
	}
	need := b.sum + points - limit
	for _, s := range b.spent {
		need -= s.points
		if need <= 0 {
			return max(s.at.Add(budgetWindow).Sub(now), time.Millisecond), false, nil
		}
	}
	// points alone exceed the limit; cannot happen with share()'s floor.
	return budgetWindow, false, nil
}

// bookLocked counts points spent now by namespace ns. b.mu must be held.
func (b *Budget) bookLocked(now time.Time, points int, ns string) {
	b.spent = append(b.spent, spend{at: now, points: points, namespace: ns})
	b.sum += points
	if ns != "" {
		b.byNamespace[ns] += points
	}
}

// unbookLocked takes back points counted for namespace ns.
func (b *Budget) unbookLocked(points int, ns string) {
	b.sum -= points
	if ns == "" {
		return
	}
	if b.byNamespace[ns] -= points; b.byNamespace[ns] <= 0 {
		delete(b.byNamespace, ns)
	}
}

func (b *Budget) expire(now time.Time) {
	i := 0
	for ; i < len(b.spent) && !now.Before(b.spent[i].at.Add(budgetWindow)); i++ {
		b.unbookLocked(b.spent[i].points, b.spent[i].namespace)
	}
	b.spent = b.spent[i:]
}

// refund gives back points booked for a request that was never sent.
func (b *Budget) refund(points int, ns string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.spent) - 1; i >= 0; i-- {
		if s := b.spent[i]; s.points == points && s.namespace == ns {
			b.unbookLocked(points, ns)
			b.spent = append(b.spent[:i], b.spent[i+1:]...)
			break
		}
	}
	b.reportLocked()
}

// observe learns from GitHub's answer to a request counted against the
// primary limit key: that limit's headers, and a secondary limit's
// retry-after, which holds every request of the credential.
func (b *Budget) observe(key string, resp *http.Response) {
	if resp == nil {
		return
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	header := resp.Header
	remaining, rerr := strconv.Atoi(header.Get("X-RateLimit-Remaining"))
	limit, lerr := strconv.Atoi(header.Get("X-RateLimit-Limit"))
	h := b.hourly[key]
	if h == nil && (rerr == nil || lerr == nil) {
		h = &hourlyLimit{remaining: -1}
		b.hourly[key] = h
	}
	if rerr == nil {
		h.remaining = remaining
	}
	if lerr == nil {
		h.limit = limit
	}
	if rerr == nil {
		b.metrics.rateLimitLeft(b.id, remaining)
	}
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests {
		return
	}
	until := time.Time{}
	switch wait, ok := retryAfterHeader(resp); {
	case ok:
		until = now.Add(max(wait, minRetryAfter))
	case rerr == nil && remaining == 0:
		// The primary limit is spent: only requests counted against it wait
		// for its reset (another installation's have a limit of their own).
		spentUntil := now.Add(defaultSecondaryWait)
		if reset, err := strconv.ParseInt(header.Get("X-RateLimit-Reset"), 10, 64); err == nil && reset > 0 {
			spentUntil = now.Add(untilReset(resp, time.Unix(reset, 0), now))
		}
		h.blocked = later(h.blocked, spentUntil)
	case resp.StatusCode == http.StatusTooManyRequests:
		until = now.Add(defaultSecondaryWait)
	}
	b.blocked = later(b.blocked, until)
}

// hold sends no request of the credential for d: a limit the client read
// from the body of GitHub's answer (observe reads only status and headers).
func (b *Budget) hold(d time.Duration) {
	until := b.now().Add(d)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.blocked = later(b.blocked, until)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Pressed reports whether more than a quarter of the window is spent, or
// GitHub holds the credential: callers should prefer knowledge that costs
// less than a DELETE.
func (b *Budget) Pressed() bool {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(now)
	return now.Before(b.blocked) || !b.unlimited && float64(b.sum) > pressedShare*float64(b.points)
}

// Used returns the points spent in the last minute and the budget per minute.
func (b *Budget) Used() (used, limit int) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(now)
	return b.sum, b.points
}

func (b *Budget) reportLocked() { b.metrics.budget(b.id, b.sum, b.points) }

// budgetTransport sends every request of a credential through its budget.
type budgetTransport struct {
	next   http.RoundTripper
	budget *Budget
}

func (t *budgetTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := limitKey(req)
	done, err := t.budget.take(req.Context(), req.Method, key)
	if err != nil {
		// RoundTrippers must close the body they were given.
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	defer done()
	resp, err := t.next.RoundTrip(req)
	t.budget.observe(key, resp)
	return resp, err
}
