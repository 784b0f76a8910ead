package ghclient_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-github/v93/github"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

const testToken = "t0ken"

var (
	org  = mustScope(ghclient.OrgScope("acme"))
	repo = mustScope(ghclient.RepoScope("acme/app"))
	ent  = mustScope(ghclient.EnterpriseScope("bigcorp"))
)

func mustScope(s ghclient.Scope, err error) ghclient.Scope {
	if err != nil {
		panic(err)
	}
	return s
}

type env struct {
	fake    *ghfake.Fake
	srv     *httptest.Server
	client  *ghclient.Client
	metrics *ghclient.Metrics
}

// newEnv serves a fake GitHub that requires testToken and holds org, repo
// and ent (GitHub answers 404 for any other scope), and a Client for it.
func newEnv(t *testing.T, mods ...func(*ghclient.Config)) *env {
	t.Helper()
	f := ghfake.New(ghfake.WithToken(testToken), ghfake.WithScopes(org, repo, ent))
	return newEnvWith(t, f, mods...)
}

// newEnvWith serves f and builds a Client for it.
func newEnvWith(t *testing.T, f *ghfake.Fake, mods ...func(*ghclient.Config)) *env {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	m := ghclient.NewMetrics()
	cfg := ghclient.Config{
		// github.com's host, served by the fake: rate-limit rules differ on GHES.
		BaseURL:   "http://api.github.com",
		AllowHTTP: true,
		Token:     testToken,
		UserAgent: "runner-guard/test",
		Transport: dialTo(srv),
		Metrics:   m,
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	c, err := ghclient.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &env{fake: f, srv: srv, client: c, metrics: m}
}

// dialTo sends every request, whatever its host, to srv: tests can then use
// github.com's or a GHES host name against the fake.
func dialTo(srv *httptest.Server) http.RoundTripper {
	tr := srv.Client().Transport.(*http.Transport).Clone()
	addr := srv.Listener.Addr().String()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return tr
}

// calls renders the fake's log as "METHOD /path?sorted-query" lines.
func calls(f *ghfake.Fake) []string {
	var out []string
	for _, r := range f.Requests() {
		s := r.Method + " " + r.Path
		if q := url.Values(r.Query).Encode(); q != "" {
			s += "?" + q
		}
		out = append(out, s)
	}
	return out
}

func assertCalls(t *testing.T, f *ghfake.Fake, want []string) {
	t.Helper()
	got := calls(f)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n got %q\nwant %q", got, want)
	}
}

// trusted is an ID hint from a source that cannot name another runner.
func trusted(id int64) ghclient.IDHint { return ghclient.IDHint{ID: id, Trusted: true} }

// untrusted is an ID hint that must be verified before use (a pod annotation).
func untrusted(id int64) ghclient.IDHint { return ghclient.IDHint{ID: id} }

// addBusy registers a runner that is running a job and returns its ID.
func addBusy(f *ghfake.Fake, s ghclient.Scope, name string) int64 {
	id := f.AddRunner(s, name)
	f.SetBusy(s, name, true)
	return id
}

func listCall(path, name string) string {
	return fmt.Sprintf("GET %s?name=%s&page=1&per_page=100", path, name)
}

const (
	orgRunners  = "/orgs/acme/actions/runners"
	repoRunners = "/repos/acme/app/actions/runners"
	entRunners  = "/enterprises/bigcorp/actions/runners"
)

func wantRateLimited(primary bool, retryAfter time.Duration) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var rl *ghclient.RateLimited
		if !errors.As(err, &rl) {
			t.Fatalf("want *RateLimited, got %T: %v", err, err)
		}
		if rl.Primary != primary {
			t.Errorf("Primary = %v, want %v", rl.Primary, primary)
		}
		if d := rl.RetryAfter - retryAfter; d < -2*time.Second || d > 2*time.Second {
			t.Errorf("RetryAfter = %s, want about %s", rl.RetryAfter, retryAfter)
		}
	}
}

func wantErrContaining(parts ...string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if err == nil {
			t.Fatal("want an error, got nil")
		}
		var rl *ghclient.RateLimited
		if errors.As(err, &rl) {
			t.Errorf("want a plain error, got rate limited: %v", err)
		}
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not contain %q", err, p)
			}
		}
	}
}

