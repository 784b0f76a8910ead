package ghclient_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

// rejectedHints reads runner_guard_github_id_hints_rejected_total by reason.
func rejectedHints(t *testing.T, m *ghclient.Metrics) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range m.Collectors() {
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "runner_guard_github_id_hints_rejected_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] = mt.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// An untrusted ID (a pod annotation a tenant can write) is used only once
// GitHub's record for it carries the runner's name; else it is ignored and the
// runner is found by name, so a copied ID cannot remove another runner. The
// record is a listing of the scope that holds the ID (taken then when that
// costs no more than a GET: one page, shared by every decision), else the
// GET of the ID.
func TestUnregisterIDHintTrust(t *testing.T) {
	type rejected = map[string]float64
	noneRejected := rejected{"not_found": 0, "other_runner": 0}
	page1 := func(path string) string { return "GET " + path + "?page=1&per_page=100" }
	// byIDOnly makes a fault apply to the GET of a runner by ID, not to
	// the listing.
	byIDOnly := func(f ghfake.Fault) ghfake.Fault {
		f.Method, f.PathContains = "GET", "/actions/runners/"
		return f
	}
	// hintNamesVictim: r1's untrusted hint is the ID of another runner,
	// victim, busy or not; victim stays and r1 (1002) is removed by the ID
	// the same listing gives its name.
	hintNamesVictim := func(victimBusy bool) unregisterCase {
		return unregisterCase{
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				victim := f.AddRunner(org, "victim")
				if victimBusy {
					f.SetBusy(org, "victim", true)
				}
				f.AddRunner(org, "r1")
				return untrusted(victim)
			},
			want:         ghclient.Removed,
			wantCalls:    []string{page1(orgRunners), "DELETE " + orgRunners + "/1002"},
			wantGone:     true,
			wantKept:     []string{"victim"},
			wantRejected: rejected{"not_found": 0, "other_runner": 1},
		}
	}
	// listedIn: in scope, whose runners are at path, r1's own untrusted
	// hint is verified by the scope's listing and then used.
	listedIn := func(scope ghclient.Scope, path string) unregisterCase {
		return unregisterCase{
			scope:     scope,
			setup:     func(f *ghfake.Fake) ghclient.IDHint { return untrusted(f.AddRunner(scope, "r1")) },
			want:      ghclient.Removed,
			wantCalls: []string{page1(path), "DELETE " + path + "/1001"},
			wantGone:  true,
		}
	}
	runUnregister(t, map[string]unregisterCase{
		"trusted hint: one DELETE": {
			setup:        func(f *ghfake.Fake) ghclient.IDHint { return trusted(f.AddRunner(org, "r1")) },
			want:         ghclient.Removed,
			wantCalls:    []string{"DELETE " + orgRunners + "/1001"},
			wantGone:     true,
			wantRejected: noneRejected,
		},
		"trusted hint naming another runner is used as given": {
			// Trust is the caller's promise; this pins that nothing checks it.
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.AddRunner(org, "r1")
				return trusted(f.AddRunner(org, "other"))
			},
			want:         ghclient.Removed,
			wantCalls:    []string{"DELETE " + orgRunners + "/1002"},
			wantRejected: noneRejected,
		},
		"untrusted hint the listing gives the runner: listing, then DELETE": {
			setup:        func(f *ghfake.Fake) ghclient.IDHint { return untrusted(f.AddRunner(org, "r1")) },
			want:         ghclient.Removed,
			wantCalls:    []string{page1(orgRunners), "DELETE " + orgRunners + "/1001"},
			wantGone:     true,
			wantRejected: noneRejected,
		},
		"untrusted hint naming another runner: that runner stays, r1 removed": hintNamesVictim(false),
		"untrusted hint naming a busy other runner: no DELETE of it":          hintNamesVictim(true),
		"untrusted hint naming another runner, r1 not listed: looked up by name, nothing removed": {
			setup:        func(f *ghfake.Fake) ghclient.IDHint { return untrusted(f.AddRunner(org, "victim")) },
			want:         ghclient.NotFound,
			wantCalls:    []string{page1(orgRunners), listCall(orgRunners, "r1")},
			wantKept:     []string{"victim"},
			wantRejected: rejected{"not_found": 0, "other_runner": 1},
		},
		"untrusted hint of a runner in another scope: not in the listing, 404": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				victim := f.AddRunner(repo, "r1") // same name, other scope
				f.AddRunner(org, "r1")
				return untrusted(victim)
			},
			want:         ghclient.Removed,
			wantCalls:    []string{page1(orgRunners), "GET " + orgRunners + "/1001", "DELETE " + orgRunners + "/1002"},
			wantGone:     true,
			wantKept:     []string{"r1"},
			keptScope:    repo,
			wantRejected: rejected{"not_found": 1, "other_runner": 0},
		},
		"untrusted hint unknown: not in the listing, 404, name look-up finds nothing": {
			setup:        func(*ghfake.Fake) ghclient.IDHint { return untrusted(99) },
			want:         ghclient.NotFound,
			wantCalls:    []string{page1(orgRunners), "GET " + orgRunners + "/99", listCall(orgRunners, "r1")},
			wantRejected: rejected{"not_found": 1, "other_runner": 0},
		},
		"untrusted hint on a busy runner: listing, then 422": {
			setup:        func(f *ghfake.Fake) ghclient.IDHint { return untrusted(addBusy(f, org, "r1")) },
			want:         ghclient.Busy,
			wantCalls:    []string{page1(orgRunners), "DELETE " + orgRunners + "/1001"},
			wantRejected: noneRejected,
		},
		"negative untrusted hint: as no hint": {
			setup:        func(f *ghfake.Fake) ghclient.IDHint { f.AddRunner(org, "r1"); return untrusted(-1) },
			want:         ghclient.Removed,
			wantCalls:    []string{listCall(orgRunners, "r1"), "DELETE " + orgRunners + "/1001"},
			wantGone:     true,
			wantRejected: noneRejected,
		},
		"repo scope":       listedIn(repo, repoRunners),
		"enterprise scope": listedIn(ent, entRunners),
		"GHES under /api/v3": {
			base: "http://ghe.example.com/api/v3/",
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.SetStyle(ghfake.StyleGHES)
				victim := f.AddRunner(org, "victim")
				f.AddRunner(org, "r1")
				return untrusted(victim)
			},
			want:         ghclient.Removed,
			wantCalls:    []string{page1("/api/v3" + orgRunners), "DELETE /api/v3" + orgRunners + "/1002"},
			wantGone:     true,
			wantKept:     []string{"victim"},
			wantRejected: rejected{"not_found": 0, "other_runner": 1},
		},
		"the listing fails: the GET of the ID decides": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 500, Method: "GET", Times: 1})
				return untrusted(f.AddRunner(org, "r1"))
			},
			want:         ghclient.Removed,
			wantCalls:    []string{page1(orgRunners), "GET " + orgRunners + "/1001", "DELETE " + orgRunners + "/1001"},
			wantGone:     true,
			wantRejected: noneRejected,
		},
		"500 on every GET: wrapped error, no DELETE": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 500, Method: "GET"})
				return untrusted(f.AddRunner(org, "r1"))
			},
			checkErr:  wantErrContaining(`verify runner "r1" (id 1001) in org "acme"`, "GET", ": 500"),
			wantCalls: []string{page1(orgRunners), "GET " + orgRunners + "/1001"},
			wantKept:  []string{"r1"},
		},
		"secondary rate limit on the listing: *RateLimited, nothing more sent": {
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 429, RetryAfterSeconds: 30, Method: "GET"})
				return untrusted(f.AddRunner(org, "r1"))
			},
			checkErr:     wantRateLimited(false, 30*time.Second),
			wantCalls:    []string{page1(orgRunners)},
			wantKept:     []string{"r1"},
			wantRejected: noneRejected,
		},

		// A scope of more than one page whose listing is stale and does not hold
		// the ID: one GET.
		"large scope, untrusted hint whose record names the runner: GET, then DELETE": {
			staleLargeListing: true,
			setup:             func(f *ghfake.Fake) ghclient.IDHint { return untrusted(f.AddRunner(org, "r1")) },
			want:              ghclient.Removed,
			wantCalls:         []string{"GET " + orgRunners + "/1121", "DELETE " + orgRunners + "/1121"},
			wantGone:          true,
			wantRejected:      noneRejected,
		},
		"large scope, untrusted hint naming another runner: GET, name look-up": {
			staleLargeListing: true,
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				victim := f.AddRunner(org, "victim")
				f.AddRunner(org, "r1")
				return untrusted(victim)
			},
			want:         ghclient.Removed,
			wantCalls:    []string{"GET " + orgRunners + "/1121", listCall(orgRunners, "r1"), "DELETE " + orgRunners + "/1122"},
			wantGone:     true,
			wantKept:     []string{"victim"},
			wantRejected: rejected{"not_found": 0, "other_runner": 1},
		},
		"large scope, untrusted hint unknown: 404, name look-up finds nothing": {
			staleLargeListing: true,
			setup:             func(*ghfake.Fake) ghclient.IDHint { return untrusted(99) },
			want:              ghclient.NotFound,
			wantCalls:         []string{"GET " + orgRunners + "/99", listCall(orgRunners, "r1")},
			wantRejected:      rejected{"not_found": 1, "other_runner": 0},
		},
		"large scope, secondary rate limit on the GET: *RateLimited, nothing removed": {
			staleLargeListing: true,
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(byIDOnly(ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 429, RetryAfterSeconds: 30}))
				return untrusted(f.AddRunner(org, "r1"))
			},
			checkErr:     wantRateLimited(false, 30*time.Second),
			wantCalls:    []string{"GET " + orgRunners + "/1121"},
			wantKept:     []string{"r1"},
			wantRejected: noneRejected,
		},
		"large scope, primary rate limit on the GET: *RateLimited": {
			staleLargeListing: true,
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(byIDOnly(ghfake.Fault{Kind: ghfake.FaultPrimaryRateLimit, ResetAfterSeconds: 120}))
				return untrusted(f.AddRunner(org, "r1"))
			},
			checkErr:  wantRateLimited(true, 120*time.Second),
			wantCalls: []string{"GET " + orgRunners + "/1121"},
			wantKept:  []string{"r1"},
		},
		"large scope, 500 on the GET: wrapped error, nothing removed": {
			staleLargeListing: true,
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(byIDOnly(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 500}))
				return untrusted(f.AddRunner(org, "r1"))
			},
			checkErr:  wantErrContaining(`verify runner "r1" (id 1121) in org "acme"`, "GET", ": 500"),
			wantCalls: []string{"GET " + orgRunners + "/1121"},
			wantKept:  []string{"r1"},
		},
		"large scope, malformed JSON on the GET: error naming the status": {
			staleLargeListing: true,
			setup: func(f *ghfake.Fake) ghclient.IDHint {
				f.InjectFault(byIDOnly(ghfake.Fault{Kind: ghfake.FaultMalformedJSON}))
				return untrusted(f.AddRunner(org, "r1"))
			},
			checkErr:  wantErrContaining(`verify runner "r1" (id 1121) in org "acme"`, "HTTP 200"),
			wantCalls: []string{"GET " + orgRunners + "/1121"},
			wantKept:  []string{"r1"},
		},
		"large scope, a filler's ID for r1: the stale listing rejects it, no GET": {
			staleLargeListing: true,
			setup:             func(*ghfake.Fake) ghclient.IDHint { return untrusted(1001) }, // filler-000
			want:              ghclient.NotFound,
			wantCalls:         []string{listCall(orgRunners, "r1")},
			wantRejected:      rejected{"not_found": 0, "other_runner": 1},
		},
	})
}

