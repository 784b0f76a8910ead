package ghclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
)

const appID = 42

var beta = mustScope(ghclient.OrgScope("beta"))

// appFake serves a fake GitHub that knows App appID (signed with testKey).
func appFake(t *testing.T) (*ghfake.Fake, *httptest.Server) {
	t.Helper()
	f := ghfake.New()
	f.SetToken(testToken)
	f.AddApp(appID, &testKey.PublicKey)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func newRouter(t *testing.T, srv *httptest.Server, mods ...func(*ghclient.RouterConfig)) *ghclient.Router {
	t.Helper()
	cfg := ghclient.RouterConfig{AllowHTTP: true, Transport: dialTo(srv)}
	for _, mod := range mods {
		mod(&cfg)
	}
	r, err := ghclient.NewRouter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func tokenCreds(key, version, token string) *ghclient.Credentials {
	return &ghclient.Credentials{Key: key, Version: version, BaseURL: "http://api.github.com/", Token: token}
}

func appCreds(key string, install int64) *ghclient.Credentials {
	return &ghclient.Credentials{Key: key, Version: "1", BaseURL: "http://api.github.com/", AppID: fmt.Sprint(appID), InstallationID: install, PrivateKey: testKeyPEM}
}

func TestRouterPerSecretClients(t *testing.T) {
	f, srv := appFake(t)
	r := newRouter(t, srv)
	ctx := context.Background()
	f.AddRunner(org, "r1")
	f.AddRunner(org, "r2")

	good := ghclient.Runner{Scope: org, Name: "r1", Creds: tokenCreds("ns/good", "1", testToken)}
	if out, err := r.Unregister(ctx, good); err != nil || out != ghclient.Removed {
		t.Fatalf("good Secret: %v, %v", out, err)
	}
	// Another Secret's client uses that Secret's token, not the first one's.
	bad := ghclient.Runner{Scope: org, Name: "r2", Creds: tokenCreds("ns/bad", "1", "stale")}
	if _, err := r.Status(ctx, bad); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("bad Secret: err = %v, want 401", err)
	}
	if r.Len() != 2 {
		t.Errorf("Len = %d, want 2", r.Len())
	}
}

// HasListing sees a listing held by any per-Credentials client, not only
// the default one, and sends nothing to find out.
func TestRouterHasListing(t *testing.T) {
	f, srv := appFake(t)
	r := newRouter(t, srv)
	ctx := context.Background()
	f.AddRunner(org, "r1")
	if r.HasListing() {
		t.Fatal("HasListing on a new Router")
	}
	rn := ghclient.Runner{Scope: org, Name: "r1", Creds: tokenCreds("ns/s", "1", testToken)}
	if got, err := r.Listed(ctx, rn, ghclient.RefreshStale); err != nil || got.State != ghclient.ListedIdle {
		t.Fatalf("Listed: %v, %v", got.State, err)
	}
	sent := len(f.Requests())
	if !r.HasListing() {
		t.Error("HasListing false after a Secret's client took a listing")
	}
	if n := len(f.Requests()); n != sent {
		t.Errorf("HasListing sent %d requests", n-sent)
	}
}

func TestRouterRebuildsOnContentChange(t *testing.T) {
	f, srv := appFake(t)
	r := newRouter(t, srv)
	ctx := context.Background()
	f.AddRunner(org, "r1")
	run := func(version, token string) error {
		_, err := r.Status(ctx, ghclient.Runner{Scope: org, Name: "r1", Creds: tokenCreds("ns/s", version, token)})
		return err
	}
	if err := run("1", "stale"); err == nil {
		t.Fatal("stale token accepted")
	}
	// The Secret's new contents get a client of their own, whatever the
	// version says: clients are keyed by what the credentials are.
	if err := run("1", testToken); err != nil {
		t.Fatalf("new contents: %v", err)
	}
	if err := run("2", testToken); err != nil {
		t.Fatalf("new version, same contents: %v", err)
	}
	if r.Len() != 2 {
		t.Errorf("Len = %d, want 2 (the stale client, until the LRU drops it, and the new one)", r.Len())
	}
}

func TestRouterBound(t *testing.T) {
	tests := map[string]struct {
		max           int
		wantExchanges int // installation token exchanges for a (App), b (token), a
		wantLen       int
	}{
		"room for both: a is reused":  {max: 2, wantExchanges: 1, wantLen: 2},
		"room for one: a was evicted": {max: 1, wantExchanges: 2, wantLen: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := appFake(t)
			install := f.AddInstallation(appID, "acme")
			r := newRouter(t, srv, func(c *ghclient.RouterConfig) { c.MaxClients = tc.max })
			ctx := context.Background()
			f.AddRunner(org, "r1")
			a, b := appCreds("ns/a", install), tokenCreds("ns/b", "1", testToken)
			for _, creds := range []*ghclient.Credentials{a, b, a} {
				if _, err := r.Status(ctx, ghclient.Runner{Scope: org, Name: "r1", Creds: creds}); err != nil {
					t.Fatalf("%s: %v", creds.Key, err)
				}
			}
			if got := countCalls(f, "POST", "/access_tokens"); got != tc.wantExchanges {
				t.Errorf("token exchanges = %d, want %d", got, tc.wantExchanges)
			}
			if r.Len() != tc.wantLen {
				t.Errorf("Len = %d, want %d", r.Len(), tc.wantLen)
			}
		})
	}
}

