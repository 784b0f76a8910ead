package ghfake_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
)

// GitHub answers 404 for an owner, repository or enterprise it does not have
// (GITHUB-API.md), to a list, a get, a remove and a registration alike; a
// fake that answered 200 with no runners would hide every client that
// spends its budget on a missing scope.
func TestStrictUnknownScopeIs404(t *testing.T) {
	f, srv := serve(t, ghfake.WithToken("tok"))
	id := f.AddRunner(org, "r1")
	f.AddScope(bigcorp)
	runner := "/" + strconv.FormatInt(id, 10)
	tests := map[string]struct {
		method, path string
		want         int
	}{
		"list, org with a runner":       {http.MethodGet, "/orgs/acme/actions/runners", 200},
		"list, owner case-insensitive":  {http.MethodGet, "/orgs/ACME/actions/runners", 200},
		"list, enterprise AddScope":     {http.MethodGet, "/enterprises/bigcorp/actions/runners", 200},
		"list, unknown org":             {http.MethodGet, "/orgs/nobody/actions/runners", 404},
		"list, unknown repo":            {http.MethodGet, "/repos/acme/does-not-exist/actions/runners", 404},
		"list, unknown enterprise":      {http.MethodGet, "/enterprises/nobody/actions/runners", 404},
		"get, unknown repo":             {http.MethodGet, "/repos/acme/does-not-exist/actions/runners" + runner, 404},
		"remove, unknown org":           {http.MethodDelete, "/orgs/nobody/actions/runners" + runner, 404},
		"register, unknown repo":        {http.MethodPost, "/repos/acme/nope/actions/runners/generate-jitconfig", 404},
		"GHES prefix, unknown org":      {http.MethodGet, "/api/v3/orgs/nobody/actions/runners", 404},
		"list, repo of a held org":      {http.MethodGet, "/repos/acme/app/actions/runners", 404},
		"list, org of a held repo name": {http.MethodGet, "/orgs/app/actions/runners", 404},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := do(t, tc.method, srv.URL+tc.path, bearer("tok"))
			if a.status != tc.want {
				t.Errorf("%s %s: %d, want %d: %s", tc.method, tc.path, a.status, tc.want, a.body)
			}
			if tc.want == 404 && a.body != `{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}` {
				t.Errorf("404 body %s", a.body)
			}
		})
	}

	// A deleted (or renamed) repository answers 404 from then on.
	f.AddRunner(repo, "r2")
	if a := do(t, http.MethodGet, srv.URL+"/repos/acme/app/actions/runners", bearer("tok")); a.status != 200 {
		t.Fatalf("repo with a runner: %d", a.status)
	}
	if !f.RemoveScope(repo) {
		t.Fatal("RemoveScope: not held")
	}
	if a := do(t, http.MethodGet, srv.URL+"/repos/acme/app/actions/runners", bearer("tok")); a.status != 404 {
		t.Errorf("removed repo: %d, want 404", a.status)
	}
	if f.RemoveScope(repo) {
		t.Error("RemoveScope twice: held")
	}
}

// Authentication is on by default: no credential, or one the fake was never
// given, is 401 Bad credentials; each token AddToken gives is accepted.
func TestStrictAuthIsOnByDefault(t *testing.T) {
	f := ghfake.New(ghfake.WithScopes(org))
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	u := srv.URL + "/orgs/acme/actions/runners"
	if a := do(t, http.MethodGet, u, nil); a.status != 401 || a.body != `{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}` {
		t.Errorf("no credential and no token set: %d %s, want 401 Bad credentials", a.status, a.body)
	}
	if a := do(t, http.MethodGet, u, bearer("any")); a.status != 401 {
		t.Errorf("a token nobody gave: %d, want 401", a.status)
	}
	f.SetToken("first")
	f.AddToken("second")
	for _, tok := range []string{"first", "second"} {
		if a := do(t, http.MethodGet, u, bearer(tok)); a.status != 200 {
			t.Errorf("token %s: %d, want 200", tok, a.status)
		}
	}
	if a := do(t, http.MethodGet, u, bearer("third")); a.status != 401 {
		t.Errorf("unknown token beside known ones: %d, want 401", a.status)
	}
	f.SetToken("")
	if a := do(t, http.MethodGet, u, bearer("first")); a.status != 401 {
		t.Errorf("token replaced by none: %d, want 401", a.status)
	}
	if a := do(t, http.MethodGet, u, bearer("second")); a.status != 200 {
		t.Errorf("AddToken's after SetToken(\"\"): %d, want 200", a.status)
	}
}

