package metricsauth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	_ TokenReviewer  = &apiServer{}
	_ AccessReviewer = accessReviews{}
)

// apiServer answers reviews the way the API server would for a fixed set of
// tokens and grants, and counts what it was asked.
type apiServer struct {
	users                       map[string]authnv1.UserInfo // token -> user
	grants                      map[string]bool             // username -> may get /metrics
	down                        bool
	tokenReviews, accessReviews int
	lastAccess                  authzv1.SubjectAccessReviewSpec
}

func (a *apiServer) Create(_ context.Context, r *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	a.tokenReviews++
	if a.down {
		return nil, errors.New("connection refused")
	}
	out := r.DeepCopy()
	if u, ok := a.users[r.Spec.Token]; ok {
		out.Status = authnv1.TokenReviewStatus{Authenticated: true, User: u}
	} else {
		out.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
	}
	return out, nil
}

type accessReviews struct{ *apiServer }

func (a accessReviews) Create(_ context.Context, r *authzv1.SubjectAccessReview, _ metav1.CreateOptions) (*authzv1.SubjectAccessReview, error) {
	a.accessReviews++
	a.lastAccess = r.Spec
	if a.down {
		return nil, errors.New("connection refused")
	}
	out := r.DeepCopy()
	nr := r.Spec.NonResourceAttributes
	out.Status.Allowed = a.grants[r.Spec.User] && nr != nil && nr.Verb == "get" && nr.Path == "/metrics"
	return out, nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newGuard(t *testing.T) (*apiServer, *clock, http.Handler) {
	t.Helper()
	api := &apiServer{
		users: map[string]authnv1.UserInfo{
			"scraper-token": {Username: "system:serviceaccount:monitoring:prometheus", UID: "u1", Groups: []string{"system:serviceaccounts"}},
			"other-token":   {Username: "system:serviceaccount:ci:someone", UID: "u2"},
		},
		grants: map[string]bool{"system:serviceaccount:monitoring:prometheus": true},
	}
	c := &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	h, err := New(api, accessReviews{api}, c.now).Filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("runner_guard_decisions_total 1\n"))
	}))
	if err != nil {
		t.Fatal(err)
	}
	return api, c, h
}

func get(h http.Handler, method, path, authorization string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestFilterAnswers(t *testing.T) {
	cases := map[string]struct {
		method, path, authorization string
		down                        bool
		want                        int
	}{
		"no token":                       {authorization: "", want: http.StatusUnauthorized},
		"basic credentials":              {authorization: "Basic c2NyYXBlcjpwdw==", want: http.StatusUnauthorized},
		"bearer without a token":         {authorization: "Bearer ", want: http.StatusUnauthorized},
		"a token the API server refuses": {authorization: "Bearer not-a-token", want: http.StatusUnauthorized},
		"a user without the grant":       {authorization: "Bearer other-token", want: http.StatusForbidden},
		"a user with the grant":          {authorization: "Bearer scraper-token", want: http.StatusOK},
		"scheme in lower case":           {authorization: "bearer scraper-token", want: http.StatusOK},
		"a path outside the grant":       {path: "/debug/pprof/", authorization: "Bearer scraper-token", want: http.StatusForbidden},
		"a verb outside the grant":       {method: http.MethodPost, authorization: "Bearer scraper-token", want: http.StatusForbidden},
		"API server unreachable":         {authorization: "Bearer scraper-token", down: true, want: http.StatusInternalServerError},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			api, _, h := newGuard(t)
			api.down = c.down
			method, path := c.method, c.path
			if method == "" {
				method = http.MethodGet
			}
			if path == "" {
				path = "/metrics"
			}
			rec := get(h, method, path, c.authorization)
			if rec.Code != c.want {
				t.Fatalf("%s %s with %q: %d %q, want %d", method, path, c.authorization, rec.Code, rec.Body.String(), c.want)
			}
			if (rec.Code == http.StatusOK) != (rec.Body.String() == "runner_guard_decisions_total 1\n") {
				t.Errorf("body %q with status %d: metrics must be served exactly when allowed", rec.Body.String(), rec.Code)
			}
		})
	}
}

