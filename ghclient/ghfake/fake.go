// Package ghfake is an in-memory GitHub self-hosted runners API for tests and
// demos. It follows GitHub's REST API documentation for self-hosted runners:
// the list, get (one runner by ID) and remove endpoints for repositories,
// organizations and enterprises (also under /api/v3/ as GitHub Enterprise
// Server serves them; SetStyle restricts to one layout), Link-header paging,
// token and GitHub App authentication (installations per owner with scoped
// tokens, installation look-up by the App's JWT), JIT registration
// (generate-jitconfig), rate-limit headers, GitHub's secondary rate limit
// enforced per credential (points per rolling minute and concurrent
// requests, SetSecondaryLimit), conditional lists (ETag, If-None-Match, 304),
// a listing that lags the runner's state (SetListingLags) or its
// registration and removal (SetListingDelay), and fault injection.
//
// It is as strict as GitHub by default: an owner, repository or enterprise
// it does not hold (AddScope, or one a runner or installation was added to)
// answers 404; a request without a token it was given (SetToken, AddToken) or
// one it minted answers 401, and so does a JWT no registered App signed; an
// installation ID no App has answers 404; and each token, installation and
// App JWT has its own primary rate limit. A test that needs less asks for it
// where it builds the fake (Lenient, WithAnyScope, WithAuthOff).
//
// *Fake is an http.Handler; every control method is safe for concurrent use.
package ghfake

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/waitctx"
)

const (
	// DocsURL is the documentation_url of ordinary error bodies.
	DocsURL = "https://docs.github.com/rest"
	// SecondaryDocsURL is the documentation_url GitHub sends with a secondary
	// rate limit; go-github recognizes the limit by its suffix.
	SecondaryDocsURL = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
	// PrimaryDocsURL is the documentation_url GitHub sends with a primary rate limit.
	PrimaryDocsURL = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-the-primary-rate-limit"

	defaultRateLimit = 5000
	defaultPerPage   = 30
	maxPerPage       = 100
	installTokenTTL  = time.Hour
)

// Label is a runner label as GitHub renders it.
type Label struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// Runner is a self-hosted runner as GitHub renders it in a list and when
// getting one runner by ID.
type Runner struct {
	ID     int64   `json:"id"`
	Name   string  `json:"name"`
	OS     string  `json:"os"`
	Status string  `json:"status"` // "online" or "offline"
	Busy   bool    `json:"busy"`
	Labels []Label `json:"labels"`
}

// Request is one API request the fake answered (control requests are not logged).
type Request struct {
	Method string     `json:"method"`
	Path   string     `json:"path"` // as received, including any /api/v3 prefix
	Query  url.Values `json:"query"`
	Status int        `json:"status"` // 0 when the client went away before an answer
	Time   time.Time  `json:"time"`   // when it was answered (or the client went away)
	// Arrived is when the request reached the fake, before any latency.
	Arrived time.Time   `json:"arrived"`
	Header  http.Header `json:"-"`

	// Op is what the request asked for (empty for a path the fake does not
	// serve), Scope the runners' scope it named (lower case) and RunnerID
	// the runner of a get or remove.
	Op       Op         `json:"op,omitempty"`
	Scope    *ScopeJSON `json:"scope,omitempty"`
	RunnerID int64      `json:"runnerID,omitempty"`
	// Runner is the name of the runner a get or remove reached (when it was
	// registered on arrival), or a list's name filter.
	Runner string `json:"runner,omitempty"`
	// Credential is what the secondary limit counted it against, Points what
	// it cost there, and Limited whether that limit refused it.
	Credential string `json:"credential,omitempty"`
	Points     int    `json:"points,omitempty"`
	Limited    bool   `json:"limited,omitempty"`
}

// Op is the kind of a logged API request.
type Op string

const (
	OpList         Op = "list"               // GET .../actions/runners
	OpGet          Op = "get"                // GET .../actions/runners/{id}
	OpRemove       Op = "remove"             // DELETE .../actions/runners/{id}
	OpJITConfig    Op = "generate-jitconfig" // POST .../actions/runners/generate-jitconfig
	OpAccessToken  Op = "access-token"       // POST /app/installations/{id}/access_tokens
	OpInstallation Op = "installation"       // GET /orgs/{org}/installation, /repos/{o}/{r}/installation
)

// FaultKind selects what an injected Fault does.
type FaultKind string

const (
	// FaultStatus answers Status with Body (default: a GitHub-shaped message).
	FaultStatus FaultKind = "status"
	// FaultSecondaryRateLimit answers Status (default 403) with `retry-after:
	// RetryAfterSeconds` (omitted when 0) and the secondary-limit documentation_url.
	FaultSecondaryRateLimit FaultKind = "secondary-rate-limit"
	// FaultPrimaryRateLimit answers Status (default 403) with remaining 0 and a
	// reset ResetAfterSeconds (default 60) from now. It does not change the
	// fake's own rate-limit window; SetRateLimit does.
	FaultPrimaryRateLimit FaultKind = "primary-rate-limit"
	// FaultMalformedJSON answers 200 with a body that is not valid JSON.
	FaultMalformedJSON FaultKind = "malformed-json"
	// FaultHang waits Delay (forever when 0) or until the client goes away, then
	// answers normally.
	FaultHang FaultKind = "hang"
)

// Fault is an injected misbehaviour. Faults apply in the order injected; the
// first one that matches a request is used.
type Fault struct {
	Kind FaultKind `json:"kind"`
	// Method and PathContains restrict the fault to matching requests; empty matches all.
	Method       string `json:"method,omitempty"`
	PathContains string `json:"pathContains,omitempty"`
	// After lets that many matching requests through before the fault applies.
	After int `json:"after,omitempty"`
	// Times is how many requests the fault applies to; 0 means until ClearFaults.
	Times             int           `json:"times,omitempty"`
	Status            int           `json:"status,omitempty"`
	Body              string        `json:"body,omitempty"`
	RetryAfterSeconds int           `json:"retryAfterSeconds,omitempty"`
	ResetAfterSeconds int           `json:"resetAfterSeconds,omitempty"`
	Delay             time.Duration `json:"delay,omitempty"`
	// NoRateHeaders leaves out the x-ratelimit-* headers, like a proxy in front
	// of GitHub would (FaultStatus and FaultSecondaryRateLimit only).
	NoRateHeaders bool `json:"noRateHeaders,omitempty"`
}