func TestUnregister(t *testing.T) {
	runUnregister(t, map[string]unregisterCase{
		"idle runner without hint: list by name, then DELETE": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.AddRunner(org, "other")
				f.AddRunner(org, "r1")
				return trusted(0)
			},
			want:      ghclient.Removed,
			wantCalls: []string{listCall(orgRunners, "r1"), "DELETE " + orgRunners + "/1002"},
			wantGone:  true,
		},
		"repo scope": {
			scope:     repo,
			setup:     func(f *ghfake.Fake) ghclient.IDHint { f.AddRunner(repo, "r1"); return trusted(0) },
			want:      ghclient.Removed,
			wantCalls: []string{listCall(repoRunners, "r1"), "DELETE " + repoRunners + "/1001"},
			wantGone:  true,
		},
		"enterprise scope": {
			scope:     ent,
			setup:     func(f *ghfake.Fake) ghclient.IDHint { return trusted(f.AddRunner(ent, "r1")) },
			want:      ghclient.Removed,
			wantCalls: []string{"DELETE " + entRunners + "/1001"},
			wantGone:  true,
		},
		"runner not on GitHub: list only, no DELETE": {
			setup:     func(f *ghfake.Fake) ghclient.IDHint { f.AddRunner(repo, "r1"); return trusted(0) },
			want:      ghclient.NotFound,
			wantCalls: []string{listCall(orgRunners, "r1")},
		},
		"hinted ID gone, runner re-registered under a new ID": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				old := f.AddRunner(org, "r1")
				f.ReRegister(org, "r1")
				return trusted(old)
			},
			want: ghclient.Removed,
			wantCalls: []string{
				"DELETE " + orgRunners + "/1001",
				listCall(orgRunners, "r1"),
				"DELETE " + orgRunners + "/1002",
			},
			wantGone: true,
		},
		"hinted ID gone and not listed: not found": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				id := f.AddRunner(org, "r1")
				f.RemoveRunnerByName(org, "r1")
				return trusted(id)
			},
			want:      ghclient.NotFound,
			wantCalls: []string{"DELETE " + orgRunners + "/1001", listCall(orgRunners, "r1")},
		},
		"busy runner with hint: 422 is Busy": {
			setup:     func(f *ghfake.Fake) ghclient.IDHint { return trusted(addBusy(f, org, "r1")) },
			want:      ghclient.Busy,
			wantCalls: []string{"DELETE " + orgRunners + "/1001"},
		},
		"busy runner without hint": {
			setup:     func(f *ghfake.Fake) ghclient.IDHint { addBusy(f, org, "r1"); return trusted(0) },
			want:      ghclient.Busy,
			wantCalls: []string{listCall(orgRunners, "r1"), "DELETE " + orgRunners + "/1001"},
		},
		"bad credentials: 401 is an error": {
			setup:     func(f *ghfake.Fake) ghclient.IDHint { return trusted(f.AddRunner(org, "r1")) },
			token:     "wrong",
			checkErr:  wantErrContaining(`remove runner "r1" (id 1001) from org "acme"`, "401", "Bad credentials"),
			wantCalls: []string{"DELETE " + orgRunners + "/1001"},
		},
		"500 on DELETE: wrapped API error": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 500, Times: 1})
				return trusted(f.AddRunner(org, "r1"))
			},
			checkErr: func(t *testing.T, err error) {
				wantErrContaining(`remove runner "r1" (id 1001) from org "acme"`, "DELETE", ": 500")(t, err)
				var er *github.ErrorResponse
				if !errors.As(err, &er) || er.Response.StatusCode != 500 {
					t.Errorf("errors.As(*github.ErrorResponse) failed or wrong status: %v", err)
				}
			},
			wantCalls: []string{"DELETE " + orgRunners + "/1001"},
		},
		"502 on list: wrapped API error, no DELETE": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 502, Method: "GET"})
				f.AddRunner(org, "r1")
				return trusted(0)
			},
			checkErr:  wantErrContaining(`list runners named "r1" in org "acme"`, "GET", ": 502"),
			wantCalls: []string{listCall(orgRunners, "r1")},
		},
		"malformed JSON on list": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(ghfake.Fault{Kind: ghfake.FaultMalformedJSON})
				return trusted(0)
			},
			checkErr:  wantErrContaining(`list runners named "r1" in org "acme"`, "HTTP 200"),
			wantCalls: []string{listCall(orgRunners, "r1")},
		},
		"403 with remaining>0 and no retry-after is a permission error": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 403, Body: `{"message":"Resource not accessible by integration"}`})
				return trusted(f.AddRunner(org, "r1"))
			},
			checkErr:  wantErrContaining("403", "Resource not accessible"),
			wantCalls: []string{"DELETE " + orgRunners + "/1001"},
		},
		"exhausted window of the fake: 403 primary": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.SetRateLimit(5000, 0, time.Now().Add(10*time.Minute))
				return trusted(f.AddRunner(org, "r1"))
			},
			checkErr:  wantRateLimited(true, 10*time.Minute),
			wantCalls: []string{"DELETE " + orgRunners + "/1001"},
		},
	})
}

