package ghclient

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v93/github"
)

const (
	// ListingTTL is how long one listing of a scope's runners answers every
	// decision in that scope. It bounds how late runner-guard sees a job end
	// (a busy runner's next retry after it), and costs one point per 100
	// runners per TTL.
	ListingTTL = 15 * time.Second
	// maxListingPages is the largest scope listed whole (1,000 runners):
	// past it, a runner is looked up by name (one point) instead.
	maxListingPages = 10
	// listingTimeout bounds one refresh of a listing.
	listingTimeout = 10 * time.Second
)

// ListedState is what a listing of the runner's scope says about it.
type ListedState int

const (
	// ListedUnknown: no fresh listing, and none was taken.
	ListedUnknown ListedState = iota
	// ListedAbsent: the runner is not in the listing (it may have just
	// registered: never proof it is gone).
	ListedAbsent
	// ListedIdle: listed, not busy. GitHub's listing lags the broker
	// (actions/runner#4422): never proof it is idle.
	ListedIdle
	// ListedBusy: listed busy. Safe to refuse on: at worst a pod waits one
	// more listing.
	ListedBusy
)

func (s ListedState) String() string {
	return [...]string{"unknown", "absent", "idle", "busy"}[s]
}

// Listing is one runner's state in its scope's listing.
type Listing struct {
	State ListedState
	// Taken is when GitHub answered the listing.
	Taken time.Time
}

// listingIdle is how long a scope's listing is kept after its last use:
// its ETags save a refresh's hourly quota, but a scope no decision asks
// about any more (a tenant naming a new repository in every pod) must not
// stay forever.
const listingIdle = 10 * time.Minute

// listings are a client's shared per-scope listings.
type listings struct {
	mu     sync.Mutex
	scopes map[Scope]*scopeListing
	swept  time.Time
}

func newListings() *listings { return &listings{scopes: map[Scope]*scopeListing{}} }

// of is scope's listing, made empty on first use, and marked used now;
// listings unused for listingIdle are dropped. l.mu must be held.
func (l *listings) of(scope Scope, now time.Time) *scopeListing {
	if now.Sub(l.swept) >= ListingTTL {
		l.swept = now
		for s, sl := range l.scopes {
			if sl.call == nil && now.Sub(sl.used) >= listingIdle {
				delete(l.scopes, s)
			}
		}
	}
	sl := l.scopes[scope]
	if sl == nil {
		sl = &scopeListing{}
		l.scopes[scope] = sl
	}
	sl.used = now
	return sl
}

// listingsHeld is how many scopes' listings the client holds.
func (c *Client) listingsHeld() int {
	c.listings.mu.Lock()
	defer c.listings.mu.Unlock()
	return len(c.listings.scopes)
}

// scopeListing is the last listing of one scope. Pages keep their ETags, so
// a refresh of an unchanged scope is answered 304, which costs no primary
// quota (ETags are per token, and so is the client).
type scopeListing struct {
	taken     time.Time
	pages     []listedPage
	byName    map[string]*github.Runner // the runners of pages, by name
	byID      map[int64]*github.Runner  // and by ID
	tooLarge  bool                      // more than maxListingPages: look runners up by name
	named     map[string]namedState
	call      *listingCall // refresh in flight
	failed    time.Time    // when the last refresh failed; zero after one succeeded
	failedErr error        // and how
	used      time.Time    // last asked about
}

type listedPage struct {
	etag    string
	next    int // the Link header's next page, 0 on the last
	runners []*github.Runner
}

type namedState struct {
	state ListedState
	taken time.Time
}

// listingCall is one refresh shared by every decision asking meanwhile.
type listingCall struct {
	done chan struct{}
	err  error
}

// Refresh says when Listed takes a scope's listing anew rather than answer
// from the one it holds; its flags combine.
type Refresh uint8

const (
	// RefreshNever answers only from a listing younger than ListingTTL
	// (ListedUnknown without one), and sends nothing.
	RefreshNever Refresh = 0
	// RefreshStale takes the listing anew when none younger than
	// ListingTTL is held.
	RefreshStale Refresh = 1 << (iota - 1)
	// RefreshBusy renews a listing held that shows the runner busy once it
	// is ListedBusyMaxAge old: a runner whose eviction is retried (kubectl
	// drain every 5 s) is let go within one retry of its job's end, not one
	// ListingTTL. The pages' ETags make the renewal cost no point of the
	// hourly limit while nothing changed. A scope too large to list is not
	// renewed so (its look-ups by name cost a point each).
	RefreshBusy
)