type scopeKey struct {
	kind ghclient.ScopeKind
	name string // lower case: GitHub owner names are case-insensitive
}

func keyOf(s ghclient.Scope) scopeKey {
	return scopeKey{kind: s.Kind, name: strings.ToLower(s.Name)}
}

type runner struct {
	Runner
	scope scopeKey
	// listedIdle makes the REST representations (list, get by ID) show the
	// runner idle whatever Busy says, as GitHub's listing lags its broker.
	listedIdle bool
	// listedFrom is when the listing starts to show a registered runner,
	// listedUntil when it stops showing a removed one (SetListingDelay).
	listedFrom, listedUntil time.Time
}

type fault struct {
	Fault
	left int // requests left; -1 = until cleared
}

// Style selects which API roots the fake serves.
type Style string

const (
	// StyleAny serves every route both at / and under /api/v3/ (the default).
	StyleAny Style = ""
	// StyleDotCom serves github.com's layout: routes at /, nothing under /api/v3/.
	StyleDotCom Style = "dotcom"
	// StyleGHES serves GitHub Enterprise Server's layout: routes only under
	// /api/v3/, with X-GitHub-Enterprise-Version and, as rate limiting is off by
	// default there, no x-ratelimit-* headers and no primary limit.
	StyleGHES Style = "ghes"
)

// GHESVersion is what StyleGHES sends as X-GitHub-Enterprise-Version.
const GHESVersion = "3.17.0"

// Installation is a GitHub App installation on one or more owners
// (organisations or users), as the control API reports it.
type Installation struct {
	ID     int64    `json:"id"`
	AppID  int64    `json:"appID"`
	Owners []string `json:"owners"`
}

type installation struct {
	Installation
	owners map[string]bool // lower case
}

// issuedToken is an installation token; install 0 is an unscoped token from
// an installation ID the fake was never told about (Leniency.AuthOff only).
type issuedToken struct {
	expires time.Time
	install int64
	// credentialID is the installation ID the token was minted for, known
	// or not: the secondary limit counts per installation.
	credentialID int64
}

// Fake is an in-memory GitHub. Create it with New.
type Fake struct {
	mu sync.Mutex

	nextID  int64
	runners map[int64]*runner
	// gone holds removed runners the listing still shows (SetListingDelay).
	gone         map[int64]*runner
	listingDelay time.Duration

	// held is every owner, repository and enterprise that exists.
	held    map[scopeKey]bool
	lenient Leniency
	// deliveryGUIDs numbers the webhook deliveries of every sender.
	deliveryGUIDs atomic.Int64
	// statelessTokens issues every installation token in the new format.
	statelessTokens bool

	token     string
	tokens    map[string]bool // AddToken's
	apps      map[int64]*rsa.PublicKey
	clientIDs map[string]int64       // client ID -> app ID, both valid JWT issuers
	appTokens map[string]issuedToken // issued installation token

	nextInstall   int64
	installations map[int64]*installation

	style Style

	latency time.Duration
	faults  []*fault

	// primaryStart is the window a credential's primary limit starts with,
	// primary every credential's window.
	primaryStart    RateLimit
	primary         map[string]*RateLimit
	rateLimitStatus int

	log []Request

	wf workflows // runs.go

	secondary  SecondaryLimit
	usage      map[string]*credUsage // by credential
	requestSeq int64

	now func() time.Time

	ctrlOnce sync.Once
	ctrl     http.Handler

	events *eventSender // events.go; nil delivers none
}

// New returns an empty fake as strict as GitHub, unless opts say otherwise:
// it holds no scope and accepts no credential until told of them, and gives
// each credential a 5000/hour primary limit, GitHub's secondary limit
// (SetSecondaryLimit) and no latency.
func New(opts ...Option) *Fake {
	f := &Fake{
		nextID:          1000,
		runners:         map[int64]*runner{},
		gone:            map[int64]*runner{},
		held:            map[scopeKey]bool{},
		tokens:          map[string]bool{},
		primary:         map[string]*RateLimit{},
		apps:            map[int64]*rsa.PublicKey{},
		clientIDs:       map[string]int64{},
		appTokens:       map[string]issuedToken{},
		nextInstall:     100,
		installations:   map[int64]*installation{},
		rateLimitStatus: http.StatusForbidden,
		secondary:       SecondaryLimit{}.normalized(),
		usage:           map[string]*credUsage{},
		now:             time.Now,
	}
	f.primaryStart = RateLimit{Limit: defaultRateLimit, Remaining: defaultRateLimit, Reset: f.now().Add(time.Hour)}
	for _, o := range opts {
		o(f)
	}
	return f
}

// SetToken replaces the token the fake accepts (besides AddToken's and the
// installation tokens it mints); empty accepts none. Requests must carry
// `Authorization: Bearer TOKEN` or `token TOKEN`.
func (f *Fake) SetToken(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.token = token
}

// AddApp registers a GitHub App whose JWTs must verify against pub.
// Installation tokens the fake issues for its installations are accepted.
func (f *Fake) AddApp(appID int64, pub *rsa.PublicKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.apps[appID] = pub
}

// SetAppClientID lets JWTs issued with clientID stand for appID, as GitHub
// accepts an App's client ID as the JWT issuer.
func (f *Fake) SetAppClientID(appID int64, clientID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clientIDs[clientID] = appID
}

// AddInstallation installs App appID on owners and returns the installation
// ID. Its tokens (POST /app/installations/{id}/access_tokens) reach only those
// owners' runners; GET /orgs/{org}/installation and
// /repos/{owner}/{repo}/installation (for a repository the fake holds) find
// it with the App's JWT. The owners exist from then on, as organisations.
func (f *Fake) AddInstallation(appID int64, owners ...string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextInstall++
	for f.installations[f.nextInstall] != nil {
		f.nextInstall++
	}
	f.addInstallationLocked(f.nextInstall, appID, owners)
	return f.nextInstall
}