func countCalls(f *ghfake.Fake, method, pathContains string) int {
	n := 0
	for _, r := range f.Requests() {
		if r.Method == method && strings.Contains(r.Path, pathContains) {
			n++
		}
	}
	return n
}

func TestRouterDefault(t *testing.T) {
	e := newEnv(t)
	e.fake.AddRunner(org, "r1")
	tests := map[string]struct {
		def     *ghclient.Client
		wantErr error
	}{
		"default configured": {def: e.client},
		"no default":         {wantErr: ghclient.ErrNoDefaultCredentials},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := newRouter(t, e.srv, func(c *ghclient.RouterConfig) { c.Default = tc.def })
			st, err := r.Status(context.Background(), ghclient.Runner{Scope: org, Name: "r1"})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && st.State != ghclient.StateIdle {
				t.Errorf("state = %v, want idle", st.State)
			}
		})
	}
}

func TestRouterCredentialsErrors(t *testing.T) {
	tests := map[string]struct {
		creds     ghclient.Credentials
		allowHTTP bool
		wantField ghclient.CredentialField
		wantMsg   string
	}{
		"nothing":             {creds: ghclient.Credentials{}, wantField: ghclient.FieldToken, wantMsg: "missing"},
		"token and app":       {creds: ghclient.Credentials{Token: "t", AppID: "1", PrivateKey: testKeyPEM}, wantField: ghclient.FieldToken, wantMsg: "conflicting"},
		"multi-line token":    {creds: ghclient.Credentials{Token: "a\nb"}, wantField: ghclient.FieldToken},
		"app without key":     {creds: ghclient.Credentials{AppID: "1"}, wantField: ghclient.FieldPrivateKey, wantMsg: "empty"},
		"key without app":     {creds: ghclient.Credentials{PrivateKey: testKeyPEM}, wantField: ghclient.FieldAppID, wantMsg: "empty"},
		"unparseable key":     {creds: ghclient.Credentials{AppID: "1", PrivateKey: []byte("-----BEGIN RSA PRIVATE KEY-----\nxx\n")}, wantField: ghclient.FieldPrivateKey, wantMsg: "PEM"},
		"app ID zero":         {creds: ghclient.Credentials{AppID: "0", PrivateKey: testKeyPEM}, wantField: ghclient.FieldAppID},
		"negative install":    {creds: ghclient.Credentials{AppID: "1", InstallationID: -3, PrivateKey: testKeyPEM}, wantField: ghclient.FieldInstallationID},
		"base URL no host":    {creds: ghclient.Credentials{Token: "t", BaseURL: "/api/v3"}, wantField: ghclient.FieldBaseURL},
		"plain http refused":  {creds: ghclient.Credentials{Token: "t", BaseURL: "http://ghe.example.com/api/v3/"}, wantField: ghclient.FieldBaseURL, wantMsg: "plain http"},
		"user info redacted":  {creds: ghclient.Credentials{Token: "t", BaseURL: "https://x:hunter2@ghe.example.com/api/v3/"}, wantField: ghclient.FieldBaseURL, wantMsg: "user info"},
		"http when allowed":   {creds: ghclient.Credentials{Token: "t", BaseURL: "http://ghe.example.com/api/v3/"}, allowHTTP: true},
		"client ID is an app": {creds: ghclient.Credentials{AppID: "Iv23liXYZ", PrivateKey: testKeyPEM}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := ghclient.NewRouter(ghclient.RouterConfig{AllowHTTP: tc.allowHTTP})
			if err != nil {
				t.Fatal(err)
			}
			creds := tc.creds
			creds.Key, creds.Version = "runners/arc-secret", "7"
			_, err = r.ClientFor(&creds)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("ClientFor: %v", err)
				}
				return
			}
			var ce *ghclient.CredentialsError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v (%T), want *CredentialsError", err, err)
			}
			if ce.Field != tc.wantField || ce.Key != "runners/arc-secret" {
				t.Errorf("Field, Key = %q, %q; want %q, runners/arc-secret", ce.Field, ce.Key, tc.wantField)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q: want %q and no password", err, tc.wantMsg)
			}
			if r.Len() != 0 {
				t.Errorf("invalid credentials were cached")
			}
		})
	}
}