// ListedBusyMaxAge is how old a listing showing a runner busy may be under
// RefreshBusy: kubectl drain's retry interval.
const ListedBusyMaxAge = 5 * time.Second

// Listed says what the shared listing of scope says about runner name. A
// listing younger than ListingTTL answers with no request (but a busy one
// RefreshBusy renews). Otherwise, with RefreshStale, the listing is taken
// anew (one request per 100 runners, 304s for unchanged pages) at recheck
// priority, shared with every caller asking meanwhile; without it, the
// answer is ListedUnknown. A busy answer RefreshBusy would renew still
// answers when the renewal cannot be had (the last one failed moments ago,
// or fails now).
func (c *Client) Listed(ctx context.Context, scope Scope, name string, refresh Refresh) (Listing, error) {
	if err := c.checkArgs(scope, name); err != nil {
		return Listing{}, err
	}
	for {
		now := c.now()
		c.listings.mu.Lock()
		sl := c.listings.of(scope, now)
		held, ok := sl.answer(name, now)
		renew := ok && refresh&RefreshBusy != 0 && !sl.tooLarge && held.State == ListedBusy && now.Sub(held.Taken) >= ListedBusyMaxAge
		if ok && !renew {
			c.listings.mu.Unlock()
			return held, nil
		}
		if !renew && refresh&RefreshStale == 0 {
			c.listings.mu.Unlock()
			return Listing{}, nil
		}
		if sl.tooLarge {
			c.listings.mu.Unlock()
			return c.listedByName(ctx, sl, scope, name)
		}
		if err := sl.failedErr; sl.call == nil && err != nil && now.Sub(sl.failed) < ListingTTL {
			// The last refresh failed moments ago: asking again at once
			// would fail alike, for every decision in the scope.
			c.listings.mu.Unlock()
			return orHeld(held, ok, err)
		}
		call := c.refreshLocked(ctx, scope, sl)
		c.listings.mu.Unlock()
		select {
		case <-call.done:
			if call.err != nil {
				return orHeld(held, ok, call.err)
			}
			refresh = RefreshNever // answer from what the refresh brought
		case <-ctx.Done():
			return orHeld(held, ok, fmt.Errorf("list runners for %s: %w", scope, ctx.Err()))
		}
	}
}

// orHeld is the listing held (a busy one RefreshBusy would have renewed)
// when there is one, else err.
func orHeld(held Listing, ok bool, err error) (Listing, error) {
	if ok {
		return held, nil
	}
	return Listing{}, err
}

// listedName is the name GitHub's listing of scope gives the runner with ID
// id. Any listing held answers, however old: GitHub never reuses a runner
// ID, so what a listing says an ID is stays true. When none holds the ID,
// a refresh in flight is joined, or one is started if the scope had at most
// one page (or was never listed) and the last refresh did not fail within
// ListingTTL; a refresh is shared by every caller, so a burst of decisions
// in one scope costs one request per 100 runners, not one each. The wait
// takes at most half the time ctx leaves, so that a GET of the ID and the
// DELETE still fit; the refresh goes on for later callers. found false
// means no listing could say: the caller GETs the ID (it may have
// registered since, or the listing failed).
func (c *Client) listedName(ctx context.Context, scope Scope, id int64) (name string, found bool) {
	for waited := false; ; waited = true {
		now := c.now()
		c.listings.mu.Lock()
		sl := c.listings.of(scope, now)
		if r, ok := sl.byID[id]; ok {
			c.listings.mu.Unlock()
			return r.GetName(), true
		}
		if waited || (sl.call == nil && !sl.worthRefreshing(now)) {
			c.listings.mu.Unlock()
			return "", false
		}
		call := c.refreshLocked(ctx, scope, sl)
		c.listings.mu.Unlock()
		if !awaitListing(ctx, call, c.now) {
			return "", false
		}
	}
}