// AddInstallationWithID is AddInstallation with the installation's ID
// chosen, as a client configured with a fixed ID needs; it replaces any
// installation of that ID.
func (f *Fake) AddInstallationWithID(id, appID int64, owners ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addInstallationLocked(id, appID, owners)
}

func (f *Fake) addInstallationLocked(id, appID int64, owners []string) {
	in := &installation{
		Installation: Installation{ID: id, AppID: appID, Owners: append([]string(nil), owners...)},
		owners:       map[string]bool{},
	}
	for _, o := range owners {
		in.owners[strings.ToLower(o)] = true
		f.held[scopeKey{ghclient.ScopeOrg, strings.ToLower(o)}] = true
	}
	f.installations[in.ID] = in
}

// RemoveInstallation uninstalls the App there and revokes the installation's
// tokens (they then answer 401); false if there was no such installation.
func (f *Fake) RemoveInstallation(id int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.installations[id]; !ok {
		return false
	}
	delete(f.installations, id)
	for tok, it := range f.appTokens {
		if it.install == id {
			delete(f.appTokens, tok)
		}
	}
	return true
}

// Installations returns the installations in ID order.
func (f *Fake) Installations() []Installation {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Installation, 0, len(f.installations))
	for _, in := range f.installations {
		cp := in.Installation
		cp.Owners = append([]string(nil), cp.Owners...)
		out = append(out, cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SetClock replaces the fake's clock (nil: time.Now). Everything that reads
// the time follows it: the primary and secondary rate-limit windows, token and
// JWT expiry, the request log. Latency and hangs still take real time.
func (f *Fake) SetClock(now func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now == nil {
		now = time.Now
	}
	f.now = now
}

// SetStyle chooses the API roots served (StyleAny by default).
func (f *Fake) SetStyle(s Style) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.style = s
}

// SetLatency delays every API answer by d (honoring request cancellation).
func (f *Fake) SetLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

// SetRateLimit sets the primary rate-limit window every credential (token,
// installation, App JWT) starts from, each counting on its own, and restarts
// every credential's window from it. A zero reset means an hour from now. Once
// a credential's remaining reaches 0 its requests are answered with the
// rate-limit status until its reset, then it gets limit again.
// SetCredentialRateLimit sets one credential's.
func (f *Fake) SetRateLimit(limit, remaining int, reset time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if reset.IsZero() {
		reset = f.now().Add(time.Hour)
	}
	f.primaryStart = RateLimit{Limit: limit, Remaining: remaining, Reset: reset}
	clear(f.primary)
}

// SetRateLimitStatus chooses 403 (default) or 429 for an exhausted primary limit.
func (f *Fake) SetRateLimitStatus(code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rateLimitStatus = code
}

// AddRunner registers an idle, online runner and returns its ID. IDs are unique
// and increasing across scopes. A runner of the same name in the scope is
// replaced, as GitHub does when a runner re-registers.
func (f *Fake) AddRunner(scope ghclient.Scope, name string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := keyOf(scope)
	if old := f.findLocked(k, name); old != nil {
		f.dropLocked(old)
	}
	return f.addLocked(k, name, "online", nil).ID
}

// ErrRunnerExists is what RegisterJITRunner returns for a name already
// registered in the scope (the API answers 409).
var ErrRunnerExists = errors.New("a runner with that name already exists")

// RegisterJITRunner registers a runner as POST .../actions/runners/generate-jitconfig
// does: offline until it connects, with the self-hosted labels plus labels;
// it returns the runner and its encoded JIT config. Unlike AddRunner it
// refuses a name already taken in the scope.
func (f *Fake) RegisterJITRunner(scope ghclient.Scope, name string, labels ...string) (Runner, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, cfg, err := f.registerJITLocked(keyOf(scope), name, labels)
	return r, cfg, err
}

func (f *Fake) registerJITLocked(k scopeKey, name string, labels []string) (Runner, string, error) {
	if f.findLocked(k, name) != nil {
		return Runner{}, "", fmt.Errorf("%w: %q", ErrRunnerExists, name)
	}
	r := f.addLocked(k, name, "offline", labels)
	raw, _ := json.Marshal(map[string]any{"runner_id": r.ID, "name": name, "scope": k.name, ".runner": "fake"})
	return copyRunner(r.Runner), base64.StdEncoding.EncodeToString(raw), nil
}

func (f *Fake) addLocked(k scopeKey, name, status string, labels []string) *runner {
	f.nextID++
	f.held[k] = true
	r := &runner{
		scope:      k,
		listedFrom: f.now().Add(f.listingDelay),
		Runner: Runner{
			ID: f.nextID, Name: name, OS: "linux", Status: status,
			Labels: []Label{
				{ID: 1, Name: "self-hosted", Type: "read-only"},
				{ID: 2, Name: "linux", Type: "read-only"},
			},
		},
	}
	for i, l := range labels {
		r.Labels = append(r.Labels, Label{ID: int64(3 + i), Name: l, Type: "custom"})
	}
	f.runners[r.ID] = r
	return r
}

// ReRegister removes the runner (if any) and registers it again under a new ID.
func (f *Fake) ReRegister(scope ghclient.Scope, name string) int64 {
	return f.AddRunner(scope, name)
}

// RemoveRunnerByName unregisters a runner; false if it was not registered.
func (f *Fake) RemoveRunnerByName(scope ghclient.Scope, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.findLocked(keyOf(scope), name)
	if r == nil {
		return false
	}
	f.dropLocked(r)
	return true
}

// SetBusy marks a runner busy (running a job) or idle; false if not registered.
func (f *Fake) SetBusy(scope ghclient.Scope, name string, busy bool) bool {
	var was bool
	var id int64
	ok := f.update(scope, name, func(r *runner) { was, id, r.Busy = r.Busy, r.ID, busy })
	if ok && was != busy {
		f.jobChanged(scope, name, id, busy) // events.go: the workflow_job delivery
	}
	return ok
}

// SetOnline marks a runner online or offline; false if not registered.
func (f *Fake) SetOnline(scope ghclient.Scope, name string, online bool) bool {
	return f.update(scope, name, func(r *runner) {
		r.Status = "offline"
		if online {
			r.Status = "online"
		}
	})
}

// SetListingLags makes the runner's REST representations (the list
// endpoints and GET by ID) show it idle, `"busy": false`, even while it is
// busy and its DELETE answers 422, as GitHub's listing can lag its broker
// (actions/runner#4422); false stops the lag. Runner and Runners show the
// truth. It returns false if the runner is not registered; re-registering
// ends the lag.
func (f *Fake) SetListingLags(scope ghclient.Scope, name string, lags bool) bool {
	return f.update(scope, name, func(r *runner) { r.listedIdle = lags })
}

func (f *Fake) update(scope ghclient.Scope, name string, fn func(*runner)) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.findLocked(keyOf(scope), name)
	if r == nil {
		return false
	}
	fn(r)
	return true
}