// appEnv is a Client authenticated as App appID without an installation ID.
func appEnv(t *testing.T, mods ...func(*ghclient.Config)) (*ghfake.Fake, *ghclient.Client) {
	t.Helper()
	f, srv := appFake(t)
	cfg := ghclient.Config{
		BaseURL: "http://api.github.com/", AllowHTTP: true, Transport: dialTo(srv),
		App: &ghclient.AppCredentials{AppID: appID, PrivateKeyPEM: testKeyPEM},
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	c, err := ghclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

// One installation's spent hourly limit holds only its own owner's runners:
// each installation of an App has a primary limit of its own.
func TestInstallationPrimaryLimitHoldsOnlyItsOwner(t *testing.T) {
	f, c := appEnv(t)
	f.AddInstallation(appID, "acme")
	f.AddInstallation(appID, "beta")
	a1, b1 := f.AddRunner(org, "a1"), f.AddRunner(beta, "b1")
	f.InjectFault(ghfake.Fault{Kind: ghfake.FaultPrimaryRateLimit, PathContains: "/orgs/acme/actions", ResetAfterSeconds: 3000})
	ctx := context.Background()
	_, err := c.Unregister(ctx, org, "a1", trusted(a1))
	var rl *ghclient.RateLimited
	if !errors.As(err, &rl) || !rl.Primary {
		t.Fatalf("acme's unregister: %v; want its primary limit", err)
	}
	if out, err := c.Unregister(ctx, beta, "b1", trusted(b1)); err != nil || out != ghclient.Removed {
		t.Fatalf("beta's unregister after acme's limit: %v, %v; want Removed", out, err)
	}
	if _, err := c.Unregister(ctx, org, "a1", trusted(a1)); !errors.As(err, &rl) {
		t.Fatalf("acme's unregister again: %v; still limited", err)
	}
}

func TestInstallationDiscoveryTwoOrgs(t *testing.T) {
	f, c := appEnv(t)
	acmeInst := f.AddInstallation(appID, "acme")
	betaInst := f.AddInstallation(appID, "beta")
	ctx := context.Background()
	a1 := f.AddRunner(org, "a1")
	a2 := f.AddRunner(org, "a2")
	b1 := f.AddRunner(beta, "b1")
	r1 := f.AddRunner(repo, "r1")

	for _, rn := range []struct {
		scope ghclient.Scope
		name  string
		id    int64
	}{{org, "a1", a1}, {beta, "b1", b1}, {org, "a2", a2}, {repo, "r1", r1}} {
		if out, err := c.Unregister(ctx, rn.scope, rn.name, trusted(rn.id)); err != nil || out != ghclient.Removed {
			t.Fatalf("Unregister %s: %v, %v", rn.name, out, err)
		}
	}
	// One look-up and one token per owner; acme's repo shares acme's installation.
	assertCalls(t, f, []string{
		"GET /orgs/acme/installation",
		fmt.Sprintf("POST /app/installations/%d/access_tokens", acmeInst),
		fmt.Sprintf("DELETE %s/%d", orgRunners, a1),
		"GET /orgs/beta/installation",
		fmt.Sprintf("POST /app/installations/%d/access_tokens", betaInst),
		fmt.Sprintf("DELETE /orgs/beta/actions/runners/%d", b1),
		fmt.Sprintf("DELETE %s/%d", orgRunners, a2),
		fmt.Sprintf("DELETE %s/%d", repoRunners, r1),
	})
}

func TestInstallationDiscoveryRepoFirst(t *testing.T) {
	f, c := appEnv(t)
	f.AddInstallation(appID, "acme")
	f.AddRunner(repo, "r1")
	if _, err := c.Status(context.Background(), repo, "r1"); err != nil {
		t.Fatal(err)
	}
	if got := calls(f)[0]; got != "GET /repos/acme/app/installation" {
		t.Errorf("first call %q, want the repository's installation look-up", got)
	}
}

func TestInstallationNotInstalled(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_800_000_000, 0))
	f, c := appEnv(t, func(cfg *ghclient.Config) { cfg.Now = clock.Now })
	f.AddRunner(org, "r1")
	ctx := context.Background()
	for range 5 {
		_, err := c.Unregister(ctx, org, "r1", ghclient.IDHint{})
		if !errors.Is(err, ghclient.ErrAppNotInstalled) {
			t.Fatalf("err = %v, want ErrAppNotInstalled", err)
		}
	}
	// Remembered: repeating the look-up changes nothing for a while.
	if got := countCalls(f, "GET", "/orgs/acme/installation"); got != 1 {
		t.Errorf("look-ups = %d, want 1", got)
	}
	// Not forever: installing the App later must work without a restart.
	f.AddInstallation(appID, "acme")
	clock.Advance(ghclient.FailureTTL)
	if out, err := c.Unregister(ctx, org, "r1", ghclient.IDHint{}); err != nil || out != ghclient.Removed {
		t.Fatalf("after installing: %v, %v", out, err)
	}
}