// A verified (scope, name, ID) is cached: verifying it again costs nothing,
// and neither does one a fresh listing answers. The cache filled by a name
// look-up verifies a hint too.
func TestUnregisterUntrustedHintCached(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := addBusy(e.fake, org, "r1")
	id2 := e.fake.AddRunner(org, "r2")
	victim := e.fake.AddRunner(org, "victim")

	steps := []struct {
		name      string
		before    func()
		runner    string
		hint      ghclient.IDHint
		want      ghclient.Outcome
		wantCalls []string
	}{
		{
			name:   "first verification: the scope's listing, then DELETE (busy)",
			runner: "r1", hint: untrusted(id), want: ghclient.Busy,
			wantCalls: []string{"GET " + orgRunners + "?page=1&per_page=100", fmt.Sprintf("DELETE %s/%d", orgRunners, id)},
		},
		{
			name:   "same runner and ID again: from the cache, no request",
			runner: "r1", hint: untrusted(id), want: ghclient.Busy,
			wantCalls: []string{fmt.Sprintf("DELETE %s/%d", orgRunners, id)},
		},
		{
			name:   "a cached ID does not verify another ID for the name: the listing rejects it",
			runner: "r1", hint: untrusted(victim), want: ghclient.Busy,
			wantCalls: []string{fmt.Sprintf("DELETE %s/%d", orgRunners, id)},
		},
		{
			name:   "idle now: removed from the cached ID",
			before: func() { e.fake.SetBusy(org, "r1", false) },
			runner: "r1", hint: untrusted(id), want: ghclient.Removed,
			wantCalls: []string{fmt.Sprintf("DELETE %s/%d", orgRunners, id)},
		},
		{
			name: "cache filled by a name look-up verifies the hint",
			before: func() {
				if _, err := e.client.Status(ctx, org, "r2"); err != nil {
					t.Fatal(err)
				}
			},
			runner: "r2", hint: untrusted(id2), want: ghclient.Removed,
			wantCalls: []string{fmt.Sprintf("DELETE %s/%d", orgRunners, id2)},
		},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		e.fake.ResetLog()
		got, err := e.client.Unregister(ctx, org, s.runner, s.hint)
		if err != nil || got != s.want {
			t.Fatalf("%s: Unregister = %v, %v; want %v", s.name, got, err, s.want)
		}
		if c := calls(e.fake); fmt.Sprint(c) != fmt.Sprint(s.wantCalls) {
			t.Errorf("%s: requests\n got %q\nwant %q", s.name, c, s.wantCalls)
		}
	}
	if _, ok := e.fake.Runner(org, "victim"); !ok {
		t.Error("victim runner was removed")
	}
}