// Runner returns a copy of the named runner.
func (f *Fake) Runner(scope ghclient.Scope, name string) (Runner, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.findLocked(keyOf(scope), name)
	if r == nil {
		return Runner{}, false
	}
	return copyRunner(r.Runner), true
}

// Runners returns copies of the scope's runners in ID order.
func (f *Fake) Runners(scope ghclient.Scope) []Runner {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listLocked(keyOf(scope), "", false)
}

// InjectFault queues a fault.
func (f *Fake) InjectFault(flt Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	left := flt.Times
	if left <= 0 {
		left = -1
	}
	f.faults = append(f.faults, &fault{Fault: flt, left: left})
}

// ClearFaults removes every queued fault.
func (f *Fake) ClearFaults() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

// Requests returns a copy of the request log, oldest first.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Request, len(f.log))
	copy(out, f.log)
	return out
}

// ResetLog empties the request log.
func (f *Fake) ResetLog() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = nil
}

// Count returns how many logged requests used method ("" counts all),
// whatever the route: Count("GET") adds up lists, GETs of one runner by ID and
// installation look-ups. Requests tells them apart by Path.
func (f *Fake) Count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.log {
		if method == "" || r.Method == method {
			n++
		}
	}
	return n
}

// RequestMatch selects logged requests; a zero field matches every request.
type RequestMatch struct {
	Op Op
	// Scope matches the scope a runners request named (owner names case-insensitively).
	Scope    ghclient.Scope
	RunnerID int64
	// Runner matches Request.Runner: the runner a get or remove reached, or a list's name filter.
	Runner     string
	Status     int
	Credential string
}

// Matches reports whether the logged request r is selected.
func (m RequestMatch) Matches(r Request) bool {
	switch {
	case m.Op != "" && r.Op != m.Op,
		m.RunnerID != 0 && r.RunnerID != m.RunnerID,
		m.Runner != "" && r.Runner != m.Runner,
		m.Status != 0 && r.Status != m.Status,
		m.Credential != "" && r.Credential != m.Credential:
		return false
	case m.Scope != (ghclient.Scope{}):
		k := keyOf(m.Scope)
		return r.Scope != nil && r.Scope.Kind == k.kind && strings.EqualFold(r.Scope.Name, k.name)
	}
	return true
}

// CountRequests counts the requests of log (Fake.Requests or
// Remote.Requests) that m selects, e.g. a scope's lists against one
// runner's removals.
func CountRequests(log []Request, m RequestMatch) int {
	n := 0
	for _, r := range log {
		if m.Matches(r) {
			n++
		}
	}
	return n
}

// CountMatching counts the logged requests m selects.
func (f *Fake) CountMatching(m RequestMatch) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return CountRequests(f.log, m)
}

func (f *Fake) findLocked(k scopeKey, name string) *runner {
	for _, r := range f.runners {
		if r.scope == k && r.Name == name {
			return r
		}
	}
	return nil
}

// listLocked returns the scope's runners (named name, unless empty) in ID
// order; rest renders them as the REST API does, lag included.
func (f *Fake) listLocked(k scopeKey, name string, rest bool) []Runner {
	var out []Runner
	now := f.now()
	for _, r := range f.runners {
		if r.scope == k && (name == "" || r.Name == name) {
			switch {
			case !rest:
				out = append(out, copyRunner(r.Runner))
			case f.listedLocked(r, now):
				out = append(out, r.restView())
			}
		}
	}
	for id, r := range f.gone {
		switch {
		case !f.listedLocked(r, now):
			delete(f.gone, id)
		case rest && r.scope == k && (name == "" || r.Name == name):
			out = append(out, r.restView())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// restView is the runner as the REST API shows it: idle while its listing lags.
func (r *runner) restView() Runner {
	out := copyRunner(r.Runner)
	if r.listedIdle {
		out.Busy = false
	}
	return out
}

func copyRunner(r Runner) Runner {
	r.Labels = append([]Label(nil), r.Labels...)
	return r
}

// response is an answer computed under the lock and written after it, so the
// request is logged before the client can see the answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, controlPrefix) {
		f.ctrlOnce.Do(func() { f.ctrl = f.ControlHandler() })
		f.ctrl.ServeHTTP(w, r)
		return
	}

	f.mu.Lock()
	entry := f.arriveLocked(r)
	if refusal, ok := f.secondaryLocked(entry.Credential, entry.Points, f.now()); !ok {
		entry.Limited = true
		f.logLocked(entry, refusal.status)
		f.mu.Unlock()
		writeResponse(w, refusal)
		return
	}
	latency := f.latency
	hang := f.takeFaultLocked(r, FaultHang)
	f.mu.Unlock()

	if waitctx.Sleep(r.Context(), latency) != nil || (hang != nil && !hangFor(r.Context(), hang.Delay)) {
		f.mu.Lock()
		f.usageLocked(entry.Credential).leave()
		f.logLocked(entry, 0)
		f.mu.Unlock()
		return
	}

	f.mu.Lock()
	resp := f.answerLocked(r, entry.Credential)
	// Out of flight once answered: a client that has its answer sees it gone.
	f.usageLocked(entry.Credential).leave()
	f.logLocked(entry, resp.status)
	f.mu.Unlock()
	writeResponse(w, resp)
}

func writeResponse(w http.ResponseWriter, resp response) {
	for k, v := range resp.header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.status)
	if len(resp.body) > 0 {
		_, _ = w.Write(resp.body)
	}
}

