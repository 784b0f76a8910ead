package ghfake_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/golang-jwt/jwt/v4"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

const appID = 42

func newKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// appJWT returns a JWT for appID signed with key, as ghinstallation makes it.
func appJWT(t *testing.T, key *rsa.PrivateKey) string {
	t.Helper()
	var got string
	atr := ghinstallation.NewAppsTransportFromPrivateKey(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}}, nil
	}), appID, key)
	req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	if _, err := atr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	return got
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// installToken exchanges the JWT for an installation token.
func installToken(t *testing.T, base, jwt string, id int64) answer {
	t.Helper()
	return do(t, http.MethodPost, fmt.Sprintf("%s/app/installations/%d/access_tokens", base, id), bearer(jwt))
}

func tokenOf(t *testing.T, a answer) string {
	t.Helper()
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(a.body), &out); err != nil || out.Token == "" {
		t.Fatalf("token answer %d %s", a.status, a.body)
	}
	return out.Token
}

// GitHub requires a JWT's exp, at most 10 minutes ahead (GITHUB-API.md); a
// fake that took more would let a client that GitHub refuses pass its tests.
func TestAppJWTExpiry(t *testing.T) {
	f, srv := serve(t, ghfake.WithScopes(org, repo, bigcorp))
	key := newKey(t)
	f.AddApp(appID, &key.PublicKey)
	acme := f.AddInstallation(appID, "acme")
	signed := func(claims jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	now := time.Now()
	for name, tc := range map[string]struct {
		jwt  string
		want int
	}{
		"as ghinstallation makes it": {jwt: appJWT(t, key), want: http.StatusCreated},
		"exp 10 minutes ahead":       {jwt: signed(jwt.MapClaims{"iss": appID, "iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()}), want: http.StatusCreated},
		"exp 11 minutes ahead":       {jwt: signed(jwt.MapClaims{"iss": appID, "iat": now.Unix(), "exp": now.Add(11 * time.Minute).Unix()}), want: http.StatusUnauthorized},
		"no exp":                     {jwt: signed(jwt.MapClaims{"iss": appID, "iat": now.Unix()}), want: http.StatusUnauthorized},
		"expired":                    {jwt: signed(jwt.MapClaims{"iss": appID, "iat": now.Add(-20 * time.Minute).Unix(), "exp": now.Add(-10 * time.Minute).Unix()}), want: http.StatusUnauthorized},
	} {
		t.Run(name, func(t *testing.T) {
			if a := installToken(t, srv.URL, tc.jwt, acme); a.status != tc.want {
				t.Errorf("token exchange: %d %s, want %d", a.status, a.body, tc.want)
			}
		})
	}
}

func TestInstallationLookup(t *testing.T) {
	f, srv := serve(t, ghfake.WithScopes(org, repo, bigcorp))
	key := newKey(t)
	f.AddApp(appID, &key.PublicKey)
	acme := f.AddInstallation(appID, "Acme")
	good, wrong := appJWT(t, key), appJWT(t, newKey(t))

	tests := map[string]struct {
		path, jwt string
		want      int
		wantID    int64
	}{
		"org installed":              {path: "/orgs/acme/installation", jwt: good, want: 200, wantID: acme},
		"repo of installed owner":    {path: "/repos/ACME/app/installation", jwt: good, want: 200, wantID: acme},
		"GHES root":                  {path: "/api/v3/orgs/acme/installation", jwt: good, want: 200, wantID: acme},
		"org not installed":          {path: "/orgs/beta/installation", jwt: good, want: 404},
		"JWT signed by another key":  {path: "/orgs/acme/installation", jwt: wrong, want: 401},
		"installation token refused": {path: "/orgs/acme/installation", jwt: "ghs_x", want: 401},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := do(t, http.MethodGet, srv.URL+tc.path, bearer(tc.jwt))
			if a.status != tc.want {
				t.Fatalf("status %d, want %d: %s", a.status, tc.want, a.body)
			}
			var body struct {
				ID    int64 `json:"id"`
				AppID int64 `json:"app_id"`
			}
			_ = json.Unmarshal([]byte(a.body), &body)
			if body.ID != tc.wantID || tc.wantID != 0 && body.AppID != appID {
				t.Errorf("body %s, want id %d", a.body, tc.wantID)
			}
		})
	}
}

func TestInstallationTokensAreScoped(t *testing.T) {
	f, srv := serve(t, ghfake.WithScopes(org, repo, bigcorp))
	key := newKey(t)
	f.AddApp(appID, &key.PublicKey)
	acmeInst := f.AddInstallation(appID, "acme")
	f.AddInstallation(appID, "beta")
	jwt := appJWT(t, key)
	tok := tokenOf(t, installToken(t, srv.URL, jwt, acmeInst))

	tests := map[string]struct {
		path string
		want int
	}{
		"own org":              {path: "/orgs/acme/actions/runners", want: 200},
		"own repo":             {path: "/repos/acme/app/actions/runners", want: 200},
		"other org":            {path: "/orgs/beta/actions/runners", want: 403},
		"other owner's repo":   {path: "/repos/beta/app/actions/runners", want: 404},
		"enterprise":           {path: "/enterprises/bigcorp/actions/runners", want: 403},
		"other org's runner":   {path: "/orgs/beta/actions/runners/1001", want: 403},
		"other owner's runner": {path: "/repos/beta/app/actions/runners/1001", want: 404},
		"unknown installation": {path: "", want: 404},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var a answer
			if tc.path == "" {
				a = installToken(t, srv.URL, jwt, 99999)
			} else {
				a = do(t, http.MethodGet, srv.URL+tc.path, bearer(tok))
			}
			if a.status != tc.want {
				t.Errorf("status %d, want %d: %s", a.status, tc.want, a.body)
			}
		})
	}

	f.RemoveInstallation(acmeInst)
	if a := do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners", bearer(tok)); a.status != 401 {
		t.Errorf("revoked token: status %d, want 401", a.status)
	}
	if a := installToken(t, srv.URL, jwt, acmeInst); a.status != 404 {
		t.Errorf("token for removed installation: status %d, want 404", a.status)
	}
}

