package ghfake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v93/github"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
	"github.com/runner-guard/runner-guard/test/process"
)

// clocked serves a fake whose clock the test moves. It starts at the real
// time, as JWTs are made with it.
func clocked(t *testing.T) (*ghfake.Fake, string, *fakeclock.Clock) {
	t.Helper()
	f, srv := serve(t)
	clock := fakeclock.New(time.Now().Truncate(time.Second))
	f.SetClock(clock.Now)
	return f, srv.URL, clock
}

func TestSecondaryLimitPoints(t *testing.T) {
	type step struct {
		after  time.Duration // clock advance before the requests
		method string
		n      int
		want   int // status of each
	}
	ten := ghfake.SecondaryLimit{PointsPerMinute: 10}
	// refusedAt45s, under ten: 5 GETs, 5 more at +30 s, and at +45 s one
	// more, refused: 10 points are in the window and it makes 11. The first
	// 5 leave at +60 s, 15 s later.
	refusedAt45s := []step{
		{method: http.MethodGet, n: 5, want: 200},
		{after: 30 * time.Second, method: http.MethodGet, n: 5, want: 200},
		{after: 15 * time.Second, method: http.MethodGet, n: 1, want: 403},
	}
	afterRefusal := func(next step) []step { return append(slices.Clip(refusedAt45s), next) }
	tests := map[string]struct {
		limit          ghfake.SecondaryLimit
		steps          []step
		wantRetryAfter string // of the last answer
		want           ghfake.SecondaryUsage
	}{
		"GETs cost 1: the 11th in a minute is refused": {
			limit: ten,
			steps: []step{
				{method: http.MethodGet, n: 10, want: 200},
				{method: http.MethodGet, n: 1, want: 403},
			},
			wantRetryAfter: "60",
			want:           ghfake.SecondaryUsage{Points: 11, MaxPoints: 11, Requests: 11, Limited: 1},
		},
		"DELETEs cost 5, and so does a 404": {
			limit: ten,
			steps: []step{
				{method: http.MethodDelete, n: 2, want: 404},
				{method: http.MethodGet, n: 1, want: 403},
			},
			wantRetryAfter: "60",
			want:           ghfake.SecondaryUsage{Points: 11, MaxPoints: 11, Requests: 3, Limited: 1},
		},
		"the window rolls: the oldest points free up first": {
			limit:          ten,
			steps:          refusedAt45s,
			wantRetryAfter: "15",
			want:           ghfake.SecondaryUsage{Points: 11, MaxPoints: 11, Requests: 11, Limited: 1},
		},
		"waiting out retry-after is enough, and is not sending while limited": {
			limit: ten,
			steps: afterRefusal(step{after: 15 * time.Second, method: http.MethodGet, n: 4, want: 200}),
			// 5 from +30 s, the refused one and these 4.
			want: ghfake.SecondaryUsage{Points: 10, MaxPoints: 11, Requests: 15, Limited: 1},
		},
		"a request before retry-after has passed is refused and counted": {
			limit: ten,
			// 1 s before the first refusal's retry-after has passed.
			steps:          afterRefusal(step{after: 14 * time.Second, method: http.MethodGet, n: 1, want: 403}),
			wantRetryAfter: "1",
			want:           ghfake.SecondaryUsage{Points: 12, MaxPoints: 12, Requests: 12, Limited: 2, SentWhileLimited: 1},
		},
		"429 when asked": {
			limit: ghfake.SecondaryLimit{PointsPerMinute: 5, Status: http.StatusTooManyRequests},
			steps: []step{
				{method: http.MethodDelete, n: 1, want: 404},
				{method: http.MethodDelete, n: 1, want: 429},
			},
			wantRetryAfter: "60",
			want:           ghfake.SecondaryUsage{Points: 10, MaxPoints: 10, Requests: 2, Limited: 1},
		},
		"off: recorded, never refused": {
			limit: ghfake.SecondaryLimit{Off: true, PointsPerMinute: 10},
			steps: []step{
				{method: http.MethodDelete, n: 4, want: 404},
				{after: 59 * time.Second, method: http.MethodGet, n: 1, want: 200},
				{after: time.Second, method: http.MethodGet, n: 1, want: 200},
			},
			want: ghfake.SecondaryUsage{Points: 2, MaxPoints: 21, Requests: 6},
		},
		"GitHub's default: 180 DELETEs a minute": {
			steps: []step{
				{method: http.MethodDelete, n: 180, want: 404},
				{method: http.MethodGet, n: 1, want: 403},
			},
			wantRetryAfter: "60",
			want:           ghfake.SecondaryUsage{Points: 901, MaxPoints: 901, Requests: 181, Limited: 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, base, clock := clocked(t)
			if tc.limit != (ghfake.SecondaryLimit{}) {
				f.SetSecondaryLimit(tc.limit)
			}
			var last answer
			for i, s := range tc.steps {
				clock.Advance(s.after)
				for j := range s.n {
					u := base + "/orgs/acme/actions/runners"
					if s.method == http.MethodDelete {
						u += "/" + strconv.Itoa(j+1)
					}
					last = do(t, s.method, u, bearer("t1"))
					if last.status != s.want {
						t.Fatalf("step %d request %d: %s %d, want %d: %s", i, j, s.method, last.status, s.want, last.body)
					}
				}
			}
			if got := last.header.Get("Retry-After"); got != tc.wantRetryAfter {
				t.Errorf("retry-after %q, want %q", got, tc.wantRetryAfter)
			}
			got := f.SecondaryUsage()[ghfake.TokenCredential("t1")]
			tc.want.Credential = ghfake.TokenCredential("t1")
			tc.want.PeakConcurrent = 1 // one request at a time
			tc.want.LimitedUntil = got.LimitedUntil
			if got != tc.want {
				t.Errorf("usage\n got %+v\nwant %+v", got, tc.want)
			}
			if limited := f.CountMatching(ghfake.RequestMatch{}) - countUnlimited(f.Requests()); limited != tc.want.Limited {
				t.Errorf("%d requests logged as limited, want %d", limited, tc.want.Limited)
			}
		})
	}
}