// arriveLocked starts r's log entry: what it asks for and whose it is.
func (f *Fake) arriveLocked(r *http.Request) Request {
	e := Request{
		Method:     r.Method,
		Path:       r.URL.Path,
		Query:      r.URL.Query(),
		Header:     r.Header.Clone(),
		Credential: f.credentialLocked(r),
		Points:     requestPoints(r.Method),
		Arrived:    f.now(),
	}
	path, _ := strings.CutPrefix(r.URL.Path, "/api/v3")
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case r.Method == http.MethodPost && len(parts) == 4 && parts[0] == "app" && parts[1] == "installations" && parts[3] == "access_tokens":
		e.Op = OpAccessToken
		return e
	default:
		if _, _, ok := installationLookup(r.Method, parts); ok {
			e.Op = OpInstallation
			return e
		}
		if rt, ok := parseWorkflowRoute(r.Method, parts); ok {
			e.Op = rt.op
			return e
		}
	}
	k, rest, ok := parseScope(parts)
	if !ok {
		return e
	}
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		e.Op, e.Runner = OpList, e.Query.Get("name")
	case len(rest) == 1 && rest[0] == "generate-jitconfig" && r.Method == http.MethodPost:
		e.Op = OpJITConfig
	case len(rest) == 1 && (r.Method == http.MethodGet || r.Method == http.MethodDelete):
		id, err := strconv.ParseInt(rest[0], 10, 64)
		if err != nil {
			return e
		}
		e.Op, e.RunnerID = OpGet, id
		if r.Method == http.MethodDelete {
			e.Op = OpRemove
		}
		if run, ok := f.runners[id]; ok && run.scope == k {
			e.Runner = run.Name
		}
	default:
		return e
	}
	e.Scope = &ScopeJSON{Kind: k.kind, Name: k.name}
	return e
}

func hangFor(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		<-ctx.Done()
		return false
	}
	return waitctx.Sleep(ctx, d) == nil
}

func (f *Fake) logLocked(e Request, status int) {
	e.Status, e.Time = status, f.now()
	f.log = append(f.log, e)
}

// takeFaultLocked returns the first queued fault matching r, restricted to kind
// when kind is non-empty, or excluding FaultHang when kind is empty (hangs are
// taken before the latency so they can be combined with other faults).
func (f *Fake) takeFaultLocked(r *http.Request, kind FaultKind) *Fault {
	for i, flt := range f.faults {
		if kind != "" && flt.Kind != kind || kind == "" && flt.Kind == FaultHang {
			continue
		}
		if flt.Method != "" && !strings.EqualFold(flt.Method, r.Method) {
			continue
		}
		if flt.PathContains != "" && !strings.Contains(r.URL.Path, flt.PathContains) {
			continue
		}
		if flt.After > 0 {
			flt.After--
			continue
		}
		out := flt.Fault
		if flt.left > 0 {
			flt.left--
			if flt.left == 0 {
				f.faults = append(f.faults[:i:i], f.faults[i+1:]...)
			}
		}
		return &out
	}
	return nil
}

func (f *Fake) answerLocked(r *http.Request, cred string) response {
	now := f.now()
	h := http.Header{}
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-GitHub-Media-Type", "github.v3; format=json")

	if flt := f.takeFaultLocked(r, ""); flt != nil {
		return f.faultResponse(r, h, *flt, now)
	}

	path, ok := f.routePathLocked(r.URL.Path, h)
	if !ok {
		return notFound(h)
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")

	// The App's endpoints take its JWT: a JWT that does not verify is 401
	// before anything is counted; a verified one spends the App's limit.
	if r.Method == http.MethodPost && len(parts) == 4 && parts[0] == "app" && parts[1] == "installations" && parts[3] == "access_tokens" {
		appID, denied, ok := f.authenticateAppLocked(r, h, now)
		if !ok {
			return denied
		}
		if limited, ok := f.spendPrimaryLocked(h, cred, now); !ok {
			return limited
		}
		stateless := f.statelessTokens || strings.EqualFold(r.Header.Get(StatelessTokenHeader), "enabled")
		return f.issueTokenLocked(h, appID, parts[2], now, stateless)
	}
	if owner, repo, ok := installationLookup(r.Method, parts); ok {
		appID, denied, ok := f.authenticateAppLocked(r, h, now)
		if !ok {
			return denied
		}
		if limited, ok := f.spendPrimaryLocked(h, cred, now); !ok {
			return limited
		}
		return f.findInstallationLocked(h, appID, owner, repo)
	}
	if rt, ok := parseWorkflowRoute(r.Method, parts); ok {
		return f.workflowLocked(r, h, rt, now)
	}
	install, ok := f.authorizedLocked(r, now)
	if !ok {
		return errorResponse(http.StatusUnauthorized, h, "Bad credentials")
	}
	if limited, ok := f.spendPrimaryLocked(h, cred, now); !ok {
		return limited
	}

	scope, rest, ok := parseScope(parts)
	if !ok || !f.holdsLocked(scope) {
		return notFound(h)
	}
	if resp, denied := f.installationDeniesLocked(h, install, scope); denied {
		return resp
	}
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		return f.listResponseLocked(r, h, scope, cred)
	case len(rest) == 1 && rest[0] == "generate-jitconfig" && r.Method == http.MethodPost:
		return f.jitConfigLocked(r, h, scope)
	case len(rest) == 1 && (r.Method == http.MethodGet || r.Method == http.MethodDelete):
		id, err := strconv.ParseInt(rest[0], 10, 64)
		if err != nil {
			return notFound(h)
		}
		if r.Method == http.MethodGet {
			return f.getLocked(h, scope, id)
		}
		return f.removeLocked(h, scope, id)
	default:
		return notFound(h)
	}
}

// routePathLocked strips /api/v3 and applies the style: github.com has no
// /api/v3, GHES has nothing else.
func (f *Fake) routePathLocked(p string, h http.Header) (string, bool) {
	rest, ghes := strings.CutPrefix(p, "/api/v3")
	if ghes && rest != "" && !strings.HasPrefix(rest, "/") {
		rest, ghes = p, false // e.g. /api/v3x
	}
	switch f.style {
	case StyleDotCom:
		if ghes {
			return "", false
		}
	case StyleGHES:
		h.Set("X-GitHub-Enterprise-Version", GHESVersion)
		if !ghes {
			return "", false
		}
	}
	if rest == "" {
		rest = "/"
	}
	return rest, true
}