func TestGenerateJITConfig(t *testing.T) {
	f, srv := serve(t)
	u := srv.URL + "/orgs/acme/actions/runners/generate-jitconfig"
	post := func(body string) answer {
		t.Helper()
		resp, err := http.Post(u, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return answer{status: resp.StatusCode, body: b.String()}
	}
	a := post(`{"name":"jit-1","runner_group_id":1,"labels":["arc"]}`)
	if a.status != 201 {
		t.Fatalf("status %d: %s", a.status, a.body)
	}
	var out ghfake.JITResponse
	if err := json.Unmarshal([]byte(a.body), &out); err != nil || out.EncodedJITConfig == "" || out.Runner.Name != "jit-1" {
		t.Fatalf("answer %s (%v)", a.body, err)
	}
	r, ok := f.Runner(org, "jit-1")
	if !ok || r.ID != out.Runner.ID || r.Status != "offline" || r.Labels[len(r.Labels)-1].Name != "arc" {
		t.Errorf("registered runner %+v %v, answer %+v", r, ok, out.Runner)
	}
	for name, tc := range map[string]struct {
		body string
		want int
	}{
		"name taken": {body: `{"name":"jit-1","runner_group_id":1,"labels":["arc"]}`, want: 409},
		"no labels":  {body: `{"name":"jit-2","runner_group_id":1,"labels":[]}`, want: 422},
		"no group":   {body: `{"name":"jit-2","labels":["a"]}`, want: 422},
		"not JSON":   {body: `{`, want: 400},
	} {
		t.Run(name, func(t *testing.T) {
			if a := post(tc.body); a.status != tc.want {
				t.Errorf("status %d, want %d: %s", a.status, tc.want, a.body)
			}
		})
	}
}

func TestStyles(t *testing.T) {
	tests := map[string]struct {
		style          ghfake.Style
		root, apiV3    int
		wantRateHeader bool
		wantGHESHeader bool
	}{
		"any":    {style: ghfake.StyleAny, root: 200, apiV3: 200, wantRateHeader: true},
		"dotcom": {style: ghfake.StyleDotCom, root: 200, apiV3: 404, wantRateHeader: true},
		"GHES":   {style: ghfake.StyleGHES, root: 404, apiV3: 200, wantGHESHeader: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := serve(t)
			f.SetStyle(tc.style)
			root := do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners", nil)
			v3 := do(t, http.MethodGet, srv.URL+"/api/v3/orgs/acme/actions/runners", nil)
			if root.status != tc.root || v3.status != tc.apiV3 {
				t.Errorf("root %d, /api/v3 %d; want %d, %d", root.status, v3.status, tc.root, tc.apiV3)
			}
			ok := v3
			if tc.apiV3 != 200 {
				ok = root
			}
			if got := ok.header.Get("X-RateLimit-Remaining") != ""; got != tc.wantRateHeader {
				t.Errorf("rate-limit header present = %v, want %v", got, tc.wantRateHeader)
			}
			if got := ok.header.Get("X-GitHub-Enterprise-Version") != ""; got != tc.wantGHESHeader {
				t.Errorf("GHES version header present = %v, want %v", got, tc.wantGHESHeader)
			}
		})
	}
}