// A 404 listing one repository says the App cannot see it, not that its
// installation on the owner is gone: the installation is kept for the
// owner's other scopes, and the 404 is remembered for the repository.
func TestInstallationKeptOnListing404(t *testing.T) {
	clock := fakeclock.New(time.Unix(1_800_000_000, 0))
	f, c := appEnv(t, func(cfg *ghclient.Config) { cfg.Now = clock.Now })
	f.AddInstallation(appID, "acme")
	f.AddRunner(org, "r1")
	missing := ghclient.Scope{Kind: ghclient.ScopeRepo, Name: "acme/does-not-exist"}
	f.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 404, Method: "GET", PathContains: "/repos/acme/does-not-exist/"})
	ctx := context.Background()
	if _, err := c.Status(ctx, org, "r1"); err != nil {
		t.Fatal(err)
	}
	f.ResetLog()
	for range 30 {
		if _, err := c.Unregister(ctx, missing, "r9", ghclient.IDHint{}); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("err = %v, want the 404", err)
		}
	}
	if got := len(f.Requests()); got != 1 {
		t.Errorf("GitHub requests for 30 unregisters in a missing repository = %d, want 1: %q", got, calls(f))
	}
	if _, err := c.Status(ctx, org, "r1"); err != nil {
		t.Fatal(err)
	}
	if got := countCalls(f, "GET", "/installation"); got != 0 {
		t.Errorf("installation look-ups after a repository's 404 = %d, want 0", got)
	}
	clock.Advance(ghclient.FailureTTL)
	f.ResetLog()
	if _, err := c.Unregister(ctx, missing, "r9", ghclient.IDHint{}); err == nil {
		t.Fatal("want the 404 again")
	}
	if got := countCalls(f, "GET", "/repos/acme/does-not-exist/"); got != 1 {
		t.Errorf("after FailureTTL, requests = %d, want 1 (asked again)", got)
	}
}