// installationLookup matches GET /orgs/{org}/installation and
// GET /repos/{owner}/{repo}/installation.
func installationLookup(method string, parts []string) (owner, repo string, ok bool) {
	if method != http.MethodGet {
		return "", "", false
	}
	switch {
	case len(parts) == 3 && parts[0] == "orgs" && parts[2] == "installation" && parts[1] != "":
		return parts[1], "", true
	case len(parts) == 4 && parts[0] == "repos" && parts[3] == "installation" && parts[1] != "" && parts[2] != "":
		return parts[1], parts[2], true
	}
	return "", "", false
}

// findInstallationLocked answers an installation look-up by App appID: 200
// with its installation on owner, else 404, also for a repository the fake
// does not hold.
func (f *Fake) findInstallationLocked(h http.Header, appID int64, owner, repo string) response {
	if repo != "" && !f.holdsLocked(scopeKey{ghclient.ScopeRepo, strings.ToLower(owner + "/" + repo)}) {
		return notFound(h)
	}
	in := f.installationOnLocked(appID, owner)
	if in == nil {
		return notFound(h)
	}
	target := "Organization"
	if repo != "" {
		target = "Repository"
	}
	return jsonResponse(http.StatusOK, h, map[string]any{
		"id":                in.ID,
		"app_id":            in.AppID,
		"target_type":       target,
		"account":           map[string]any{"login": owner},
		"access_tokens_url": fmt.Sprintf("https://api.github.com/app/installations/%d/access_tokens", in.ID),
	})
}

func (f *Fake) installationOnLocked(appID int64, owner string) *installation {
	owner = strings.ToLower(owner)
	var found *installation
	for _, in := range f.installations {
		if in.AppID == appID && in.owners[owner] && (found == nil || in.ID < found.ID) {
			found = in
		}
	}
	return found
}

// installationDeniesLocked answers as GitHub does when an installation token
// reaches for an owner the installation does not cover: a repository it cannot
// see is 404; an organisation (or enterprise) it is not installed on is 403.
func (f *Fake) installationDeniesLocked(h http.Header, install int64, k scopeKey) (response, bool) {
	if install == 0 {
		return response{}, false
	}
	in, ok := f.installations[install]
	if ok && k.kind != ghclient.ScopeEnterprise && in.owners[ownerOf(k)] {
		return response{}, false
	}
	if k.kind == ghclient.ScopeRepo {
		return notFound(h), true
	}
	return errorResponse(http.StatusForbidden, h, "Resource not accessible by integration"), true
}