// A burst of decisions in one scope, each with an untrusted ID (a drain of
// legacy runner pods), verifies every ID with one shared listing, not a GET
// each: one request more than the DELETEs.
func TestUntrustedHintsOfABurstShareOneListing(t *testing.T) {
	e := newEnv(t)
	const n = 60
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = e.fake.AddRunner(org, fmt.Sprintf("r-%02d", i))
	}
	victim := e.fake.AddRunner(org, "victim")
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range ids {
		wg.Go(func() {
			hint := untrusted(ids[i])
			if i == 0 {
				hint = untrusted(victim) // one forged ID among them
			}
			out, err := e.client.Unregister(context.Background(), org, fmt.Sprintf("r-%02d", i), hint)
			if err == nil && out != ghclient.Removed {
				err = fmt.Errorf("outcome %v", out)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Unregister r-%02d: %v", i, err)
		}
	}
	if got := e.fake.Count("GET"); got != 1 {
		t.Errorf("GETs = %d, want 1 (one listing for the whole burst); requests %q", got, calls(e.fake))
	}
	if got := e.fake.Count("DELETE"); got != n {
		t.Errorf("DELETEs = %d, want %d", got, n)
	}
	if _, ok := e.fake.Runner(org, "victim"); !ok {
		t.Error("the runner a forged ID named was removed")
	}
}

// GitHub never reuses a runner ID, so a listing past ListingTTL still says
// who an ID it holds is: verifying it costs nothing.
func TestUntrustedHintVerifiedByAStaleListing(t *testing.T) {
	var clock atomic.Int64
	start := time.Now().Add(-time.Minute)
	e := newEnv(t, func(c *ghclient.Config) {
		c.Now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
	})
	ctx := context.Background()
	ids := map[string]int64{}
	for i := range 150 { // two pages: a new listing would cost more than a GET
		n := fmt.Sprintf("r-%03d", i)
		ids[n] = e.fake.AddRunner(org, n)
	}
	if _, err := e.client.Listed(ctx, org, "r-000", ghclient.RefreshStale); err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(time.Minute))
	e.fake.ResetLog()

	out, err := e.client.Unregister(ctx, org, "r-140", untrusted(ids["r-140"]))

	if err != nil || out != ghclient.Removed {
		t.Fatalf("Unregister = %v, %v; want removed", out, err)
	}
	assertCalls(t, e.fake, []string{fmt.Sprintf("DELETE %s/%d", orgRunners, ids["r-140"])})
}