func TestFilterAsksForTheUserAsTheAPIServerNamedIt(t *testing.T) {
	api, _, h := newGuard(t)
	if rec := get(h, http.MethodGet, "/metrics", "Bearer scraper-token"); rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	s := api.lastAccess
	if s.User != "system:serviceaccount:monitoring:prometheus" || s.UID != "u1" || len(s.Groups) != 1 || s.Groups[0] != "system:serviceaccounts" {
		t.Errorf("SubjectAccessReview for %+v; want the TokenReview's user, UID and groups", s)
	}
	if s.NonResourceAttributes == nil || s.NonResourceAttributes.Verb != "get" || s.NonResourceAttributes.Path != "/metrics" || s.ResourceAttributes != nil {
		t.Errorf("SubjectAccessReview attributes %+v / %+v; want non-resource get /metrics", s.NonResourceAttributes, s.ResourceAttributes)
	}
}

func TestFilterRemembersAnswersForTheirTTL(t *testing.T) {
	cases := map[string]struct {
		token                 string
		wait                  time.Duration
		wantTokens, wantAsked int
	}{
		"allowed, a scrape later":            {token: "scraper-token", wait: 15 * time.Second, wantTokens: 1, wantAsked: 1},
		"allowed, after the token TTL":       {token: "scraper-token", wait: authnTTL + time.Second, wantTokens: 2, wantAsked: 1},
		"allowed, after the allow TTL":       {token: "scraper-token", wait: allowTTL + time.Second, wantTokens: 2, wantAsked: 2},
		"denied, inside the deny TTL":        {token: "other-token", wait: denyTTL - time.Second, wantTokens: 1, wantAsked: 1},
		"denied, after the deny TTL":         {token: "other-token", wait: denyTTL + time.Second, wantTokens: 1, wantAsked: 2},
		"unknown token, inside its TTL":      {token: "nobody", wait: 10 * time.Second, wantTokens: 1, wantAsked: 0},
		"unknown token, after the token TTL": {token: "nobody", wait: authnTTL + time.Second, wantTokens: 2, wantAsked: 0},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			api, clk, h := newGuard(t)
			first := get(h, http.MethodGet, "/metrics", "Bearer "+c.token).Code
			clk.t = clk.t.Add(c.wait)
			if again := get(h, http.MethodGet, "/metrics", "Bearer "+c.token).Code; again != first {
				t.Errorf("second answer %d, first %d: nothing changed in between", again, first)
			}
			if api.tokenReviews != c.wantTokens || api.accessReviews != c.wantAsked {
				t.Errorf("%d TokenReviews and %d SubjectAccessReviews, want %d and %d", api.tokenReviews, api.accessReviews, c.wantTokens, c.wantAsked)
			}
		})
	}
}

func TestFilterDoesNotRememberFailures(t *testing.T) {
	api, _, h := newGuard(t)
	api.down = true
	if rec := get(h, http.MethodGet, "/metrics", "Bearer scraper-token"); rec.Code != http.StatusInternalServerError {
		t.Fatalf("API server down: %d, want 500", rec.Code)
	}
	api.down = false
	if rec := get(h, http.MethodGet, "/metrics", "Bearer scraper-token"); rec.Code != http.StatusOK {
		t.Fatalf("API server back: %d, want 200 at once", rec.Code)
	}
}

func TestCachesStayBounded(t *testing.T) {
	api, _, _ := newGuard(t)
	g := New(api, accessReviews{api}, time.Now)
	for i := range 3 * maxRemembered {
		g.grants.Add(string(rune(i)), true, time.Hour)
		g.users.Add(i, nil, time.Hour)
	}
	if n, m := len(g.grants.Keys()), len(g.users.Keys()); n > maxRemembered || m > maxRemembered {
		t.Errorf("%d grants and %d users remembered, want at most %d each", n, m, maxRemembered)
	}
}