// Without a registered App no JWT is taken, a JWT must be signed by the App
// it names, and an installation no App has mints no token (404).
func TestStrictAppAuth(t *testing.T) {
	f, srv := serve(t, ghfake.WithScopes(org, repo))
	key := newKey(t)
	jwt := appJWT(t, key)
	if a := installToken(t, srv.URL, jwt, 7); a.status != 401 {
		t.Errorf("JWT with no App registered: %d, want 401: %s", a.status, a.body)
	}
	if a := do(t, http.MethodGet, srv.URL+"/orgs/acme/installation", bearer(jwt)); a.status != 401 {
		t.Errorf("installation look-up with no App registered: %d, want 401", a.status)
	}
	f.AddApp(appID, &newKey(t).PublicKey)
	if a := installToken(t, srv.URL, jwt, 7); a.status != 401 {
		t.Errorf("JWT signed by another key: %d, want 401", a.status)
	}
	f.AddApp(appID, &key.PublicKey)
	if a := installToken(t, srv.URL, jwt, 7); a.status != 404 {
		t.Errorf("unknown installation of an App with none: %d, want 404: %s", a.status, a.body)
	}
	orphan := f.AddInstallation(appID+1, "acme") // its App is not registered
	if a := installToken(t, srv.URL, jwt, orphan); a.status != 404 {
		t.Errorf("installation of another App: %d, want 404", a.status)
	}
	inst := f.AddInstallation(appID, "acme")
	if a := installToken(t, srv.URL, jwt, inst); a.status != 201 {
		t.Errorf("own installation: %d, want 201", a.status)
	}
	for path, want := range map[string]int{
		"/orgs/acme/installation":                 200,
		"/repos/acme/app/installation":            200,
		"/repos/acme/does-not-exist/installation": 404,
		"/orgs/beta/installation":                 404,
	} {
		if a := do(t, http.MethodGet, srv.URL+path, bearer(jwt)); a.status != want {
			t.Errorf("GET %s: %d, want %d", path, a.status, want)
		}
	}
}

// Each token, each installation and the App's JWT has its own primary limit
// and its own headers; one running out does not touch another.
func TestStrictPrimaryLimitPerCredential(t *testing.T) {
	f, srv := serve(t, ghfake.WithToken("a"), ghfake.WithScopes(org, repo))
	f.AddToken("b")
	key := newKey(t)
	f.AddApp(appID, &key.PublicKey)
	inst := f.AddInstallation(appID, "acme")
	f.SetRateLimit(3, 3, time.Time{})
	jwt := appJWT(t, key)
	instTok := tokenOf(t, installToken(t, srv.URL, jwt, inst)) // the App JWT's 1st
	u := srv.URL + "/orgs/acme/actions/runners"

	remaining := func(tok string) (int, string) {
		t.Helper()
		a := do(t, http.MethodGet, u, bearer(tok))
		return a.status, a.header.Get("X-RateLimit-Remaining")
	}
	for i, want := range []string{"2", "1", "0"} {
		if status, rem := remaining("a"); status != 200 || rem != want {
			t.Fatalf("token a request %d: %d remaining %q, want 200 %q", i, status, rem, want)
		}
	}
	if status, rem := remaining("a"); status != 403 || rem != "0" {
		t.Errorf("token a spent: %d remaining %q, want 403 0", status, rem)
	}
	if status, rem := remaining("b"); status != 200 || rem != "2" {
		t.Errorf("token b beside spent a: %d remaining %q, want 200 2", status, rem)
	}
	if status, rem := remaining(instTok); status != 200 || rem != "2" {
		t.Errorf("installation beside spent a: %d remaining %q, want 200 2", status, rem)
	}
	// A second token of the same installation shares its limit.
	if a := installToken(t, srv.URL, jwt, inst); a.status != 201 || a.header.Get("X-RateLimit-Remaining") != "1" {
		t.Errorf("App JWT's 2nd request: %d remaining %q, want 201 1", a.status, a.header.Get("X-RateLimit-Remaining"))
	} else if status, rem := remaining(tokenOf(t, a)); status != 200 || rem != "1" {
		t.Errorf("installation's other token: %d remaining %q, want 200 1", status, rem)
	}
	got := f.PrimaryRateLimit(ghfake.TokenCredential("a"))
	if got.Limit != 3 || got.Remaining != 0 {
		t.Errorf("PrimaryRateLimit(a) = %+v, want 3 limit 0 remaining", got)
	}
	if got := f.PrimaryRateLimit(ghfake.InstallationCredential(inst)); got.Remaining != 1 {
		t.Errorf("PrimaryRateLimit(installation) = %+v, want 1 remaining", got)
	}
	f.SetCredentialRateLimit(ghfake.TokenCredential("a"), 10, 10, time.Time{})
	if status, rem := remaining("a"); status != 200 || rem != "9" {
		t.Errorf("token a after SetCredentialRateLimit: %d remaining %q, want 200 9", status, rem)
	}
	if a := do(t, http.MethodGet, u, bearer("nobody")); a.status != 401 {
		t.Errorf("unknown token: %d, want 401", a.status)
	}
}