// TestUnregisterRateLimited: each limit GitHub answers with is a
// *RateLimited with the wait to honour, whether it meets the DELETE of a
// hinted runner or, with no hint, the listing by name.
func TestUnregisterRateLimited(t *testing.T) {
	limits := map[string]struct {
		fault   ghfake.Fault
		byList  bool // no hint: the listing meets the limit
		primary bool
		wait    time.Duration
	}{
		"403 primary limit: retry at reset": {
			fault: ghfake.Fault{Kind: ghfake.FaultPrimaryRateLimit, Status: 403, ResetAfterSeconds: 120}, primary: true, wait: 120 * time.Second},
		"429 primary limit": {
			fault: ghfake.Fault{Kind: ghfake.FaultPrimaryRateLimit, Status: 429, ResetAfterSeconds: 300}, byList: true, primary: true, wait: 300 * time.Second},
		"403 secondary limit with retry-after": {
			fault: ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 403, RetryAfterSeconds: 30}, wait: 30 * time.Second},
		"429 secondary limit with retry-after": {
			fault: ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 429, RetryAfterSeconds: 7}, byList: true, wait: 7 * time.Second},
		// go-github derives the wait from x-ratelimit-reset (an hour away here)
		// and refuses requests that long; the client caps that at 5 minutes.
		"403 secondary limit without retry-after: capped reset": {
			fault: ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 403}, wait: 5 * time.Minute},
		"bare 429 without any rate-limit headers: at least a minute": {
			fault: ghfake.Fault{Kind: ghfake.FaultStatus, Status: 429, NoRateHeaders: true}, wait: time.Minute},
		"bare 403 without any rate-limit headers: at least a minute": {
			fault: ghfake.Fault{Kind: ghfake.FaultStatus, Status: 403, NoRateHeaders: true}, wait: time.Minute},
	}
	tests := map[string]unregisterCase{}
	for name, l := range limits {
		tc := unregisterCase{
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(l.fault)
				if l.byList {
					return trusted(0)
				}
				return trusted(f.AddRunner(org, "r1"))
			},
			checkErr:  wantRateLimited(l.primary, l.wait),
			wantCalls: []string{"DELETE " + orgRunners + "/1001"},
		}
		if l.byList {
			tc.wantCalls = []string{listCall(orgRunners, "r1")}
		}
		tests[name] = tc
	}
	runUnregister(t, tests)
}

// unregisterCase is one Unregister of runner "r1" against a fresh fake.
type unregisterCase struct {
	scope ghclient.Scope // default org
	base  string         // client BaseURL; default github.com
	token string         // client token; default testToken
	// setup prepares the fake and returns the hint to pass for "r1".
	setup     func(f *ghfake.Fake) ghclient.IDHint
	want      ghclient.Outcome
	checkErr  func(*testing.T, error)
	wantCalls []string
	wantGone  bool     // r1 must be gone from the fake afterwards
	wantKept  []string // runners that must still be registered, in keptScope (default scope)
	keptScope ghclient.Scope
	// wantRejected, when set, is the hints-rejected counter by reason.
	wantRejected map[string]float64
	// staleLargeListing: before setup the scope gets 120 runners (IDs 1001
	// to 1120, so setup's start at afterFillers), listed once and older than
	// ListingTTL: an untrusted hint the listing does not hold is verified by
	// a GET of its ID rather than a new listing.
	staleLargeListing bool
}

// afterFillers is the first ID setup's runners get with staleLargeListing.
const afterFillers = 1121

func runUnregister(t *testing.T, tests map[string]unregisterCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// The listing is taken ListingTTL in the past, so that the
			// Unregister runs at about the fake's (real) time.
			var clock atomic.Int64 // nanoseconds past start
			start := time.Now().Add(-ghclient.ListingTTL)
			e := newEnv(t, func(c *ghclient.Config) {
				if tc.base != "" {
					c.BaseURL = tc.base
				}
				if tc.token != "" {
					c.Token = tc.token
				}
				if tc.staleLargeListing {
					c.Now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
				}
			})
			scope := tc.scope
			if scope == (ghclient.Scope{}) {
				scope = org
			}
			if tc.staleLargeListing {
				for i := range afterFillers - 1001 {
					e.fake.AddRunner(scope, fmt.Sprintf("filler-%03d", i))
				}
				if _, err := e.client.Listed(context.Background(), scope, "r1", ghclient.RefreshStale); err != nil {
					t.Fatalf("listing the scope: %v", err)
				}
				clock.Add(int64(ghclient.ListingTTL))
				e.fake.ResetLog()
			}
			hint := tc.setup(e.fake)

			got, err := e.client.Unregister(context.Background(), scope, "r1", hint)

			if tc.checkErr != nil {
				tc.checkErr(t, err)
			} else if err != nil {
				t.Fatalf("Unregister: %v", err)
			}
			if got != tc.want {
				t.Errorf("outcome = %v, want %v", got, tc.want)
			}
			assertCalls(t, e.fake, tc.wantCalls)
			if _, present := e.fake.Runner(scope, "r1"); tc.wantGone && present {
				t.Errorf("r1 still registered on the fake")
			}
			kept := tc.keptScope
			if kept == (ghclient.Scope{}) {
				kept = scope
			}
			for _, n := range tc.wantKept {
				if _, present := e.fake.Runner(kept, n); !present {
					t.Errorf("runner %q in %s was removed", n, kept)
				}
			}
			if tc.wantRejected != nil {
				if got := rejectedHints(t, e.metrics); fmt.Sprint(got) != fmt.Sprint(tc.wantRejected) {
					t.Errorf("hints rejected = %v, want %v", got, tc.wantRejected)
				}
			}
		})
	}
}