func TestRemoteControl(t *testing.T) {
	f, srv := serve(t)
	g := &ghfake.Remote{BaseURL: srv.URL}
	ctx := context.Background()
	key := newKey(t)
	beta, _ := ghclient.OrgScope("beta")

	if err := g.AddApp(ctx, appID, "Iv23liTEST", &key.PublicKey); err != nil {
		t.Fatal(err)
	}
	inst, err := g.AddInstallation(ctx, appID, "acme")
	if err != nil || inst == 0 {
		t.Fatalf("AddInstallation = %d, %v", inst, err)
	}
	id, err := g.AddRunner(ctx, org, "r1")
	if err != nil || id == 0 {
		t.Fatalf("AddRunner = %d, %v", id, err)
	}
	if err := g.SetBusy(ctx, org, "r1", true); err != nil {
		t.Fatal(err)
	}
	if r, ok := f.Runner(org, "r1"); !ok || !r.Busy {
		t.Errorf("SetBusy did not reach the fake: %+v", r)
	}
	jit, err := g.RegisterJITRunner(ctx, beta, "jit-1", "arc")
	if err != nil || jit.Runner.Name != "jit-1" || jit.EncodedJITConfig == "" {
		t.Fatalf("RegisterJITRunner = %+v, %v", jit, err)
	}
	if _, err := g.RegisterJITRunner(ctx, beta, "jit-1"); err == nil {
		t.Error("second JIT registration of one name accepted")
	}
	if r, found, err := g.Runner(ctx, beta, "jit-1"); err != nil || !found || r.ID != jit.Runner.ID {
		t.Errorf("Runner = %+v, %v, %v", r, found, err)
	}
	if err := g.SetStyle(ctx, ghfake.StyleGHES); err != nil {
		t.Fatal(err)
	}
	if err := g.RemoveInstallation(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if err := g.RemoveInstallation(ctx, inst); !ghfake.IsNotFound(err) {
		t.Errorf("second RemoveInstallation err = %v, want not found", err)
	}
	if err := g.RemoveRunnerByName(ctx, org, "r1"); err != nil {
		t.Fatal(err)
	}
	if len(f.Installations()) != 0 {
		t.Errorf("installations left: %+v", f.Installations())
	}
	if err := g.SetStyle(ctx, "bogus"); err == nil {
		t.Error("unknown style accepted")
	}
}

// Installation tokens come in GitHub's old format (ghs_ and 40 characters)
// unless the request asks for the new one (X-GitHub-Stateless-S2S-Token:
// enabled) or the fake issues it always; a new one (a ghs_ JWT of about 520
// characters) authenticates like an old one.
func TestInstallationTokenFormats(t *testing.T) {
	old := regexp.MustCompile(`^ghs_[0-9a-f]{40}$`)
	stateless := regexp.MustCompile(`^ghs_[A-Za-z0-9_]+\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+$`)
	for name, tc := range map[string]struct {
		opts   []ghfake.Option
		header bool
		want   *regexp.Regexp
	}{
		"default":           {want: old},
		"asked for":         {header: true, want: stateless},
		"issued always":     {opts: []ghfake.Option{ghfake.WithStatelessTokens()}, want: stateless},
		"always, and asked": {opts: []ghfake.Option{ghfake.WithStatelessTokens()}, header: true, want: stateless},
	} {
		t.Run(name, func(t *testing.T) {
			f, srv := serve(t, append(tc.opts, ghfake.WithScopes(org))...)
			key := newKey(t)
			f.AddApp(appID, &key.PublicKey)
			acme := f.AddInstallation(appID, "acme")
			h := bearer(appJWT(t, key))
			if tc.header {
				h[ghfake.StatelessTokenHeader] = "enabled"
			}
			tok := tokenOf(t, do(t, http.MethodPost, fmt.Sprintf("%s/app/installations/%d/access_tokens", srv.URL, acme), h))
			if !tc.want.MatchString(tok) {
				t.Fatalf("token %q (%d characters) does not match %s", tok, len(tok), tc.want)
			}
			if tc.want == stateless && (len(tok) < 500 || len(tok) > 540) {
				t.Fatalf("a new-format token of %d characters, want about 520", len(tok))
			}
			if a := do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners", map[string]string{"Authorization": "token " + tok}); a.status != http.StatusOK {
				t.Fatalf("listing with the token: %d %s", a.status, a.body)
			}
		})
	}
}