func TestInstallationForgotten(t *testing.T) {
	tests := map[string]struct {
		// break makes the cached installation fail on the next runner request.
		breakIt  func(f *ghfake.Fake, old int64)
		wantCode string
	}{
		"reinstalled: old token revoked, 401": {
			breakIt: func(f *ghfake.Fake, old int64) {
				f.RemoveInstallation(old)
				f.AddInstallation(appID, "acme")
			},
			wantCode: "401",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, c := appEnv(t)
			old := f.AddInstallation(appID, "acme")
			f.AddRunner(org, "r1")
			ctx := context.Background()
			if _, err := c.Status(ctx, org, "r1"); err != nil {
				t.Fatal(err)
			}
			tc.breakIt(f, old)
			if _, err := c.Status(ctx, org, "r1"); err == nil || !strings.Contains(err.Error(), tc.wantCode) {
				t.Fatalf("err = %v, want %s", err, tc.wantCode)
			}
			if st, err := c.Status(ctx, org, "r1"); err != nil || st.State != ghclient.StateIdle {
				t.Fatalf("after forgetting: %v, %v", st, err)
			}
			if got := countCalls(f, "GET", "/orgs/acme/installation"); got != 2 {
				t.Errorf("installation look-ups = %d, want 2 (forgotten once)", got)
			}
		})
	}
}

func TestAppEnterpriseScopeIsAConfigError(t *testing.T) {
	tests := map[string]int64{"discovered installation": 0, "fixed installation": 7}
	for name, install := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := appFake(t)
			r := newRouter(t, srv)
			rn := ghclient.Runner{Scope: ent, Name: "r1", ID: 5, Creds: appCreds("ns/app", install)}
			_, err := r.Unregister(context.Background(), rn)
			if !errors.Is(err, ghclient.ErrAppEnterpriseScope) {
				t.Fatalf("Unregister err = %v, want ErrAppEnterpriseScope", err)
			}
			if _, err := r.Status(context.Background(), rn); !errors.Is(err, ghclient.ErrAppEnterpriseScope) {
				t.Fatalf("Status err = %v, want ErrAppEnterpriseScope", err)
			}
			assertCalls(t, f, nil)
		})
	}
}