func countUnlimited(log []ghfake.Request) int {
	n := 0
	for _, r := range log {
		if !r.Limited {
			n++
		}
	}
	return n
}

// The refusal is what GitHub documents, and go-github reads it as an
// AbuseRateLimitError with the wait.
func TestSecondaryLimitAnswer(t *testing.T) {
	f, base, clock := clocked(t)
	f.SetToken("t1")
	f.SetSecondaryLimit(ghfake.SecondaryLimit{PointsPerMinute: 3})
	f.AddRunner(org, "r1")
	for range 3 {
		if a := do(t, http.MethodGet, base+"/orgs/acme/actions/runners", bearer("t1")); a.status != 200 {
			t.Fatalf("GET %d %s", a.status, a.body)
		}
	}
	clock.Advance(20 * time.Second)
	a := do(t, http.MethodGet, base+"/orgs/acme/actions/runners", bearer("t1"))
	if a.status != http.StatusForbidden {
		t.Fatalf("4th GET %d, want 403", a.status)
	}
	var body map[string]string
	if err := json.Unmarshal([]byte(a.body), &body); err != nil {
		t.Fatal(err)
	}
	if len(body) != 2 || body["documentation_url"] != ghfake.SecondaryDocsURL ||
		body["message"] != ghfake.SecondaryLimitMessage+a.header.Get("X-GitHub-Request-Id")+"." {
		t.Errorf("body %s", a.body)
	}
	for k, want := range map[string]string{
		"Retry-After":           "40",
		"X-RateLimit-Limit":     "5000",
		"X-RateLimit-Remaining": "4997", // the primary limit is not what refused it
		"X-RateLimit-Resource":  "core",
		"Content-Type":          "application/json; charset=utf-8",
	} {
		if got := a.header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}

	gh := newGitHub(t, base, "t1")
	_, _, err := gh.Actions.ListOrganizationRunners(context.Background(), "acme", nil)
	var abuse *github.AbuseRateLimitError
	if !errors.As(err, &abuse) {
		t.Fatalf("go-github error %T %v, want *github.AbuseRateLimitError", err, err)
	}
	// Sent 20 s in, before the first refusal's 40 s had passed: refused again,
	// with what is left of the wait.
	if abuse.RetryAfter == nil || *abuse.RetryAfter != 40*time.Second {
		t.Errorf("RetryAfter %v, want 40s", abuse.RetryAfter)
	}
	if u := f.SecondaryUsage()[ghfake.TokenCredential("t1")]; u.SentWhileLimited != 1 || u.Limited != 2 {
		t.Errorf("usage %+v, want 2 limited, 1 of them sent while limited", u)
	}
}