// jitConfigLocked answers POST .../actions/runners/generate-jitconfig: 201
// with the runner and its config, 409 for a name taken, 422 for a body
// without name, runner_group_id or labels.
func (f *Fake) jitConfigLocked(r *http.Request, h http.Header, k scopeKey) response {
	var body struct {
		Name          string   `json:"name"`
		RunnerGroupID *int64   `json:"runner_group_id"`
		Labels        []string `json:"labels"`
		WorkFolder    string   `json:"work_folder"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		return errorResponse(http.StatusBadRequest, h, "Problems parsing JSON")
	}
	if body.Name == "" || body.RunnerGroupID == nil || len(body.Labels) == 0 || len(body.Labels) > 100 {
		return errorResponse(http.StatusUnprocessableEntity, h, "Invalid request.\n\nname, runner_group_id and 1 to 100 labels are required.")
	}
	run, cfg, err := f.registerJITLocked(k, body.Name, body.Labels)
	if err != nil {
		return errorResponse(http.StatusConflict, h, fmt.Sprintf("Already exists - A runner with the name %s already exists.", body.Name))
	}
	return jsonResponse(http.StatusCreated, h, map[string]any{"runner": run, "encoded_jit_config": cfg})
}

// parseScope splits `{repos/o/r|orgs/o|enterprises/e}/actions/runners[/id]`.
func parseScope(parts []string) (scopeKey, []string, bool) {
	var k scopeKey
	var rest []string
	switch {
	case len(parts) >= 5 && parts[0] == "repos":
		k, rest = scopeKey{ghclient.ScopeRepo, strings.ToLower(parts[1] + "/" + parts[2])}, parts[3:]
	case len(parts) >= 4 && parts[0] == "orgs":
		k, rest = scopeKey{ghclient.ScopeOrg, strings.ToLower(parts[1])}, parts[2:]
	case len(parts) >= 4 && parts[0] == "enterprises":
		k, rest = scopeKey{ghclient.ScopeEnterprise, strings.ToLower(parts[1])}, parts[2:]
	default:
		return k, nil, false
	}
	if len(rest) < 2 || rest[0] != "actions" || rest[1] != "runners" || len(rest) > 3 {
		return k, nil, false
	}
	for _, p := range parts {
		if p == "" {
			return k, nil, false
		}
	}
	return k, rest[2:], true
}

func (f *Fake) faultResponse(r *http.Request, h http.Header, flt Fault, now time.Time) response {
	cred := f.credentialLocked(r)
	switch flt.Kind {
	case FaultSecondaryRateLimit:
		if !flt.NoRateHeaders {
			f.rateHeadersLocked(h, cred)
		}
		status := orDefault(flt.Status, http.StatusForbidden)
		wait := time.Minute // GitHub's advice when it names no wait
		if flt.RetryAfterSeconds > 0 {
			h.Set("Retry-After", strconv.Itoa(flt.RetryAfterSeconds))
			wait = time.Duration(flt.RetryAfterSeconds) * time.Second
		}
		// What the credential sends before that wait ends is counted as
		// sent while limited, as after an enforced limit.
		f.usageLocked(cred).faultedUntil(now.Add(wait))
		if flt.Body != "" {
			return response{status: status, header: h, body: []byte(flt.Body)}
		}
		return errorResponseDocs(status, h,
			"You have exceeded a secondary rate limit. Please wait a few minutes before you try again.", SecondaryDocsURL)
	case FaultPrimaryRateLimit:
		status := orDefault(flt.Status, http.StatusForbidden)
		reset := now.Add(time.Duration(orDefault(flt.ResetAfterSeconds, 60)) * time.Second)
		limit := f.primaryLocked(cred, now).Limit
		h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Used", strconv.Itoa(limit))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
		h.Set("X-RateLimit-Resource", "core")
		if flt.Body != "" {
			return response{status: status, header: h, body: []byte(flt.Body)}
		}
		return errorResponseDocs(status, h, "API rate limit exceeded for installation.", PrimaryDocsURL)
	case FaultMalformedJSON:
		f.rateHeadersLocked(h, cred)
		return response{status: http.StatusOK, header: h, body: []byte(`{"total_count": 1, "runners": [{"id": `)}
	default: // FaultStatus
		if !flt.NoRateHeaders {
			f.rateHeadersLocked(h, cred)
		}
		status := orDefault(flt.Status, http.StatusInternalServerError)
		if flt.Body != "" {
			return response{status: status, header: h, body: []byte(flt.Body)}
		}
		msg := http.StatusText(status)
		if status == http.StatusUnauthorized {
			msg = "Bad credentials"
		}
		if status == http.StatusNoContent {
			return response{status: status, header: h}
		}
		return errorResponse(status, h, msg)
	}
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// authorizedLocked checks the request's credential; install is the
// installation an installation token belongs to (0: a token the fake was
// given, an unscoped installation token, or none under Leniency.AuthOff).
func (f *Fake) authorizedLocked(r *http.Request, now time.Time) (install int64, ok bool) {
	tok, ok := credential(r)
	if !ok {
		return 0, f.lenient.AuthOff
	}
	if f.knownTokenLocked(tok) {
		return 0, true
	}
	it, ok := f.appTokens[tok]
	if !ok || !now.Before(it.expires) {
		return 0, f.lenient.AuthOff
	}
	return it.install, true
}

// credential extracts TOKEN from `Authorization: Bearer TOKEN` or `token TOKEN`.
func credential(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || tok == "" || !strings.EqualFold(scheme, "bearer") && !strings.EqualFold(scheme, "token") {
		return "", false
	}
	return tok, true
}

// issueTokenLocked answers POST /app/installations/{id}/access_tokens for
// App appID (authenticateAppLocked). An installation added with
// AddInstallation must belong to that App and yields a token scoped to its
// owners; any other ID answers 404, unless Leniency.AuthOff lets an App with
// no installations have an unscoped token for any ID.
// stateless issues the token in GitHub's new format.
func (f *Fake) issueTokenLocked(h http.Header, appID int64, idStr string, now time.Time, stateless bool) response {
	id, err := strconv.ParseInt(idStr, 10, 64)
	if err != nil {
		return notFound(h)
	}
	in, known := f.installations[id]
	credentialID := id
	switch {
	case known && in.AppID != appID:
		return notFound(h)
	case !known && (!f.lenient.AuthOff || f.appHasInstallationsLocked(appID)):
		return notFound(h)
	case !known:
		id = 0
	}
	issued := opaqueToken()
	if stateless {
		issued = statelessToken()
	}
	exp := now.Add(installTokenTTL)
	f.appTokens[issued] = issuedToken{expires: exp, install: id, credentialID: credentialID}
	return jsonResponse(http.StatusCreated, h, map[string]any{
		"token":      issued,
		"expires_at": exp.UTC().Format(time.RFC3339),
	})
}

func (f *Fake) appHasInstallationsLocked(appID int64) bool {
	for _, in := range f.installations {
		if in.AppID == appID {
			return true
		}
	}
	return false
}

// authenticateAppLocked checks the App JWT r carries and returns its App's ID
// (as verifyJWTLocked), or the 401 GitHub answers when the JWT is missing or
// does not verify. Leniency.AuthOff takes what the JWT claims.
func (f *Fake) authenticateAppLocked(r *http.Request, h http.Header, now time.Time) (appID int64, denied response, ok bool) {
	tok, ok := credential(r)
	if !ok {
		if f.lenient.AuthOff {
			return 0, response{}, true
		}
		return 0, errorResponse(http.StatusUnauthorized, h, "A JSON web token could not be decoded"), false
	}
	appID, err := f.verifyJWTLocked(tok, now)
	if err != nil && f.lenient.AuthOff {
		appID, _ = f.jwtIssuerLocked(tok)
		return appID, response{}, true
	}
	if err != nil {
		return 0, errorResponse(http.StatusUnauthorized, h, "A JSON web token could not be decoded: "+err.Error()), false
	}
	return appID, response{}, true
}

// verifyJWTLocked checks an app JWT and returns its App's ID (0 when no App
// is registered, only accepted under Leniency.AuthOff). The issuer may be the
// numeric app ID or a client ID set with SetAppClientID.
func (f *Fake) verifyJWTLocked(tok string, now time.Time) (int64, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return 0, fmt.Errorf("want 3 parts, got %d", len(parts))
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Iss json.RawMessage `json:"iss"`
		Exp int64           `json:"exp"`
	}
	if err := decodeSegment(parts[0], &hdr); err != nil {
		return 0, fmt.Errorf("header: %w", err)
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		return 0, fmt.Errorf("claims: %w", err)
	}
	if hdr.Alg != "RS256" {
		return 0, fmt.Errorf("alg %q, want RS256", hdr.Alg)
	}
	// GitHub requires exp, at most 10 minutes ahead.
	if claims.Exp == 0 || now.Unix() > claims.Exp || claims.Exp > now.Add(10*time.Minute).Unix() {
		return 0, fmt.Errorf("exp %d outside (now, now+10m]", claims.Exp)
	}
	if len(f.apps) == 0 {
		if f.lenient.AuthOff {
			return 0, nil
		}
		return 0, errors.New("no App is registered")
	}
	iss := strings.Trim(string(claims.Iss), `"`)
	appID, ok := f.clientIDs[iss]
	if !ok {
		var err error
		if appID, err = strconv.ParseInt(iss, 10, 64); err != nil {
			return 0, fmt.Errorf("iss %s: %w", claims.Iss, err)
		}
	}
	pub, ok := f.apps[appID]
	if !ok {
		return 0, fmt.Errorf("unknown app %s", iss)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return 0, fmt.Errorf("signature: %w", err)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig); err != nil {
		return 0, fmt.Errorf("signature: %w", err)
	}
	return appID, nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// listResponseLocked answers a list, with an ETag; a request whose
// If-None-Match matches it gets 304 with no body.
func (f *Fake) listResponseLocked(r *http.Request, h http.Header, k scopeKey, cred string) response {
	q := r.URL.Query()
	p := listPageOf(q)
	all := f.listLocked(k, q.Get("name"), true)
	total := len(all)
	runners := all[p.start(total):p.end(total)]
	if runners == nil {
		runners = []Runner{}
	}
	link := linkHeader(r, p, total)
	resp := jsonResponse(http.StatusOK, h, struct {
		TotalCount int      `json:"total_count"`
		Runners    []Runner `json:"runners"`
	}{total, runners})
	etag := listETag(cred, link, resp.body)
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, max-age=60, s-maxage=60")
	h.Set("Vary", "Accept, Authorization, Cookie, X-GitHub-OTP")
	if etagMatches(r.Header.Get("If-None-Match"), etag) {
		// GitHub documents that a 304 does not count against the primary
		// limit when the request was correctly authorized with an
		// Authorization header. Its secondary cost is not documented: the
		// fake keeps the point (counted on arrival), the conservative choice.
		if f.style != StyleGHES && cred != Anonymous {
			f.primaryLocked(cred, f.now()).Remaining++
			f.rateHeadersLocked(h, cred)
		}
		h.Del("Content-Type")
		return response{status: http.StatusNotModified, header: h}
	}
	if link != "" {
		h.Set("Link", link)
	}
	return resp
}

// listETag is a list answer's weak ETag: the same while the answer (body
// and paging links) is, and per credential, as GitHub's ETags are per token.
func listETag(cred, link string, body []byte) string {
	sum := sha256.New()
	for _, part := range [][]byte{[]byte(cred), []byte(link), body} {
		sum.Write(part)
		sum.Write([]byte{0})
	}
	return `W/"` + hex.EncodeToString(sum.Sum(nil)) + `"`
}

// etagMatches applies If-None-Match's weak comparison (RFC 9110 13.1.2): any
// listed entity tag with etag's opaque tag, or "*", matches.
func etagMatches(ifNoneMatch, etag string) bool {
	want := strings.TrimPrefix(etag, "W/")
	for _, tag := range strings.Split(ifNoneMatch, ",") {
		tag = strings.TrimSpace(tag)
		if tag == "*" || tag != "" && strings.TrimPrefix(tag, "W/") == want {
			return true
		}
	}
	return false
}

// listPage is the page a list request asks for with page and per_page
// (per_page 30 when absent, at most 100, as GitHub's).
type listPage struct{ page, perPage int }

func listPageOf(q url.Values) listPage {
	p := listPage{page: 1, perPage: defaultPerPage}
	if v, err := strconv.Atoi(q.Get("per_page")); err == nil && v > 0 {
		p.perPage = min(v, maxPerPage)
	}
	if v, err := strconv.Atoi(q.Get("page")); err == nil && v > 0 {
		p.page = v
	}
	return p
}

// start and end bound the page's items among total: items[start:end].
func (p listPage) start(total int) int { return min((p.page-1)*p.perPage, total) }
func (p listPage) end(total int) int   { return min(p.start(total)+p.perPage, total) }

// linkHeader renders GitHub's paging header, e.g.
// `<URL?page=2>; rel="next", <URL?page=3>; rel="last"`.
func linkHeader(r *http.Request, p listPage, total int) string {
	page, perPage := p.page, p.perPage
	last := (total + perPage - 1) / perPage
	if last <= 1 {
		return ""
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	pageURL := func(n int) string {
		q := r.URL.Query()
		q.Set("per_page", strconv.Itoa(perPage))
		q.Set("page", strconv.Itoa(n))
		u := url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path, RawQuery: q.Encode()}
		return u.String()
	}
	var links []string
	add := func(n int, rel string) { links = append(links, fmt.Sprintf("<%s>; rel=%q", pageURL(n), rel)) }
	if page > 1 {
		add(min(page-1, last), "prev")
	}
	if page < last {
		add(page+1, "next")
		add(last, "last")
	}
	if page > 1 {
		add(1, "first")
	}
	return strings.Join(links, ", ")
}

// getLocked answers GET .../actions/runners/{runner_id}: 200 with the runner
// as one element of the list renders it, 404 for an ID unknown in the scope.
func (f *Fake) getLocked(h http.Header, k scopeKey, id int64) response {
	r, ok := f.runners[id]
	if !ok || r.scope != k {
		return notFound(h)
	}
	return jsonResponse(http.StatusOK, h, r.restView())
}

func (f *Fake) removeLocked(h http.Header, k scopeKey, id int64) response {
	r, ok := f.runners[id]
	if !ok || r.scope != k {
		return notFound(h)
	}
	if r.Busy {
		return errorResponse(http.StatusUnprocessableEntity, h, fmt.Sprintf("Runner %q is still running a job", r.Name))
	}
	f.dropLocked(r)
	h.Del("Content-Type")
	return response{status: http.StatusNoContent, header: h}
}

func notFound(h http.Header) response { return errorResponse(http.StatusNotFound, h, "Not Found") }

// ghError is GitHub's error body, fields in GitHub's order.
type ghError struct {
	Message          string `json:"message"`
	DocumentationURL string `json:"documentation_url"`
	Status           string `json:"status"`
}

func errorResponse(status int, h http.Header, msg string) response {
	return errorResponseDocs(status, h, msg, DocsURL)
}

func errorResponseDocs(status int, h http.Header, msg, docs string) response {
	return jsonResponse(status, h, ghError{Message: msg, DocumentationURL: docs, Status: strconv.Itoa(status)})
}

func jsonResponse(status int, h http.Header, v any) response {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own maps and structs are encoded here.
		panic(err)
	}
	return response{status: status, header: h, body: b}
}