func TestGHESRateLimitAndUnprocessable(t *testing.T) {
	tests := map[string]struct {
		base     string
		fault    ghfake.Fault
		busy     bool
		want     ghclient.Outcome
		limited  bool
		errParts []string
	}{
		"github.com: bare 403 is a rate limit": {
			base: "http://api.github.com/", fault: ghfake.Fault{Kind: ghfake.FaultStatus, Status: 403, NoRateHeaders: true}, limited: true,
		},
		"GHES: bare 403 is an error": {
			base: "http://ghe.example.com/api/v3/", fault: ghfake.Fault{Kind: ghfake.FaultStatus, Status: 403, NoRateHeaders: true, Body: `{"message":"Must have admin rights"}`},
			errParts: []string{"403", "Must have admin rights"},
		},
		"422 saying the runner is busy": {
			base: "http://ghe.example.com/api/v3/", busy: true, want: ghclient.Busy,
		},
		"422 worded otherwise is busy too, as ARC reads it": {
			base: "http://api.github.com/", fault: ghfake.Fault{Kind: ghfake.FaultStatus, Status: 422, Body: `{"message":"Validation Failed","errors":[]}`},
			want: ghclient.Busy,
		},
		"422 with a body that is not JSON is busy": {
			base: "http://api.github.com/", fault: ghfake.Fault{Kind: ghfake.FaultStatus, Status: 422, Body: `upstream said no`},
			want: ghclient.Busy,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, func(c *ghclient.Config) { c.BaseURL = tc.base })
			id := e.fake.AddRunner(org, "r1")
			e.fake.SetBusy(org, "r1", tc.busy)
			if tc.fault.Kind != "" {
				tc.fault.Method = "DELETE"
				e.fake.InjectFault(tc.fault)
			}
			out, err := e.client.Unregister(context.Background(), org, "r1", trusted(id))
			var rl *ghclient.RateLimited
			if errors.As(err, &rl) != tc.limited {
				t.Fatalf("err = %v, want rate limited %v", err, tc.limited)
			}
			if tc.limited {
				return
			}
			if len(tc.errParts) > 0 {
				wantErrContaining(tc.errParts...)(t, err)
				return
			}
			if err != nil || out != tc.want {
				t.Errorf("= %v, %v; want %v", out, err, tc.want)
			}
		})
	}
}

func TestTokenFileRotation(t *testing.T) {
	tests := map[string]struct {
		advance    time.Duration // clock moved before the request after rotation
		rotate     bool
		wantStatus []int // statuses the fake answered for that request
		wantErr    bool
	}{
		"rotated, checked after the interval: new token at once": {advance: 6 * time.Second, rotate: true, wantStatus: []int{204}},
		"rotated, within the interval: 401, re-read, retried":    {advance: time.Second, rotate: true, wantStatus: []int{401, 204}},
		"not rotated: 401 is final, no retry":                    {advance: 6 * time.Second, wantStatus: []int{401}, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "token")
			writeToken(t, path, "first-token", time.Now().Add(-time.Hour))
			var mu sync.Mutex
			now := time.Now()
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			e := newEnv(t, func(c *ghclient.Config) { c.Token, c.TokenFile, c.Now = "", path, clock })
			e.fake.SetToken("first-token")
			id1 := e.fake.AddRunner(org, "r1")
			id2 := e.fake.AddRunner(org, "r2")
			ctx := context.Background()
			if _, err := e.client.Unregister(ctx, org, "r1", trusted(id1)); err != nil {
				t.Fatalf("before rotation: %v", err)
			}

			e.fake.SetToken("second-token-longer")
			if tc.rotate {
				writeToken(t, path, "second-token-longer\n", time.Now())
			}
			mu.Lock()
			now = now.Add(tc.advance)
			mu.Unlock()
			e.fake.ResetLog()
			_, err := e.client.Unregister(ctx, org, "r2", trusted(id2))
			if (err != nil) != tc.wantErr {
				t.Fatalf("after rotation: err = %v, want error %v", err, tc.wantErr)
			}
			var got []int
			for _, r := range e.fake.Requests() {
				got = append(got, r.Status)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantStatus) {
				t.Errorf("statuses = %v, want %v", got, tc.wantStatus)
			}
		})
	}
}