// The listing may lag a registration and a removal (GitHub's does): a new
// runner shows only after the delay, a removed one until it has passed.
func TestListingDelay(t *testing.T) {
	f, srv := serve(t, ghfake.WithAuthOff(), ghfake.WithListingDelay(2*time.Second))
	clock := fakeclock.New(time.Now())
	f.SetClock(clock.Now)
	list := func() []string {
		t.Helper()
		var body listBody
		a := do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners", nil)
		if err := json.Unmarshal([]byte(a.body), &body); err != nil {
			t.Fatalf("list %d %s: %v", a.status, a.body, err)
		}
		var names []string
		for _, r := range body.Runners {
			names = append(names, r.Name)
		}
		return names
	}
	id := f.AddRunner(org, "r1")
	if got := list(); len(got) != 0 {
		t.Errorf("right after registration: listed %v, want none", got)
	}
	if _, ok := f.Runner(org, "r1"); !ok {
		t.Error("Runner does not show the truth")
	}
	clock.Advance(2 * time.Second)
	if got := list(); len(got) != 1 || got[0] != "r1" {
		t.Errorf("after the delay: listed %v, want [r1]", got)
	}
	del := srv.URL + "/orgs/acme/actions/runners/" + strconv.FormatInt(id, 10)
	if a := do(t, http.MethodDelete, del, nil); a.status != 204 {
		t.Fatalf("DELETE: %d", a.status)
	}
	if got := list(); len(got) != 1 {
		t.Errorf("right after DELETE: listed %v, want [r1] still", got)
	}
	if a := do(t, http.MethodDelete, del, nil); a.status != 404 {
		t.Errorf("DELETE again while still listed: %d, want 404", a.status)
	}
	clock.Advance(2 * time.Second)
	if got := list(); len(got) != 0 {
		t.Errorf("after the delay: listed %v, want none", got)
	}

	f.SetListingDelay(0)
	f.AddRunner(org, "r2")
	if got := list(); len(got) != 1 || got[0] != "r2" {
		t.Errorf("delay 0: listed %v, want [r2] at once", got)
	}
}

// Lenient is the old fake, for tests that ask for it: every scope exists
// and no credential is needed.
func TestLenient(t *testing.T) {
	f := ghfake.New(ghfake.Lenient())
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	if a := do(t, http.MethodGet, srv.URL+"/repos/any/thing/actions/runners", nil); a.status != 200 || a.body != `{"total_count":0,"runners":[]}` {
		t.Errorf("lenient unknown repo: %d %s", a.status, a.body)
	}
	f.SetLeniency(ghfake.Leniency{})
	if a := do(t, http.MethodGet, srv.URL+"/repos/any/thing/actions/runners", nil); a.status != 401 {
		t.Errorf("strict again: %d, want 401", a.status)
	}
	f.SetLeniency(ghfake.Leniency{AuthOff: true})
	if a := do(t, http.MethodGet, srv.URL+"/repos/any/thing/actions/runners", nil); a.status != 404 {
		t.Errorf("auth off, scopes strict: %d, want 404", a.status)
	}
}

// The remote control reaches the strictness knobs.
func TestRemoteStrictnessControls(t *testing.T) {
	f, srv := serve(t, ghfake.WithToken("tok"))
	ctx := t.Context()
	g := &ghfake.Remote{BaseURL: srv.URL}
	missing, _ := ghclient.RepoScope("acme/missing")
	u := srv.URL + "/repos/acme/missing/actions/runners"
	if a := do(t, http.MethodGet, u, bearer("tok")); a.status != 404 {
		t.Fatalf("before AddScope: %d", a.status)
	}
	if err := g.AddScope(ctx, missing); err != nil {
		t.Fatal(err)
	}
	if err := g.AddToken(ctx, "tok2"); err != nil {
		t.Fatal(err)
	}
	if a := do(t, http.MethodGet, u, bearer("tok2")); a.status != 200 {
		t.Errorf("after AddScope and AddToken: %d", a.status)
	}
	if err := g.RemoveScope(ctx, missing); err != nil {
		t.Fatal(err)
	}
	if err := g.RemoveScope(ctx, missing); !ghfake.IsNotFound(err) {
		t.Errorf("RemoveScope twice: %v, want not found", err)
	}
	if err := g.SetLeniency(ctx, ghfake.Leniency{AnyScope: true}); err != nil {
		t.Fatal(err)
	}
	if a := do(t, http.MethodGet, u, bearer("tok")); a.status != 200 {
		t.Errorf("any scope: %d", a.status)
	}
	if err := g.SetListingDelay(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.SetListingDelay(ctx, -time.Second); err == nil {
		t.Error("negative listing delay accepted")
	}
	if err := g.SetRateLimit(ctx, ghfake.RateLimitRequest{Credential: ghfake.TokenCredential("tok"), Limit: 5, Remaining: 0}); err != nil {
		t.Fatal(err)
	}
	if a := do(t, http.MethodGet, u, bearer("tok")); a.status != 403 {
		t.Errorf("tok spent: %d, want 403", a.status)
	}
	if a := do(t, http.MethodGet, u, bearer("tok2")); a.status != 200 {
		t.Errorf("tok2 beside spent tok: %d, want 200", a.status)
	}
	if err := g.AddInstallationWithID(ctx, 7, appID, "beta"); err != nil {
		t.Fatal(err)
	}
	if got := f.Installations(); len(got) != 1 || got[0].ID != 7 || got[0].AppID != appID {
		t.Errorf("installations %+v, want ID 7 of App %d", got, appID)
	}
}