// worthRefreshing reports whether a refresh of sl, for want of an ID in it,
// costs no more than the GET of the ID would (one page, or never listed),
// and the last refresh did not fail within ListingTTL.
func (sl *scopeListing) worthRefreshing(now time.Time) bool {
	if sl.fresh(now) || sl.tooLarge || len(sl.pages) > 1 {
		return false
	}
	return sl.failed.IsZero() || now.Sub(sl.failed) >= ListingTTL
}

// awaitListing waits for call, at most half the time ctx has left (or
// listingTimeout), and reports whether it brought a listing.
func awaitListing(ctx context.Context, call *listingCall, now func() time.Time) bool {
	wait := listingTimeout
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, deadline.Sub(now())/2)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-call.done:
		return call.err == nil
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// listedIDOf is the ID a fresh listing of scope gives runner name, 0 when
// there is no fresh listing or it does not list the name. It sends nothing.
func (c *Client) listedIDOf(scope Scope, name string) int64 {
	now := c.now()
	c.listings.mu.Lock()
	defer c.listings.mu.Unlock()
	sl := c.listings.scopes[scope]
	if sl == nil || !sl.fresh(now) {
		return 0
	}
	return sl.byName[name].GetID()
}

// fresh reports whether sl is a whole listing younger than ListingTTL.
func (sl *scopeListing) fresh(now time.Time) bool {
	return !sl.tooLarge && !sl.taken.IsZero() && now.Sub(sl.taken) < ListingTTL
}

// refreshLocked returns the refresh of sl in flight, starting one if none
// is. c.listings.mu must be held.
func (c *Client) refreshLocked(ctx context.Context, scope Scope, sl *scopeListing) *listingCall {
	if sl.call == nil {
		sl.call = &listingCall{done: make(chan struct{})}
		go c.refreshListing(ctx, scope, sl, sl.call)
	}
	return sl.call
}

// answer is the fresh listing's word on name, if it has one.
func (sl *scopeListing) answer(name string, now time.Time) (Listing, bool) {
	if sl.tooLarge {
		n, ok := sl.named[name]
		if ok && now.Sub(n.taken) < ListingTTL {
			return Listing{State: n.state, Taken: n.taken}, true
		}
		return Listing{}, false
	}
	if !sl.fresh(now) {
		return Listing{}, false
	}
	r, ok := sl.byName[name]
	switch {
	case !ok:
		return Listing{State: ListedAbsent, Taken: sl.taken}, true
	case r.GetBusy():
		return Listing{State: ListedBusy, Taken: sl.taken}, true
	}
	return Listing{State: ListedIdle, Taken: sl.taken}, true
}

// refreshListing lists the scope page by page, conditionally on each page's
// last ETag. It runs detached from the first caller, so that caller giving up
// does not fail the others; recheck priority keeps it from waiting on the
// budget.
func (c *Client) refreshListing(ctx context.Context, scope Scope, sl *scopeListing, call *listingCall) {
	ctx, cancel := context.WithTimeout(WithPriority(context.WithoutCancel(ctx), PriorityRecheck), listingTimeout)
	defer cancel()
	c.listings.mu.Lock()
	old := sl.pages
	c.listings.mu.Unlock()

	pages, tooLarge, err := c.listPages(ctx, scope, old)
	taken := c.now()

	c.listings.mu.Lock()
	defer c.listings.mu.Unlock()
	sl.failed, sl.failedErr = time.Time{}, nil
	switch {
	case err != nil:
		call.err, sl.failed, sl.failedErr = err, taken, err
	case tooLarge:
		sl.tooLarge, sl.pages, sl.byName, sl.byID = true, nil, nil, nil
		if sl.named == nil {
			sl.named = map[string]namedState{}
		}
	default:
		sl.pages, sl.taken = pages, taken
		sl.byName, sl.byID = map[string]*github.Runner{}, map[int64]*github.Runner{}
		for _, p := range pages {
			for _, r := range p.runners {
				sl.byName[r.GetName()], sl.byID[r.GetID()] = r, r
			}
		}
	}
	sl.call = nil
	close(call.done)
}