func TestUnregisterInvalidArguments(t *testing.T) {
	tests := map[string]struct {
		scope ghclient.Scope
		name  string
		want  string
	}{
		"unknown kind":   {scope: ghclient.Scope{Kind: "team", Name: "x"}, name: "r1", want: `unknown scope kind "team"`},
		"empty org":      {scope: ghclient.Scope{Kind: ghclient.ScopeOrg}, name: "r1", want: "empty org name"},
		"repo w/o owner": {scope: ghclient.Scope{Kind: ghclient.ScopeRepo, Name: "app"}, name: "r1", want: "owner/repo"},
		"empty runner":   {scope: org, name: "", want: "empty runner name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			_, err := e.client.Unregister(context.Background(), tc.scope, tc.name, ghclient.IDHint{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Unregister error = %v, want one containing %q", err, tc.want)
			}
			if _, err := e.client.Status(context.Background(), tc.scope, tc.name); err == nil {
				t.Errorf("Status accepted invalid arguments")
			}
			assertCalls(t, e.fake, nil)
		})
	}
}

// Busy-ness is never cached: every attempt asks GitHub with a DELETE. The ID
// found by a list is cached until the runner is removed.
func TestUnregisterCachesIDNotBusyness(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	addBusy(e.fake, org, "r1")

	steps := []struct {
		before    func()
		want      ghclient.Outcome
		wantCalls []string
	}{
		{want: ghclient.Busy, wantCalls: []string{listCall(orgRunners, "r1"), "DELETE " + orgRunners + "/1001"}},
		{want: ghclient.Busy, wantCalls: []string{"DELETE " + orgRunners + "/1001"}},
		{before: func() { e.fake.SetBusy(org, "r1", false) }, want: ghclient.Removed, wantCalls: []string{"DELETE " + orgRunners + "/1001"}},
		// Removed dropped the cache entry: the re-added runner is looked up again.
		{before: func() { e.fake.AddRunner(org, "r1") }, want: ghclient.Removed, wantCalls: []string{listCall(orgRunners, "r1"), "DELETE " + orgRunners + "/1002"}},
		{want: ghclient.NotFound, wantCalls: []string{listCall(orgRunners, "r1")}},
	}
	for i, s := range steps {
		if s.before != nil {
			s.before()
		}
		e.fake.ResetLog()
		got, err := e.client.Unregister(ctx, org, "r1", ghclient.IDHint{})
		if err != nil || got != s.want {
			t.Fatalf("step %d: Unregister = %v, %v; want %v", i, got, err, s.want)
		}
		assertCalls(t, e.fake, s.wantCalls)
	}
}

// A cached ID that 404s (runner re-registered) is dropped and the name looked up again.
func TestUnregisterStaleCachedID(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.fake.AddRunner(org, "r1")
	if st, err := e.client.Status(ctx, org, "r1"); err != nil || st.ID != 1001 {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	e.fake.ReRegister(org, "r1")
	e.fake.ResetLog()

	got, err := e.client.Unregister(ctx, org, "r1", ghclient.IDHint{})
	if err != nil || got != ghclient.Removed {
		t.Fatalf("Unregister = %v, %v; want removed", got, err)
	}
	assertCalls(t, e.fake, []string{
		"DELETE " + orgRunners + "/1001",
		listCall(orgRunners, "r1"),
		"DELETE " + orgRunners + "/1002",
	})
}

func TestUnregisterCacheExpires(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, func(c *ghclient.Config) { c.Now = clock; c.CacheTTL = time.Minute })
	ctx := context.Background()
	e.fake.AddRunner(org, "r1")
	if _, err := e.client.Status(ctx, org, "r1"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	e.fake.ResetLog()

	if got, err := e.client.Unregister(ctx, org, "r1", ghclient.IDHint{}); err != nil || got != ghclient.Removed {
		t.Fatalf("Unregister = %v, %v", got, err)
	}
	assertCalls(t, e.fake, []string{listCall(orgRunners, "r1"), "DELETE " + orgRunners + "/1001"})
}

func TestStatus(t *testing.T) {
	tests := map[string]struct {
		setup func(f *ghfake.Fake)
		want  ghclient.RunnerStatus
	}{
		"not registered": {
			setup: func(f *ghfake.Fake) { f.AddRunner(org, "r10") },
			want:  ghclient.RunnerStatus{State: ghclient.StateNotFound},
		},
		"idle and online": {
			setup: func(f *ghfake.Fake) { f.AddRunner(org, "r1") },
			want:  ghclient.RunnerStatus{State: ghclient.StateIdle, ID: 1001, Online: true},
		},
		"busy": {
			setup: func(f *ghfake.Fake) { addBusy(f, org, "r1") },
			want:  ghclient.RunnerStatus{State: ghclient.StateBusy, ID: 1001, Online: true},
		},
		"idle and offline": {
			setup: func(f *ghfake.Fake) { f.AddRunner(org, "r1"); f.SetOnline(org, "r1", false) },
			want:  ghclient.RunnerStatus{State: ghclient.StateIdle, ID: 1001},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			tc.setup(e.fake)
			got, err := e.client.Status(context.Background(), org, "r1")
			if err != nil {
				t.Fatalf("Status: %v", err)
			}
			if got != tc.want {
				t.Errorf("Status = %+v, want %+v", got, tc.want)
			}
			assertCalls(t, e.fake, []string{listCall(orgRunners, "r1")})
		})
	}
}