// A primary limit that is spent answers as itself, a secondary one cannot
// be seen through it; GitHub Enterprise Server, rate limiting off by
// default, records without refusing.
func TestSecondaryLimitBesideOthers(t *testing.T) {
	tests := map[string]struct {
		setup      func(*ghfake.Fake)
		path       string
		wantStatus int
		wantRemain string
	}{
		"primary spent": {
			setup:      func(f *ghfake.Fake) { f.SetRateLimit(10, 0, time.Time{}) },
			path:       "/orgs/acme/actions/runners",
			wantStatus: 403, wantRemain: "0",
		},
		"GHES": {
			setup:      func(f *ghfake.Fake) { f.SetStyle(ghfake.StyleGHES) },
			path:       "/api/v3/orgs/acme/actions/runners",
			wantStatus: 200,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, base, _ := clocked(t)
			f.SetSecondaryLimit(ghfake.SecondaryLimit{PointsPerMinute: 1})
			tc.setup(f)
			for i := range 3 {
				a := do(t, http.MethodGet, base+tc.path, bearer("t1"))
				if a.status != tc.wantStatus || a.header.Get("X-RateLimit-Remaining") != tc.wantRemain || a.header.Get("Retry-After") != "" {
					t.Fatalf("request %d: %d remaining %q retry-after %q, want %d %q and no retry-after",
						i, a.status, a.header.Get("X-RateLimit-Remaining"), a.header.Get("Retry-After"), tc.wantStatus, tc.wantRemain)
				}
			}
			if u := f.SecondaryUsage()[ghfake.TokenCredential("t1")]; u.Points != 3 || u.Limited != 0 {
				t.Errorf("usage %+v, want 3 points recorded, none limited", u)
			}
		})
	}
}

// Budgets are per credential: a token's, an installation's (shared by every
// token minted for it), an App's JWT.
func TestSecondaryLimitPerCredential(t *testing.T) {
	f, base, _ := clocked(t)
	key := newKey(t)
	f.AddApp(appID, &key.PublicKey)
	f.SetToken("pat")
	acme := f.AddInstallation(appID, "acme")
	other := f.AddInstallation(appID, "other")
	jwt := appJWT(t, key)
	tokA1 := tokenOf(t, installToken(t, base, jwt, acme))
	tokA2 := tokenOf(t, installToken(t, base, jwt, acme))
	tokB := tokenOf(t, installToken(t, base, jwt, other))
	f.ResetSecondaryUsage()
	f.SetSecondaryLimit(ghfake.SecondaryLimit{PointsPerMinute: 5})

	get := func(tok string) int {
		return do(t, http.MethodGet, base+"/orgs/acme/actions/runners", bearer(tok)).status
	}
	for i := range 5 {
		if s := get([]string{tokA1, tokA2}[i%2]); s != 200 {
			t.Fatalf("GET %d of acme's installation %d, want 200", i, s)
		}
	}
	if s := get(tokA2); s != 403 {
		t.Errorf("6th GET of acme's installation (two tokens) %d, want 403", s)
	}
	if s := get("pat"); s != 200 {
		t.Errorf("the token's GET %d, want 200: its own budget", s)
	}
	if s := do(t, http.MethodGet, base+"/orgs/other/actions/runners", bearer(tokB)).status; s != 200 {
		t.Errorf("the other installation's GET %d, want 200: its own budget", s)
	}
	installToken(t, base, jwt, acme)
	do(t, http.MethodGet, base, nil)

	got := map[string][2]int{} // credential -> points, limited
	for c, u := range f.SecondaryUsage() {
		got[c] = [2]int{u.Points, u.Limited}
	}
	want := map[string][2]int{
		ghfake.InstallationCredential(acme):  {6, 1},
		ghfake.InstallationCredential(other): {1, 0},
		ghfake.TokenCredential("pat"):        {1, 0},
		ghfake.AppCredential(appID):          {5, 0},
		ghfake.Anonymous:                     {1, 0},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("points, limited per credential\n got %v\nwant %v", got, want)
	}
	if n := f.CountMatching(ghfake.RequestMatch{Credential: ghfake.InstallationCredential(acme), Op: ghfake.OpList}); n != 6 {
		t.Errorf("%d lists logged for acme's installation, want 6", n)
	}
}