// listPages reads every page of the scope's runners, reusing old pages GitHub
// answers 304 for. More than maxListingPages pages: tooLarge.
func (c *Client) listPages(ctx context.Context, scope Scope, old []listedPage) ([]listedPage, bool, error) {
	op := fmt.Sprintf("list runners for %s", scope)
	gh, err := c.api(ctx, scope)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", op, err)
	}
	var pages []listedPage
	for page := 1; ; page++ {
		if page > maxListingPages {
			return nil, true, nil
		}
		req, err := gh.NewRequest(ctx, http.MethodGet, fmt.Sprintf("%s?per_page=%d&page=%d", runnersPath(scope), listPerPage, page), nil)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", op, err)
		}
		var prev *listedPage
		if page <= len(old) {
			prev = &old[page-1]
			if prev.etag != "" {
				req.Header.Set("If-None-Match", prev.etag)
			}
		}
		var runners github.Runners
		resp, err := gh.Do(req, &runners)
		p := listedPage{runners: runners.Runners}
		switch {
		case err == nil:
			p.etag, p.next = resp.Header.Get("ETag"), resp.NextPage
		case statusOf(err) == http.StatusNotModified && prev != nil:
			p = *prev
		default:
			return nil, false, c.fail(scope, fmt.Sprintf("%s (page %d)", op, page), resp, err)
		}
		pages = append(pages, p)
		// Only move forward: a broken Link header must not loop. An
		// unchanged page links where it did.
		if p.next <= page {
			return pages, false, nil
		}
	}
}

// listedByName looks one runner up by name (a scope too large to list whole),
// remembering the answer for ListingTTL.
func (c *Client) listedByName(ctx context.Context, sl *scopeListing, scope Scope, name string) (Listing, error) {
	r, err := c.lookup(WithPriority(ctx, PriorityRecheck), lookupKey{scope: scope, name: name})
	if err != nil {
		return Listing{}, err
	}
	n := namedState{state: ListedAbsent, taken: c.now()}
	switch {
	case r != nil && r.GetBusy():
		n.state = ListedBusy
	case r != nil:
		n.state = ListedIdle
	}
	c.listings.mu.Lock()
	if len(sl.named) >= maxCacheEntries {
		clear(sl.named)
	}
	sl.named[name] = n
	c.listings.mu.Unlock()
	return Listing{State: n.state, Taken: n.taken}, nil
}

// runnersPath is the scope's runner list, relative to the API base.
func runnersPath(scope Scope) string {
	switch scope.Kind {
	case ScopeRepo:
		owner, repo, _ := strings.Cut(scope.Name, "/")
		return fmt.Sprintf("repos/%s/%s/actions/runners", owner, repo)
	case ScopeOrg:
		return fmt.Sprintf("orgs/%s/actions/runners", scope.Name)
	}
	return fmt.Sprintf("enterprises/%s/actions/runners", scope.Name)
}

// Pressed reports whether the credential's budget is pressed (see
// Budget.Pressed): callers should ask a listing before a DELETE.
func (c *Client) Pressed() bool { return c.budget.Pressed() }

// Listed is Client.Listed with the runner's client.
func (r *Router) Listed(ctx context.Context, rn Runner, refresh Refresh) (Listing, error) {
	c, err := r.ClientFor(rn.Creds)
	if err != nil {
		return Listing{}, err
	}
	return c.Listed(ctx, rn.Scope, rn.Name, refresh)
}

// HasListing reports whether the client holds a listing of any scope younger
// than ListingTTL. It sends nothing.
func (c *Client) HasListing() bool {
	now := c.now()
	c.listings.mu.Lock()
	defer c.listings.mu.Unlock()
	for _, sl := range c.listings.scopes {
		if !sl.taken.IsZero() && now.Sub(sl.taken) < ListingTTL {
			return true
		}
	}
	return false
}

// HasListing is Client.HasListing over the default client and every kept
// one: the disruption controller looks at legacy runner pods' hints only
// once some listing exists to answer for them.
func (r *Router) HasListing() bool {
	if r.def != nil && r.def.HasListing() {
		return true
	}
	r.mu.Lock()
	clients := make([]*Client, 0, r.lru.Len())
	for e := r.lru.Front(); e != nil; e = e.Next() {
		clients = append(clients, e.Value.(*routed).client)
	}
	r.mu.Unlock()
	for _, c := range clients {
		if c.HasListing() {
			return true
		}
	}
	return false
}

// Pressed is Client.Pressed for the runner's client; false when it has none.
func (r *Router) Pressed(rn Runner) bool {
	c, err := r.ClientFor(rn.Creds)
	return err == nil && c.Pressed()
}
