package ghfake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

var (
	org, _  = ghclient.OrgScope("acme")
	repo, _ = ghclient.RepoScope("acme/app")
	// bigcorp is an enterprise the strict tests hold.
	bigcorp, _ = ghclient.EnterpriseScope("bigcorp")
)

type answer struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, u string, hdr map[string]string) answer {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// serve serves a fake built with opts. With none it holds org and repo and
// has authentication off, for the tests that are not about credentials; a
// test that is passes what it needs (strict_test.go has GitHub's strictness).
func serve(t *testing.T, opts ...ghfake.Option) (*ghfake.Fake, *httptest.Server) {
	t.Helper()
	if len(opts) == 0 {
		opts = []ghfake.Option{ghfake.WithAuthOff(), ghfake.WithScopes(org, repo)}
	}
	f := ghfake.New(opts...)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

type listBody struct {
	TotalCount int             `json:"total_count"`
	Runners    []ghfake.Runner `json:"runners"`
}

func TestListPaging(t *testing.T) {
	f, srv := serve(t)
	for i := 1; i <= 250; i++ {
		f.AddRunner(org, fmt.Sprintf("runner-%d", i))
	}
	f.AddRunner(repo, "elsewhere")
	base := srv.URL + "/orgs/acme/actions/runners"
	link := func(page int) string {
		return fmt.Sprintf("<%s?page=%d&per_page=100>", base, page)
	}

	tests := map[string]struct {
		query     string
		wantCount int
		wantFirst int64
		wantLink  string
	}{
		"first page": {
			query: "?per_page=100", wantCount: 100, wantFirst: 1001,
			wantLink: link(2) + `; rel="next", ` + link(3) + `; rel="last"`,
		},
		"middle page": {
			query: "?per_page=100&page=2", wantCount: 100, wantFirst: 1101,
			wantLink: link(1) + `; rel="prev", ` + link(3) + `; rel="next", ` + link(3) + `; rel="last", ` + link(1) + `; rel="first"`,
		},
		"last page": {
			query: "?per_page=100&page=3", wantCount: 50, wantFirst: 1201,
			wantLink: link(2) + `; rel="prev", ` + link(1) + `; rel="first"`,
		},
		"past the end": {
			query: "?per_page=100&page=4", wantCount: 0,
			wantLink: link(3) + `; rel="prev", ` + link(1) + `; rel="first"`,
		},
		"default page size 30": {
			query: "", wantCount: 30, wantFirst: 1001,
			wantLink: fmt.Sprintf(`<%s?page=2&per_page=30>; rel="next", <%s?page=9&per_page=30>; rel="last"`, base, base),
		},
		"page size capped at 100": {
			query: "?per_page=500", wantCount: 100, wantFirst: 1001,
			wantLink: link(2) + `; rel="next", ` + link(3) + `; rel="last"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := do(t, http.MethodGet, base+tc.query, nil)
			if a.status != http.StatusOK {
				t.Fatalf("status %d: %s", a.status, a.body)
			}
			var b listBody
			if err := json.Unmarshal([]byte(a.body), &b); err != nil {
				t.Fatal(err)
			}
			if b.TotalCount != 250 || len(b.Runners) != tc.wantCount {
				t.Errorf("total_count %d, %d runners; want 250, %d", b.TotalCount, len(b.Runners), tc.wantCount)
			}
			if tc.wantCount > 0 && b.Runners[0].ID != tc.wantFirst {
				t.Errorf("first ID %d, want %d", b.Runners[0].ID, tc.wantFirst)
			}
			if got := a.header.Get("Link"); got != tc.wantLink {
				t.Errorf("Link:\n got %s\nwant %s", got, tc.wantLink)
			}
		})
	}
}

func TestListNameFilterAndShape(t *testing.T) {
	f, srv := serve(t)
	f.AddRunner(org, "a")
	f.AddRunner(org, "b")
	f.SetBusy(org, "b", true)
	f.SetOnline(org, "b", false)

	a := do(t, http.MethodGet, srv.URL+"/orgs/ACME/actions/runners?name=b", nil)
	want := `{"total_count":1,"runners":[{"id":1002,"name":"b","os":"linux","status":"offline","busy":true,"labels":[{"id":1,"name":"self-hosted","type":"read-only"},{"id":2,"name":"linux","type":"read-only"}]}]}`
	if a.status != 200 || a.body != want {
		t.Errorf("got %d %s\nwant %s", a.status, a.body, want)
	}
	if a.header.Get("Link") != "" {
		t.Errorf("single page has a Link header: %s", a.header.Get("Link"))
	}
	a = do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners?name=zzz", nil)
	if a.body != `{"total_count":0,"runners":[]}` {
		t.Errorf("empty list body %s", a.body)
	}
}

func TestRemoveAndErrorBodies(t *testing.T) {
	f, srv := serve(t)
	idle := f.AddRunner(org, "idle")
	busy := f.AddRunner(org, "busy")
	f.SetBusy(org, "busy", true)
	other := f.AddRunner(repo, "other")

	tests := map[string]struct {
		method, path string
		wantStatus   int
		wantBody     string
	}{
		"idle runner: 204": {
			method: http.MethodDelete, path: fmt.Sprintf("/orgs/acme/actions/runners/%d", idle), wantStatus: 204,
		},
		"busy runner: 422": {
			method: http.MethodDelete, path: fmt.Sprintf("/orgs/acme/actions/runners/%d", busy), wantStatus: 422,
			wantBody: `{"message":"Runner \"busy\" is still running a job","documentation_url":"https://docs.github.com/rest","status":"422"}`,
		},
		"unknown ID: 404": {
			method: http.MethodDelete, path: "/orgs/acme/actions/runners/99", wantStatus: 404,
			wantBody: `{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}`,
		},
		"ID of another scope: 404": {
			method: http.MethodDelete, path: fmt.Sprintf("/orgs/acme/actions/runners/%d", other), wantStatus: 404,
		},
		"unknown route: 404": {
			method: http.MethodGet, path: "/orgs/acme/actions/secrets", wantStatus: 404,
			wantBody: `{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}`,
		},
		"wrong method: 404": {method: http.MethodPost, path: "/orgs/acme/actions/runners", wantStatus: 404},
		"GHES prefix": {
			method: http.MethodDelete, path: fmt.Sprintf("/api/v3/repos/acme/app/actions/runners/%d", other), wantStatus: 204,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := do(t, tc.method, srv.URL+tc.path, nil)
			if a.status != tc.wantStatus {
				t.Errorf("status %d, want %d (%s)", a.status, tc.wantStatus, a.body)
			}
			if tc.wantBody != "" && a.body != tc.wantBody {
				t.Errorf("body %s\nwant %s", a.body, tc.wantBody)
			}
			if tc.wantStatus == 204 && a.body != "" {
				t.Errorf("204 with body %q", a.body)
			}
		})
	}
	if _, ok := f.Runner(org, "idle"); ok {
		t.Error("removed runner still present")
	}
	if _, ok := f.Runner(org, "busy"); !ok {
		t.Error("busy runner was removed")
	}
}

// GET .../actions/runners/{runner_id} answers one runner as an element of the
// list renders it, or 404; it is authenticated, rate limited and logged like
// the other routes.
func TestGetRunnerByID(t *testing.T) {
	tests := map[string]struct {
		style      ghfake.Style
		token      string // fake's token; the request carries "Bearer good"
		fault      *ghfake.Fault
		path       string // {orgID} and {repoID} stand for the runners' IDs
		wantStatus int
		wantBody   string
	}{
		"org runner: 200 with the list element's shape": {
			path: "/orgs/acme/actions/runners/{orgID}", wantStatus: 200,
			wantBody: `{"id":1001,"name":"r1","os":"linux","status":"offline","busy":true,"labels":[{"id":1,"name":"self-hosted","type":"read-only"},{"id":2,"name":"linux","type":"read-only"}]}`,
		},
		"owner name is case-insensitive": {path: "/orgs/ACME/actions/runners/{orgID}", wantStatus: 200},
		"repo runner": {
			path: "/repos/acme/app/actions/runners/{repoID}", wantStatus: 200,
			wantBody: `{"id":1002,"name":"other","os":"linux","status":"online","busy":false,"labels":[{"id":1,"name":"self-hosted","type":"read-only"},{"id":2,"name":"linux","type":"read-only"}]}`,
		},
		"unknown ID: 404": {
			path: "/orgs/acme/actions/runners/99", wantStatus: 404,
			wantBody: `{"message":"Not Found","documentation_url":"https://docs.github.com/rest","status":"404"}`,
		},
		"ID of another scope: 404": {path: "/orgs/acme/actions/runners/{repoID}", wantStatus: 404},
		"not a number: 404":        {path: "/orgs/acme/actions/runners/r1", wantStatus: 404},
		"enterprise, unknown: 404": {path: "/enterprises/bigcorp/actions/runners/{orgID}", wantStatus: 404},
		"GHES prefix":              {path: "/api/v3/orgs/acme/actions/runners/{orgID}", wantStatus: 200},
		"GHES style: only under /api/v3": {
			style: ghfake.StyleGHES, path: "/orgs/acme/actions/runners/{orgID}", wantStatus: 404,
		},
		"GHES style under /api/v3": {
			style: ghfake.StyleGHES, path: "/api/v3/orgs/acme/actions/runners/{orgID}", wantStatus: 200,
		},
		"dotcom style: no /api/v3": {
			style: ghfake.StyleDotCom, path: "/api/v3/orgs/acme/actions/runners/{orgID}", wantStatus: 404,
		},
		"wrong token: 401": {token: "other", path: "/orgs/acme/actions/runners/{orgID}", wantStatus: 401},
		"injected fault": {
			fault: &ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 429, RetryAfterSeconds: 5, Method: "GET", PathContains: "/runners/"},
			path:  "/orgs/acme/actions/runners/{orgID}", wantStatus: 429,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := serve(t, ghfake.WithToken(orString(tc.token, "good")))
			f.SetStyle(tc.style)
			id := f.AddRunner(org, "r1")
			f.SetBusy(org, "r1", true)
			f.SetOnline(org, "r1", false)
			other := f.AddRunner(repo, "other")
			if tc.fault != nil {
				f.InjectFault(*tc.fault)
			}
			path := strings.NewReplacer("{orgID}", strconv.FormatInt(id, 10), "{repoID}", strconv.FormatInt(other, 10)).Replace(tc.path)

			a := do(t, http.MethodGet, srv.URL+path, map[string]string{"Authorization": "Bearer good"})

			if a.status != tc.wantStatus {
				t.Errorf("status %d, want %d (%s)", a.status, tc.wantStatus, a.body)
			}
			if tc.wantBody != "" && a.body != tc.wantBody {
				t.Errorf("body %s\nwant %s", a.body, tc.wantBody)
			}
			if tc.wantStatus == 200 {
				var r ghfake.Runner
				if err := json.Unmarshal([]byte(a.body), &r); err != nil || r.Name == "" {
					t.Errorf("body %s is not a runner: %v", a.body, err)
				}
				if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
					t.Errorf("Content-Type %q", ct)
				}
				// GHES has rate limiting off by default.
				wantRate := tc.style != ghfake.StyleGHES
				if got := a.header.Get("X-RateLimit-Remaining") != ""; got != wantRate {
					t.Errorf("rate-limit header present = %v, want %v", got, wantRate)
				}
			}
			reqs := f.Requests()
			if len(reqs) != 1 || reqs[0].Method != "GET" || reqs[0].Path != path || reqs[0].Status != tc.wantStatus {
				t.Errorf("log %+v, want one GET %s answered %d", reqs, path, tc.wantStatus)
			}
			if f.Count("GET") != 1 || f.Count("DELETE") != 0 {
				t.Errorf("counts GET %d DELETE %d", f.Count("GET"), f.Count("DELETE"))
			}
			// A GET never changes anything.
			if _, ok := f.Runner(org, "r1"); !ok {
				t.Error("GET removed the runner")
			}
		})
	}
}

func orString(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func TestRateLimitHeaders(t *testing.T) {
	tests := map[string]struct{ status int }{
		"403 by default": {status: 0},
		"429":            {status: 429},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := serve(t)
			reset := time.Now().Add(30 * time.Minute).Truncate(time.Second)
			f.SetRateLimit(10, 2, reset)
			if tc.status != 0 {
				f.SetRateLimitStatus(tc.status)
			}
			u := srv.URL + "/orgs/acme/actions/runners"
			for i, want := range []struct {
				status    int
				remaining string
			}{{200, "1"}, {200, "0"}, {orDefault(tc.status, 403), "0"}} {
				a := do(t, http.MethodGet, u, nil)
				if a.status != want.status || a.header.Get("X-RateLimit-Remaining") != want.remaining {
					t.Fatalf("request %d: %d remaining %q; want %d %q", i, a.status, a.header.Get("X-RateLimit-Remaining"), want.status, want.remaining)
				}
				for k, v := range map[string]string{
					"X-RateLimit-Limit":    "10",
					"X-RateLimit-Reset":    strconv.FormatInt(reset.Unix(), 10),
					"X-RateLimit-Resource": "core",
				} {
					if got := a.header.Get(k); got != v {
						t.Errorf("request %d: %s = %q, want %q", i, k, got, v)
					}
				}
				if i == 2 && !strings.Contains(a.body, "API rate limit exceeded") {
					t.Errorf("limit body %s", a.body)
				}
			}
		})
	}
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func TestAuth(t *testing.T) {
	_, srv := serve(t, ghfake.WithToken("s3cret"), ghfake.WithScopes(org))
	u := srv.URL + "/orgs/acme/actions/runners"
	tests := map[string]struct {
		auth string
		want int
	}{
		"no header":    {want: 401},
		"wrong token":  {auth: "Bearer nope", want: 401},
		"basic scheme": {auth: "Basic s3cret", want: 401},
		"bearer":       {auth: "Bearer s3cret", want: 200},
		"token scheme": {auth: "token s3cret", want: 200},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := do(t, http.MethodGet, u, map[string]string{"Authorization": tc.auth})
			if a.status != tc.want {
				t.Errorf("status %d, want %d", a.status, tc.want)
			}
			if tc.want == 401 && !strings.Contains(a.body, `"message":"Bad credentials"`) {
				t.Errorf("401 body %s", a.body)
			}
		})
	}
}

func TestInstallationTokenRejectsMalformedJWT(t *testing.T) {
	_, srv := serve(t, ghfake.WithScopes(org))
	u := srv.URL + "/app/installations/7/access_tokens"
	for name, auth := range map[string]string{
		"no header":   "",
		"two parts":   "Bearer a.b",
		"not base64":  "Bearer !.!.!",
		"not a token": "Bearer abc",
	} {
		t.Run(name, func(t *testing.T) {
			if a := do(t, http.MethodPost, u, map[string]string{"Authorization": auth}); a.status != 401 {
				t.Errorf("status %d, want 401", a.status)
			}
		})
	}
}

// An injected secondary limit holds the credential for its retry-after, or
// a minute when it names none (GITHUB-API.md): a request sent before then is
// counted as sent while limited, so a test sees a client that ignored it.
func TestInjectedSecondaryLimitCountsSendsWhileLimited(t *testing.T) {
	for name, tc := range map[string]struct {
		retryAfter int
		wait       time.Duration
	}{
		"with retry-after":    {retryAfter: 20, wait: 20 * time.Second},
		"without retry-after": {wait: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			f, srv := serve(t)
			now := time.Unix(1_800_000_000, 0)
			f.SetClock(func() time.Time { return now })
			f.SetToken("s3cret")
			u, auth := srv.URL+"/orgs/acme/actions/runners", map[string]string{"Authorization": "Bearer s3cret"}
			f.InjectFault(ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, RetryAfterSeconds: tc.retryAfter, Times: 1})
			if a := do(t, http.MethodGet, u, auth); a.status != http.StatusForbidden {
				t.Fatalf("the limited request: %d, want 403", a.status)
			}
			now = now.Add(tc.wait - time.Second)
			do(t, http.MethodGet, u, auth)
			now = now.Add(time.Second)
			do(t, http.MethodGet, u, auth)
			if got := f.SecondaryUsage()[ghfake.TokenCredential("s3cret")].SentWhileLimited; got != 1 {
				t.Fatalf("sent while limited %d, want 1 (the request a second before the wait ended)", got)
			}
		})
	}
}

func TestFaults(t *testing.T) {
	f, srv := serve(t)
	u := srv.URL + "/orgs/acme/actions/runners"
	f.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 503, Method: "DELETE"})
	f.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 500, Times: 2, After: 1})
	f.InjectFault(ghfake.Fault{Kind: ghfake.FaultSecondaryRateLimit, Status: 429, RetryAfterSeconds: 17, Times: 1})

	var got []string
	for range 4 {
		a := do(t, http.MethodGet, u, nil)
		got = append(got, strconv.Itoa(a.status)+" "+a.header.Get("Retry-After"))
	}
	want := []string{"429 17", "500 ", "500 ", "200 "}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("GET statuses %q, want %q", got, want)
	}
	if a := do(t, http.MethodDelete, u+"/1", nil); a.status != 503 {
		t.Errorf("DELETE status %d, want 503", a.status)
	}
	f.ClearFaults()
	if a := do(t, http.MethodDelete, u+"/1", nil); a.status != 404 {
		t.Errorf("after ClearFaults: DELETE status %d, want 404", a.status)
	}

	f.InjectFault(ghfake.Fault{Kind: ghfake.FaultMalformedJSON, Times: 1})
	if a := do(t, http.MethodGet, u, nil); a.status != 200 || json.Valid([]byte(a.body)) {
		t.Errorf("malformed: %d %s", a.status, a.body)
	}
	f.InjectFault(ghfake.Fault{Kind: ghfake.FaultPrimaryRateLimit, Times: 1, ResetAfterSeconds: 99})
	a := do(t, http.MethodGet, u, nil)
	reset, _ := strconv.ParseInt(a.header.Get("X-RateLimit-Reset"), 10, 64)
	if a.status != 403 || a.header.Get("X-RateLimit-Remaining") != "0" || time.Until(time.Unix(reset, 0)) < 90*time.Second {
		t.Errorf("primary: %d remaining %s reset %d", a.status, a.header.Get("X-RateLimit-Remaining"), reset)
	}
}

func TestLatencyAndHangHonorCancellation(t *testing.T) {
	tests := map[string]func(f *ghfake.Fake){
		"latency": func(f *ghfake.Fake) { f.SetLatency(time.Minute) },
		"hang":    func(f *ghfake.Fake) { f.InjectFault(ghfake.Fault{Kind: ghfake.FaultHang}) },
	}
	for name, setup := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := serve(t)
			setup(f)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/orgs/acme/actions/runners", nil)
			start := time.Now()
			if _, err := http.DefaultClient.Do(req); err == nil {
				t.Fatal("want a timeout")
			}
			// The handler returns once the client is gone, so Close does not block.
			srv.Close()
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s", d)
			}
			if reqs := f.Requests(); len(reqs) != 1 || reqs[0].Status != 0 {
				t.Errorf("log %+v, want one entry with status 0", reqs)
			}
		})
	}
}

func TestRequestLog(t *testing.T) {
	f, srv := serve(t)
	id := f.AddRunner(org, "r1")
	do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners?name=r1&per_page=100", nil)
	do(t, http.MethodDelete, fmt.Sprintf("%s/orgs/acme/actions/runners/%d", srv.URL, id), nil)
	do(t, http.MethodGet, srv.URL+"/_fake/requests", nil) // control: not logged

	reqs := f.Requests()
	if len(reqs) != 2 {
		t.Fatalf("log has %d entries: %+v", len(reqs), reqs)
	}
	if r := reqs[0]; r.Method != "GET" || r.Path != "/orgs/acme/actions/runners" || r.Query.Get("name") != "r1" || r.Status != 200 || r.Time.IsZero() {
		t.Errorf("entry 0: %+v", r)
	}
	if r := reqs[1]; r.Method != "DELETE" || r.Status != 204 {
		t.Errorf("entry 1: %+v", r)
	}
	if f.Count("GET") != 1 || f.Count("DELETE") != 1 || f.Count("") != 2 {
		t.Errorf("counts GET %d DELETE %d all %d", f.Count("GET"), f.Count("DELETE"), f.Count(""))
	}
	f.ResetLog()
	if len(f.Requests()) != 0 {
		t.Error("ResetLog left entries")
	}
}

func TestRunnerControls(t *testing.T) {
	f := ghfake.New()
	a := f.AddRunner(org, "r1")
	b := f.AddRunner(repo, "r1")
	if b <= a {
		t.Errorf("IDs not increasing: %d then %d", a, b)
	}
	c := f.ReRegister(org, "r1")
	if c <= b {
		t.Errorf("re-registered ID %d not new", c)
	}
	if rs := f.Runners(org); len(rs) != 1 || rs[0].ID != c {
		t.Errorf("org runners %+v", rs)
	}
	if !f.SetBusy(org, "r1", true) || f.SetBusy(org, "nope", true) {
		t.Error("SetBusy result wrong")
	}
	if r, ok := f.Runner(org, "r1"); !ok || !r.Busy || r.Status != "online" {
		t.Errorf("Runner = %+v, %v", r, ok)
	}
	if !f.RemoveRunnerByName(org, "r1") || f.RemoveRunnerByName(org, "r1") {
		t.Error("RemoveRunnerByName result wrong")
	}
	if _, ok := f.Runner(repo, "r1"); !ok {
		t.Error("repo runner affected by org removal")
	}
}

func TestControlHandler(t *testing.T) {
	f, srv := serve(t)
	post := func(path, body string) *http.Response {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := post("/_fake/runners", `{"scope":{"kind":"org","name":"acme"},"name":"r1","busy":true}`); r.StatusCode != 201 {
		t.Fatalf("add runner: %d", r.StatusCode)
	}
	if r, ok := f.Runner(org, "r1"); !ok || !r.Busy {
		t.Fatalf("runner %+v %v", r, ok)
	}
	if r := post("/_fake/runners/state", `{"scope":{"kind":"org","name":"acme"},"name":"r1","busy":false,"online":false}`); r.StatusCode != 204 {
		t.Fatalf("state: %d", r.StatusCode)
	}
	if r, _ := f.Runner(org, "r1"); r.Busy || r.Status != "offline" {
		t.Errorf("runner after state %+v", r)
	}
	if r := post("/_fake/runners/state", `{"scope":{"kind":"org","name":"acme"},"name":"nope","busy":true}`); r.StatusCode != 404 {
		t.Errorf("state of unknown runner: %d", r.StatusCode)
	}
	if r := post("/_fake/runners", `{"scope":{"kind":"team","name":"x"},"name":"r1"}`); r.StatusCode != 400 {
		t.Errorf("bad scope: %d", r.StatusCode)
	}
	if r := post("/_fake/faults", `{"kind":"status","status":502,"times":1}`); r.StatusCode != 204 {
		t.Fatalf("fault: %d", r.StatusCode)
	}
	if a := do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners", nil); a.status != 502 {
		t.Errorf("fault not applied: %d", a.status)
	}
	if r := post("/_fake/faults", `{"kind":"hang","delay":"10ms","times":1}`); r.StatusCode != 204 {
		t.Fatalf("hang fault: %d", r.StatusCode)
	}
	if r := post("/_fake/latency", `{"latency":"1ms"}`); r.StatusCode != 204 {
		t.Fatalf("latency: %d", r.StatusCode)
	}
	if r := post("/_fake/ratelimit", `{"limit":100,"remaining":50,"resetAfterSeconds":60}`); r.StatusCode != 204 {
		t.Fatalf("ratelimit: %d", r.StatusCode)
	}
	if a := do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners", nil); a.status != 200 || a.header.Get("X-RateLimit-Remaining") != "49" {
		t.Errorf("after control: %d remaining %s", a.status, a.header.Get("X-RateLimit-Remaining"))
	}
	if r := post("/_fake/token", `{"token":"abc"}`); r.StatusCode != 204 {
		t.Fatalf("token: %d", r.StatusCode)
	}
	if r := post("/_fake/leniency", `{}`); r.StatusCode != 204 {
		t.Fatalf("leniency: %d", r.StatusCode)
	}
	if a := do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners", nil); a.status != 401 {
		t.Errorf("token not enforced: %d", a.status)
	}

	a := do(t, http.MethodGet, srv.URL+"/_fake/requests", nil)
	var log []ghfake.Request
	if err := json.Unmarshal([]byte(a.body), &log); err != nil {
		t.Fatal(err)
	}
	if len(log) != 3 || log[0].Status != 502 || log[1].Status != 200 || log[2].Status != 401 {
		t.Errorf("log over HTTP: %+v", log)
	}
	a = do(t, http.MethodGet, srv.URL+"/_fake/runners?kind=org&name=acme", nil)
	var runners []ghfake.Runner
	if err := json.Unmarshal([]byte(a.body), &runners); err != nil || len(runners) != 1 || runners[0].Name != "r1" {
		t.Errorf("runners over HTTP: %s", a.body)
	}
	if a := do(t, http.MethodDelete, srv.URL+"/_fake/runners?kind=org&name=acme&runner=r1", nil); a.status != 204 {
		t.Errorf("delete runner: %d", a.status)
	}
	if a := do(t, http.MethodDelete, srv.URL+"/_fake/requests", nil); a.status != 204 || f.Count("") != 0 {
		t.Errorf("reset log: %d, %d left", a.status, f.Count(""))
	}
}

// Many clients and controls at once; run with -race.
func TestConcurrentUse(t *testing.T) {
	f, srv := serve(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			name := fmt.Sprintf("r%d", i)
			id := f.AddRunner(org, name)
			f.SetBusy(org, name, i%2 == 0)
			do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners?name="+name, nil)
			a := do(t, http.MethodDelete, fmt.Sprintf("%s/orgs/acme/actions/runners/%d", srv.URL, id), nil)
			want := 204
			if i%2 == 0 {
				want = 422
			}
			if a.status != want {
				t.Errorf("%s: DELETE %d, want %d", name, a.status, want)
			}
			_ = f.Requests()
			_ = f.Runners(org)
		})
	}
	wg.Wait()
	if n := len(f.Runners(org)); n != 10 {
		t.Errorf("%d runners left, want 10 busy ones", n)
	}
	if f.Count("") != 40 {
		t.Errorf("%d requests logged, want 40", f.Count(""))
	}
}