func TestStatusRateLimited(t *testing.T) {
	e := newEnv(t)
	e.fake.InjectFault(ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, RetryAfterSeconds: 9})
	_, err := e.client.Status(context.Background(), org, "r1")
	wantRateLimited(false, 9*time.Second)(t, err)
}

// go-github remembers a limit until it ends and refuses requests without
// sending them; that must read as rate limited too.
func TestRateLimitRememberedClientSide(t *testing.T) {
	tests := map[string]struct {
		setup       func(f *ghfake.Fake)
		firstErr    bool
		wantPrimary bool
		wantWait    time.Duration
	}{
		"after a 403 primary limit": {
			setup: func(f *ghfake.Fake) {
				f.InjectFault(ghfake.Fault{Kind: ghfake.FaultPrimaryRateLimit, ResetAfterSeconds: 120, Times: 1})
			},
			firstErr:    true,
			wantPrimary: true,
			wantWait:    2 * time.Minute,
		},
		"after the last request of the window succeeded": {
			setup:       func(f *ghfake.Fake) { f.SetRateLimit(5000, 1, time.Now().Add(2*time.Minute)) },
			wantPrimary: true,
			wantWait:    2 * time.Minute,
		},
		"after a 429 secondary limit with retry-after": {
			setup: func(f *ghfake.Fake) {
				f.InjectFault(ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 429, RetryAfterSeconds: 30, Times: 1})
			},
			firstErr: true,
			wantWait: 30 * time.Second,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			tc.setup(e.fake)
			id := addBusy(e.fake, org, "r1")

			_, err := e.client.Unregister(ctx, org, "r1", trusted(id))
			if tc.firstErr {
				wantRateLimited(tc.wantPrimary, tc.wantWait)(t, err)
			} else if err != nil {
				t.Fatalf("first Unregister: %v", err)
			}

			for _, call := range []func() error{
				func() error { _, err := e.client.Unregister(ctx, org, "r1", trusted(id)); return err },
				func() error { _, err := e.client.Unregister(ctx, org, "r1", ghclient.IDHint{}); return err },
				func() error { _, err := e.client.Status(ctx, org, "r1"); return err },
			} {
				wantRateLimited(tc.wantPrimary, tc.wantWait)(t, call())
			}
			if n := e.fake.Count(""); n != 1 {
				t.Errorf("%d requests reached GitHub, want 1: %q", n, calls(e.fake))
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	tests := map[string]struct{ hint bool }{
		"DELETE by hint": {hint: true},
		"list look-up":   {hint: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			id := e.fake.AddRunner(org, "r1")
			if !tc.hint {
				id = 0
			}
			e.fake.SetLatency(5 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()

			start := time.Now()
			_, err := e.client.Unregister(ctx, org, "r1", trusted(id))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("want context.DeadlineExceeded, got %v", err)
			}
			if !strings.Contains(err.Error(), `"r1"`) || !strings.Contains(err.Error(), `org "acme"`) {
				t.Errorf("error does not name runner and scope: %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Unregister took %s despite a 200ms deadline", d)
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	e := newEnv(t)
	e.srv.Close()
	_, err := e.client.Unregister(context.Background(), org, "r1", trusted(1001))
	wantErrContaining(`remove runner "r1" (id 1001) from org "acme"`)(t, err)
}

// Concurrent look-ups of one runner share one list request.
func TestConcurrentLookupsShareOneList(t *testing.T) {
	e := newEnv(t)
	e.fake.AddRunner(org, "r1")
	e.fake.SetLatency(100 * time.Millisecond)

	const n = 20
	var wg sync.WaitGroup
	outcomes := make([]ghclient.Outcome, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			outcomes[i], errs[i] = e.client.Unregister(context.Background(), org, "r1", ghclient.IDHint{})
		})
	}
	wg.Wait()

	removed := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Unregister %d: %v", i, errs[i])
		}
		if outcomes[i] == ghclient.Removed {
			removed++
		} else if outcomes[i] != ghclient.NotFound {
			t.Errorf("Unregister %d = %v", i, outcomes[i])
		}
	}
	if removed != 1 {
		t.Errorf("%d callers removed the runner, want exactly 1", removed)
	}
	if got := e.fake.Count(http.MethodGet); got != 1 {
		t.Errorf("%d list requests, want 1 shared", got)
	}
	// Every caller holds the same ID, so each DELETEs once: one 204, the rest 404.
	if got := e.fake.Count(http.MethodDelete); got != n {
		t.Errorf("%d DELETE requests, want %d", got, n)
	}
}

// One caller giving up does not fail the others sharing its look-up.
func TestSharedLookupSurvivesOneCallerCancel(t *testing.T) {
	e := newEnv(t)
	e.fake.AddRunner(org, "r1")
	e.fake.SetLatency(300 * time.Millisecond)

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	var shortErr, longErr error
	var st ghclient.RunnerStatus
	wg.Go(func() { _, shortErr = e.client.Status(short, org, "r1") })
	time.Sleep(10 * time.Millisecond)
	wg.Go(func() { st, longErr = e.client.Status(context.Background(), org, "r1") })
	wg.Wait()

	if !errors.Is(shortErr, context.DeadlineExceeded) {
		t.Errorf("short caller: want deadline exceeded, got %v", shortErr)
	}
	if longErr != nil || st.State != ghclient.StateIdle {
		t.Errorf("long caller: Status = %+v, %v; want idle", st, longErr)
	}
	if got := e.fake.Count(http.MethodGet); got != 1 {
		t.Errorf("%d list requests, want 1 shared", got)
	}
}

// A look-up nobody waits for any more is cancelled, not left running.
func TestAbandonedLookupIsCancelled(t *testing.T) {
	e := newEnv(t)
	e.fake.SetLatency(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := e.client.Status(ctx, org, "r1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline exceeded, got %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		reqs := e.fake.Requests()
		if len(reqs) == 1 && reqs[0].Status == 0 {
			return // the fake saw the client go away
		}
		if time.Now().After(deadline) {
			t.Fatalf("shared look-up still running: %+v", reqs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPaging(t *testing.T) {
	tests := map[string]struct {
		target string
		wantID int64
	}{
		"target on page 3": {target: "runner-250", wantID: 1250},
		"target absent":    {target: "nope", wantID: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			for i := 1; i <= 250; i++ {
				e.fake.AddRunner(org, fmt.Sprintf("runner-%d", i))
			}
			id, err := e.client.ScanAllForTest(context.Background(), org, tc.target)
			if err != nil {
				t.Fatal(err)
			}
			if id != tc.wantID {
				t.Errorf("id = %d, want %d", id, tc.wantID)
			}
			assertCalls(t, e.fake, []string{
				"GET " + orgRunners + "?page=1&per_page=100",
				"GET " + orgRunners + "?page=2&per_page=100",
				"GET " + orgRunners + "?page=3&per_page=100",
			})
		})
	}
}

func TestPagingErrorNamesPage(t *testing.T) {
	e := newEnv(t)
	for i := 1; i <= 150; i++ {
		e.fake.AddRunner(org, fmt.Sprintf("runner-%d", i))
	}
	e.fake.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 503, Method: "GET", After: 1, Times: 1})
	_, err := e.client.ScanAllForTest(context.Background(), org, "nope")
	wantErrContaining(`list runners for org "acme" (page 2)`, ": 503")(t, err)
	assertCalls(t, e.fake, []string{
		"GET " + orgRunners + "?page=1&per_page=100",
		"GET " + orgRunners + "?page=2&per_page=100",
	})
}

func TestHeaders(t *testing.T) {
	e := newEnv(t)
	id := e.fake.AddRunner(org, "r1")
	if _, err := e.client.Unregister(context.Background(), org, "r1", trusted(id)); err != nil {
		t.Fatal(err)
	}
	reqs := e.fake.Requests()
	if len(reqs) != 1 {
		t.Fatalf("want 1 request, got %d", len(reqs))
	}
	h := reqs[0].Header
	for k, want := range map[string]string{
		"X-Github-Api-Version": "2022-11-28",
		"User-Agent":           "runner-guard/test",
		"Authorization":        "Bearer " + testToken,
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func TestGHESBaseURL(t *testing.T) {
	tests := map[string]string{
		"without trailing slash": "/api/v3",
		"with trailing slash":    "/api/v3/",
	}
	for name, suffix := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, func(c *ghclient.Config) { c.BaseURL = "http://ghe.example.com" + suffix })
			e.fake.AddRunner(org, "r1")
			if got, err := e.client.Unregister(context.Background(), org, "r1", ghclient.IDHint{}); err != nil || got != ghclient.Removed {
				t.Fatalf("Unregister = %v, %v", got, err)
			}
			assertCalls(t, e.fake, []string{listCall("/api/v3"+orgRunners, "r1"), "DELETE /api/v3" + orgRunners + "/1001"})
		})
	}
}

func TestGitHubAppAuth(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		prefix string
		appKey *rsa.PublicKey
		// stateless: GitHub issues tokens in its new format (a ghs_ JWT).
		stateless bool
		checkErr  func(*testing.T, error)
	}{
		"github.com":                    {appKey: &key.PublicKey},
		"GHES under api/v3":             {prefix: "/api/v3", appKey: &key.PublicKey},
		"github.com, new token format":  {appKey: &key.PublicKey, stateless: true},
		"GHES under api/v3, new format": {prefix: "/api/v3", appKey: &key.PublicKey, stateless: true},
		"JWT signed with the wrong key": {
			appKey:   &otherKey.PublicKey,
			checkErr: wantErrContaining(`remove runner "r1"`, "401"),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			opts := []ghfake.Option{ghfake.WithToken(testToken), ghfake.WithScopes(org, repo, ent)}
			if tc.stateless {
				opts = append(opts, ghfake.WithStatelessTokens())
			}
			e := newEnvWith(t, ghfake.New(opts...), func(c *ghclient.Config) {
				c.Token = ""
				c.BaseURL += tc.prefix
				c.App = &ghclient.AppCredentials{AppID: 42, InstallationID: 7, PrivateKeyPEM: keyPEM}
			})
			e.fake.SetToken("")
			e.fake.AddApp(42, tc.appKey)
			e.fake.AddInstallationWithID(7, 42, "acme")
			ctx := context.Background()
			id1 := e.fake.AddRunner(org, "r1")
			id2 := e.fake.AddRunner(org, "r2")

			_, err := e.client.Unregister(ctx, org, "r1", trusted(id1))
			if tc.checkErr != nil {
				tc.checkErr(t, err)
				return
			}
			if err != nil {
				t.Fatalf("Unregister r1: %v", err)
			}
			if _, err := e.client.Unregister(ctx, org, "r2", trusted(id2)); err != nil {
				t.Fatalf("Unregister r2: %v", err)
			}
			// One token exchange, then the installation token on every request.
			assertCalls(t, e.fake, []string{
				"POST " + tc.prefix + "/app/installations/7/access_tokens",
				fmt.Sprintf("DELETE %s%s/%d", tc.prefix, orgRunners, id1),
				fmt.Sprintf("DELETE %s%s/%d", tc.prefix, orgRunners, id2),
			})
			reqs := e.fake.Requests()
			auth := reqs[1].Header.Get("Authorization")
			if !strings.HasPrefix(auth, "token ghs_") {
				t.Errorf("runner request Authorization = %q, want the installation token", auth)
			}
			if stateless := strings.Count(auth, ".") == 2 && len(auth) > 500; stateless != tc.stateless {
				t.Errorf("runner request token of %d characters with %d dots; want the new format: %v", len(auth)-len("token "), strings.Count(auth, "."), tc.stateless)
			}
			for _, r := range reqs[1:] {
				if r.Status != http.StatusNoContent {
					t.Errorf("%s %s: status %d", r.Method, r.Path, r.Status)
				}
			}
		})
	}
}