// A listing that does not come in time is not waited for past half the
// decision's time: the GET of the ID decides, and the DELETE still fits.
func TestUntrustedHintDoesNotWaitOutASlowListing(t *testing.T) {
	e := newEnv(t)
	id := e.fake.AddRunner(org, "r1")
	e.fake.InjectFault(ghfake.Fault{Kind: ghfake.FaultHang, Delay: 3 * time.Second, Method: "GET", Times: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	out, err := e.client.Unregister(ctx, org, "r1", untrusted(id))

	if err != nil || out != ghclient.Removed {
		t.Fatalf("Unregister = %v, %v; want removed within the deadline", out, err)
	}
	if got := e.fake.Count("DELETE"); got != 1 {
		t.Errorf("DELETEs = %d, want 1; requests %q", got, calls(e.fake))
	}
	if got := e.fake.CountMatching(ghfake.RequestMatch{Op: ghfake.OpGet, RunnerID: id}); got != 1 {
		t.Errorf("GETs of the ID = %d, want 1; requests %q", got, calls(e.fake))
	}
}

// A listing that failed is not taken again for ListingTTL to check IDs: a
// failing or slow GitHub is asked one GET per ID, not a listing each.
func TestUntrustedHintAfterAFailedListing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id1, id2 := e.fake.AddRunner(org, "r1"), e.fake.AddRunner(org, "r2")
	e.fake.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 502, Method: "GET", Times: 1})
	if out, err := e.client.Unregister(ctx, org, "r1", untrusted(id1)); err != nil || out != ghclient.Removed {
		t.Fatalf("first Unregister = %v, %v", out, err)
	}
	e.fake.ResetLog()

	wantVerifiedByGET(t, e, "r2", id2)
}