func writeToken(t *testing.T, path, token string, mtime time.Time) {
	t.Helper()
	// Write and rename, as the kubelet swaps a Secret volume's files.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A client ID in github_app_id signs JWTs with the client ID as issuer.
func TestClientIDAsAppID(t *testing.T) {
	f, srv := appFake(t)
	f.SetAppClientID(appID, "Iv23liTEST")
	f.AddInstallation(appID, "acme")
	f.AddRunner(org, "r1")
	r := newRouter(t, srv)
	creds := appCreds("ns/app", 0)
	creds.AppID = "Iv23liTEST"
	st, err := r.Status(context.Background(), ghclient.Runner{Scope: org, Name: "r1", Creds: creds})
	if err != nil || st.State != ghclient.StateIdle {
		t.Fatalf("Status = %v, %v", st, err)
	}
	if got := countCalls(f, "POST", "/access_tokens"); got != 1 {
		t.Errorf("token exchanges = %d, want 1", got)
	}
}

// A scope's 401 is answered from memory, but a new token in the file ends the
// memory at once: a rotated Secret needs no wait.
func TestTokenFileRemembered401(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	writeToken(t, path, "stale-token", time.Now().Add(-time.Hour))
	clock := fakeclock.New(time.Now())
	e := newEnv(t, func(c *ghclient.Config) { c.Token, c.TokenFile, c.Now = "", path, clock.Now })
	e.fake.SetToken("good-token")
	e.fake.AddRunner(org, "r1")
	ctx := context.Background()
	for range 10 {
		if _, err := e.client.Unregister(ctx, org, "r1", ghclient.IDHint{}); err == nil || !strings.Contains(err.Error(), "401") {
			t.Fatalf("err = %v, want the 401", err)
		}
	}
	if got := len(e.fake.Requests()); got != 1 {
		t.Errorf("requests for 10 unregisters answered 401 = %d, want 1 (remembered)", got)
	}
	writeToken(t, path, "good-token", time.Now())
	clock.Advance(6 * time.Second) // past the file's re-check interval
	if out, err := e.client.Unregister(ctx, org, "r1", ghclient.IDHint{}); err != nil || out != ghclient.Removed {
		t.Fatalf("after the file got the good token: %v, %v", out, err)
	}
}

// A tenant rewriting its Secret in a loop gets a new client each time; the
// Router keeps MaxClients of them, and the budgets of the ones it drops go
// with them.
func TestRouterRotationsBoundBudgets(t *testing.T) {
	budgets, err := ghclient.NewBudgets(ghclient.BudgetConfig{}, ghclient.NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	r, err := ghclient.NewRouter(ghclient.RouterConfig{MaxClients: 4, Budgets: budgets})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := r.ClientFor(&ghclient.Credentials{Key: "ci/arc", Token: fmt.Sprintf("ghp_rotated_%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := budgets.Len(); got > 4 {
		t.Errorf("budgets after 100 rotations = %d, want at most the Router's 4 clients", got)
	}
}

// The checker gives the Router's verdict on credentials without building a
// client (no budget, no request).
func TestCredentialsCheckerAgreesWithRouter(t *testing.T) {
	tests := map[string]*ghclient.Credentials{
		"token":           {Key: "ci/a", Token: "ghp_x"},
		"no key":          {Token: "ghp_x"},
		"token and app":   {Key: "ci/a", Token: "ghp_x", AppID: "42", PrivateKey: testKeyPEM},
		"app without key": {Key: "ci/a", AppID: "42", InstallationID: 7},
		"app":             {Key: "ci/a", AppID: "42", InstallationID: 7, PrivateKey: testKeyPEM},
		"bad base URL":    {Key: "ci/a", Token: "ghp_x", BaseURL: "ftp://x"},
	}
	checker := ghclient.NewCredentialsChecker(true)
	for name, creds := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := ghclient.NewRouter(ghclient.RouterConfig{AllowHTTP: true})
			if err != nil {
				t.Fatal(err)
			}
			_, want := r.ClientFor(creds)
			for range 2 { // the second answer is remembered
				if got := checker.Check(creds); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("checker says %v, Router says %v", got, want)
				}
			}
		})
	}
}