func TestNewConfigErrors(t *testing.T) {
	tests := map[string]struct {
		cfg  ghclient.Config
		want string
	}{
		"no credentials":                 {cfg: ghclient.Config{}, want: "Config.Token: missing GitHub credentials"},
		"both credentials":               {cfg: ghclient.Config{Token: "x", App: &ghclient.AppCredentials{AppID: 1, InstallationID: 1, PrivateKeyPEM: []byte("k")}}, want: "Config.Token: conflicting GitHub credentials"},
		"token and file":                 {cfg: ghclient.Config{Token: "x", TokenFile: "/nonexistent"}, want: "Config.TokenFile: set only one"},
		"missing file":                   {cfg: ghclient.Config{TokenFile: "/nonexistent/token"}, want: "Config.TokenFile: token file: stat /nonexistent/token"},
		"plain http":                     {cfg: ghclient.Config{Token: "x", BaseURL: "http://ghe.example.com/api/v3"}, want: "Config.BaseURL: \"http://ghe.example.com/api/v3\": plain http"},
		"user info":                      {cfg: ghclient.Config{Token: "x", BaseURL: "https://bob:hunter2@ghe.example.com/api/v3"}, want: "Config.BaseURL: \"https://ghe.example.com/api/v3\": must not carry user info"},
		"user info, bad URL":             {cfg: ghclient.Config{Token: "x", BaseURL: "https://bob:hunter2@[::1/api/v3"}, want: "Config.BaseURL: \"https://[::1/api/v3\" is not a URL"},
		"negative install":               {cfg: ghclient.Config{App: &ghclient.AppCredentials{AppID: 1, InstallationID: -1, PrivateKeyPEM: []byte("k")}}, want: "Config.App.InstallationID"},
		"mistyped client ID":             {cfg: ghclient.Config{App: &ghclient.AppCredentials{ClientID: "12ab", PrivateKeyPEM: testKeyPEM}}, want: "Config.App.AppID"},
		"URL without host":               {cfg: ghclient.Config{Token: "x", BaseURL: "api.github.com"}, want: "Config.BaseURL"},
		"ftp URL":                        {cfg: ghclient.Config{Token: "x", BaseURL: "ftp://ghe.example.com/api/v3/"}, want: "Config.BaseURL"},
		"unparsable URL":                 {cfg: ghclient.Config{Token: "x", BaseURL: "http://[::1"}, want: "Config.BaseURL"},
		"URL with query":                 {cfg: ghclient.Config{Token: "x", BaseURL: "https://ghe.example.com/api/v3/?x=1"}, want: "Config.BaseURL"},
		"negative TTL":                   {cfg: ghclient.Config{Token: "x", CacheTTL: -time.Second}, want: "Config.CacheTTL"},
		"app without ID":                 {cfg: ghclient.Config{App: &ghclient.AppCredentials{InstallationID: 1, PrivateKeyPEM: []byte("k")}}, want: "Config.App.AppID"},
		"app without key":                {cfg: ghclient.Config{App: &ghclient.AppCredentials{AppID: 1, InstallationID: 1}}, want: "Config.App.PrivateKeyPEM"},
		"app with bad key":               {cfg: ghclient.Config{App: &ghclient.AppCredentials{AppID: 1, InstallationID: 1, PrivateKeyPEM: []byte("not a key")}}, want: "Config.App.PrivateKeyPEM"},
		"valid token":                    {cfg: ghclient.Config{Token: "x"}},
		"valid http allowed":             {cfg: ghclient.Config{Token: "x", BaseURL: "http://ghe.example.com/api/v3", AllowHTTP: true}},
		"valid app without installation": {cfg: ghclient.Config{App: &ghclient.AppCredentials{AppID: 1, PrivateKeyPEM: testKeyPEM}}},
		"valid client ID":                {cfg: ghclient.Config{App: &ghclient.AppCredentials{ClientID: "Iv23liABC", InstallationID: 3, PrivateKeyPEM: testKeyPEM}}},
		"valid GHES":                     {cfg: ghclient.Config{Token: "x", BaseURL: "https://ghe.example.com/api/v3"}},
		"valid default TTL":              {cfg: ghclient.Config{Token: "x", CacheTTL: 0}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := ghclient.New(tc.cfg)
			if tc.want == "" {
				if err != nil || c == nil {
					t.Fatalf("New = %v, %v; want a client", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New error = %v, want one containing %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("New error %q echoes the URL's password", err)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	for _, c := range e.metrics.Collectors() {
		reg.MustRegister(c)
	}
	id := addBusy(e.fake, org, "r1")
	ctx := context.Background()
	_, _ = e.client.Unregister(ctx, org, "r1", trusted(id))   // 422
	_, _ = e.client.Unregister(ctx, org, "r1", trusted(id))   // 422
	_, _ = e.client.Status(ctx, org, "r1")                    // 200
	_, _ = e.client.Unregister(ctx, org, "gone", trusted(99)) // 404, then list 200
	e.srv.Close()
	_, _ = e.client.Unregister(ctx, org, "r1", trusted(id)) // transport error

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	counts := map[string]float64{}
	for _, m := range byName["runner_guard_github_requests_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		counts[labels["method"]+" "+labels["code"]] = m.GetCounter().GetValue()
	}
	want := map[string]float64{"DELETE 422": 2, "GET 200": 2, "DELETE 404": 1, "DELETE error": 1}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("requests_total = %v, want %v", counts, want)
	}
	if g := byName["runner_guard_github_rate_limit_remaining"].GetMetric()[0].GetGauge().GetValue(); g != 4995 {
		t.Errorf("rate_limit_remaining = %v, want 4995", g)
	}
	var observed uint64
	for _, m := range byName["runner_guard_github_request_duration_seconds"].GetMetric() {
		observed += m.GetHistogram().GetSampleCount()
	}
	if observed != 6 {
		t.Errorf("duration samples = %d, want 6", observed)
	}
}

// A limit GitHub names no wait for holds every request of the credential for
// at least a minute (GITHUB-API.md: "else wait at least a minute"): the next
// unregister, of another runner, is not sent.
func TestLimitWithoutWaitHoldsTheCredential(t *testing.T) {
	tests := map[string]ghfake.Fault{
		"secondary limit, no headers at all": {Kind: ghfake.FaultSecondaryRateLimit, Status: 403, NoRateHeaders: true, Times: 1},
		"bare 403 on github.com":             {Kind: ghfake.FaultStatus, Status: 403, NoRateHeaders: true, Times: 1},
		"bare 429":                           {Kind: ghfake.FaultStatus, Status: 429, NoRateHeaders: true, Times: 1},
	}
	for name, fault := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			first, second := e.fake.AddRunner(org, "r1"), e.fake.AddRunner(org, "r2")
			e.fake.InjectFault(fault)
			_, err := e.client.Unregister(context.Background(), org, "r1", trusted(first))
			wantRateLimited(false, time.Minute)(t, err)

			_, err = e.client.Unregister(context.Background(), org, "r2", trusted(second))
			var spent *ghclient.Spent
			if !errors.As(err, &spent) || !spent.GitHub || spent.RetryAfter < 59*time.Second {
				t.Fatalf("second unregister: %v; want it held by GitHub's limit for about a minute", err)
			}
			assertCalls(t, e.fake, []string{"DELETE " + orgRunners + "/1001"})
			if _, ok := e.fake.Runner(org, "r2"); !ok {
				t.Fatal("r2 was removed while the credential was limited")
			}
		})
	}
}