// wantVerifiedByGET unregisters runner name of org with its own ID as an
// untrusted hint, and wants it removed after a GET of the ID and the DELETE.
func wantVerifiedByGET(t *testing.T, e *env, name string, id int64) {
	t.Helper()
	out, err := e.client.Unregister(context.Background(), org, name, untrusted(id))
	if err != nil || out != ghclient.Removed {
		t.Fatalf("Unregister = %v, %v; want removed", out, err)
	}
	assertCalls(t, e.fake, []string{fmt.Sprintf("GET %s/%d", orgRunners, id), fmt.Sprintf("DELETE %s/%d", orgRunners, id)})
}

// When the budget has no room for a re-check, the listing is not taken and
// the hint is verified by a GET at the caller's priority: a release is not
// refused for want of a listing.
func TestUntrustedHintVerifiedByGETWhenTheBudgetRefusesTheListing(t *testing.T) {
	budgets, err := ghclient.NewBudgets(ghclient.BudgetConfig{PointsPerMinute: 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *ghclient.Config) { c.Budgets = budgets })
	ctx := context.Background()
	// Two DELETEs spend half the minute's points: re-checks get no more.
	for _, n := range []string{"a", "b"} {
		if out, err := e.client.Unregister(ctx, org, n, trusted(e.fake.AddRunner(org, n))); err != nil || out != ghclient.Removed {
			t.Fatalf("spending the budget: %v, %v", out, err)
		}
	}
	id := e.fake.AddRunner(org, "r1")
	e.fake.ResetLog()

	wantVerifiedByGET(t, e, "r1", id)
}

// Router.Unregister passes Runner.IDTrusted on, with per-Secret and App clients.
func TestRouterUnregisterIDTrust(t *testing.T) {
	tests := map[string]struct {
		trusted   bool
		app       bool
		wantCalls func(f *ghfake.Fake, victim, r1 int64) []string
	}{
		"trusted ID: DELETE by that ID": {
			trusted: true,
			wantCalls: func(_ *ghfake.Fake, victim, _ int64) []string {
				return []string{fmt.Sprintf("DELETE %s/%d", orgRunners, victim)}
			},
		},
		"untrusted ID naming another runner: the listing rejects it and names r1's": {
			wantCalls: func(_ *ghfake.Fake, _, r1 int64) []string {
				return []string{
					"GET " + orgRunners + "?page=1&per_page=100",
					fmt.Sprintf("DELETE %s/%d", orgRunners, r1),
				}
			},
		},
		"App with discovered installation: the listing uses the installation token": {
			app: true,
			wantCalls: func(f *ghfake.Fake, _, r1 int64) []string {
				return []string{
					"GET /orgs/acme/installation",
					fmt.Sprintf("POST /app/installations/%d/access_tokens", f.Installations()[0].ID),
					"GET " + orgRunners + "?page=1&per_page=100",
					fmt.Sprintf("DELETE %s/%d", orgRunners, r1),
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := appFake(t)
			m := ghclient.NewMetrics()
			r := newRouter(t, srv, func(c *ghclient.RouterConfig) { c.Metrics = m })
			victim := f.AddRunner(org, "victim")
			r1 := f.AddRunner(org, "r1")
			creds := tokenCreds("ns/tok", "1", testToken)
			if tc.app {
				f.AddInstallation(appID, "acme")
				creds = appCreds("ns/app", 0)
			}
			rn := ghclient.Runner{Scope: org, Name: "r1", ID: victim, IDTrusted: tc.trusted, Creds: creds}
			if out, err := r.Unregister(context.Background(), rn); err != nil || out != ghclient.Removed {
				t.Fatalf("Unregister = %v, %v; want removed", out, err)
			}
			assertCalls(t, f, tc.wantCalls(f, victim, r1))
			_, victimKept := f.Runner(org, "victim")
			if victimKept == tc.trusted {
				t.Errorf("victim registered = %v, want %v", victimKept, !tc.trusted)
			}
			wantRejected := 1.0
			if tc.trusted {
				wantRejected = 0
			}
			if got := rejectedHints(t, m)["other_runner"]; got != wantRejected {
				t.Errorf("other_runner rejections = %v, want %v", got, wantRejected)
			}
		})
	}
}