// GitHub allows at most 100 concurrent requests per credential.
func TestSecondaryLimitConcurrency(t *testing.T) {
	f, base, _ := clocked(t)
	f.InjectFault(ghfake.Fault{Kind: ghfake.FaultHang, Times: ghfake.DefaultSecondaryConcurrent})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for range ghfake.DefaultSecondaryConcurrent {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/orgs/acme/actions/runners", nil)
			req.Header.Set("Authorization", "Bearer t1")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	cred := ghfake.TokenCredential("t1")
	inFlight := func(want int) func() error {
		return func() error {
			if n := f.SecondaryUsage()[cred].InFlight; n != want {
				return fmt.Errorf("%d in flight", n)
			}
			return nil
		}
	}
	process.Eventually(t, t.Context(), "100 requests in flight", 10*time.Second, inFlight(100))

	if a := do(t, http.MethodGet, base+"/orgs/acme/actions/runners", bearer("t1")); a.status != 403 || a.header.Get("Retry-After") != "1" {
		t.Errorf("101st concurrent request %d retry-after %q, want 403 and 1", a.status, a.header.Get("Retry-After"))
	}
	if a := do(t, http.MethodGet, base+"/orgs/acme/actions/runners", bearer("t2")); a.status != 200 {
		t.Errorf("another credential's request %d, want 200", a.status)
	}
	cancel()
	process.Eventually(t, t.Context(), "the hanging requests to end", 10*time.Second, inFlight(0))
	u := f.SecondaryUsage()[cred]
	if u.PeakConcurrent != 100 || u.Limited != 1 || u.Requests != 101 {
		t.Errorf("usage %+v, want peak 100, 1 limited of 101", u)
	}
	f.ResetSecondaryUsage()
	if u, ok := f.SecondaryUsage()[cred]; ok {
		t.Errorf("usage after reset %+v, want none", u)
	}
}

func TestRemoteSecondaryControls(t *testing.T) {
	f, srv := serve(t)
	g := &ghfake.Remote{BaseURL: srv.URL}
	ctx := context.Background()

	if err := g.SetSecondaryLimit(ctx, ghfake.SecondaryLimit{PointsPerMinute: 5, Status: 429}); err != nil {
		t.Fatal(err)
	}
	f.AddRunner(org, "r1")
	do(t, http.MethodDelete, srv.URL+"/orgs/acme/actions/runners/1", nil)
	if a := do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners", nil); a.status != 429 {
		t.Errorf("over the remote limit: %d, want 429", a.status)
	}
	st, err := g.SecondaryState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := ghfake.SecondaryLimit{PointsPerMinute: 5, MaxConcurrent: 100, Status: 429}
	if st.Limit != want || len(st.Usage) != 1 || st.Usage[0].Credential != ghfake.Anonymous || st.Usage[0].MaxPoints != 6 {
		t.Errorf("state %+v, want limit %+v and the anonymous credential at 6 points", st, want)
	}
	usage, err := g.SecondaryUsage(ctx)
	if err != nil || usage[ghfake.Anonymous].Limited != 1 {
		t.Errorf("SecondaryUsage = %+v, %v", usage, err)
	}
	if err := g.ResetSecondaryUsage(ctx); err != nil {
		t.Fatal(err)
	}
	if usage, err := g.SecondaryUsage(ctx); err != nil || len(usage) != 0 {
		t.Errorf("after reset %+v, %v", usage, err)
	}
	if err := g.SetSecondaryLimit(ctx, ghfake.SecondaryLimit{Off: true}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if a := do(t, http.MethodDelete, srv.URL+"/orgs/acme/actions/runners/1", nil); a.status != 404 {
			t.Errorf("with enforcement off: %d, want 404", a.status)
		}
	}
	for name, bad := range map[string]ghfake.SecondaryLimit{
		"status 500":        {Status: 500},
		"negative points":   {PointsPerMinute: -1},
		"negative parallel": {MaxConcurrent: -1},
	} {
		if err := g.SetSecondaryLimit(ctx, bad); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// newGitHub is a go-github client of the fake at base with token.
func newGitHub(t *testing.T, base, token string) *github.Client {
	t.Helper()
	u := base + "/"
	gh, err := github.NewClient(github.WithURLs(&u, &u), github.WithAuthToken(token))
	if err != nil {
		t.Fatal(err)
	}
	return gh
}
