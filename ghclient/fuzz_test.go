package ghclient_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/runner-guard/runner-guard/ghclient"
)

// fuzzAnswer is what the fuzzed GitHub answers to every request.
type fuzzAnswer struct {
	status int
	header http.Header
	body   []byte
}

// FuzzResponses answers every request with a fuzzed status, headers and body.
// Unregister and Status must not panic and must return a defined outcome or
// an error (never both, never neither).
func FuzzResponses(f *testing.F) {
	var (
		mu  sync.Mutex
		cur fuzzAnswer
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		a := cur
		mu.Unlock()
		for k, v := range a.header {
			w.Header()[k] = v
		}
		w.WriteHeader(a.status)
		_, _ = w.Write(a.body)
	}))
	f.Cleanup(srv.Close)

	f.Add(200, "Content-Type: application/json", []byte(`{"total_count":1,"runners":[{"id":5,"name":"r","status":"online","busy":false}]}`), uint8(0))
	f.Add(200, "Link: <http://x/orgs/acme/actions/runners?page=2>; rel=\"next\"", []byte(`{"total_count":1,"runners":[]}`), uint8(1))
	f.Add(204, "", []byte(nil), uint8(2))
	f.Add(422, "", []byte(`{"message":"Runner \"r\" is still running a job"}`), uint8(2))
	f.Add(403, "Retry-After: 7\nX-RateLimit-Remaining: 10", []byte(`{"message":"You have exceeded a secondary rate limit","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`), uint8(0))
	f.Add(429, "X-RateLimit-Remaining: 0\nX-RateLimit-Reset: 99999999999", []byte(`{}`), uint8(1))
	f.Add(200, "", []byte(`{"total_count": 1, "runners": [{"id": `), uint8(0))
	f.Add(404, "X-RateLimit-Remaining: -1", []byte(`null`), uint8(2))
	f.Add(200, "Content-Type: application/json", []byte(`{"id":5,"name":"r","os":"linux","status":"online","busy":false,"labels":[]}`), uint8(9))
	f.Add(200, "", []byte(`null`), uint8(9))

	f.Fuzz(func(t *testing.T, status int, headers string, body []byte, op uint8) {
		if status < 0 {
			status = -status
		}
		a := fuzzAnswer{status: 200 + status%400, header: http.Header{}, body: body}
		for _, line := range strings.Split(headers, "\n") {
			k, v, _ := strings.Cut(line, ":")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if httpguts.ValidHeaderFieldName(k) && httpguts.ValidHeaderFieldValue(v) && !strings.EqualFold(k, "Content-Length") && !strings.EqualFold(k, "Transfer-Encoding") {
				a.header.Add(k, v)
			}
		}
		mu.Lock()
		cur = a
		mu.Unlock()

		// A client per input: go-github remembers rate limits per client.
		// Every connection goes to the fuzzed server, whatever host a fuzzed
		// Location or Link header names: no input may reach the network or hang
		// on a dial.
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
		}}
		defer tr.CloseIdleConnections()
		c, err := ghclient.New(ghclient.Config{BaseURL: srv.URL + "/", AllowHTTP: true, Token: "t", Transport: tr})
		if err != nil {
			t.Fatal(err)
		}
		scope, _ := ghclient.OrgScope("acme")
		if op%4 == 3 {
			scope, _ = ghclient.RepoScope("acme/app")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		switch op % 3 {
		case 0, 1:
			// Bit 3 of op makes the hint untrusted: verified by a GET first.
			hint := ghclient.IDHint{ID: int64(op%2) * 5, Trusted: op&8 == 0}
			out, err := c.Unregister(ctx, scope, "r", hint)
			checkResult(t, err, out == ghclient.Removed || out == ghclient.NotFound || out == ghclient.Busy, out == 0, out)
		default:
			st, err := c.Status(ctx, scope, "r")
			valid := st.State == ghclient.StateIdle || st.State == ghclient.StateBusy || st.State == ghclient.StateNotFound
			checkResult(t, err, valid, st == (ghclient.RunnerStatus{}), st)
		}
	})
}

func checkResult(t *testing.T, err error, valid, zero bool, got any) {
	t.Helper()
	switch {
	case err == nil && !valid:
		t.Fatalf("no error and no defined result: %v", got)
	case err != nil && !zero:
		t.Fatalf("error %v together with result %v", err, got)
	case err != nil && err.Error() == "":
		t.Fatal("empty error message")
	}
	var rl *ghclient.RateLimited
	if errors.As(err, &rl) && rl.RetryAfter < time.Second {
		t.Fatalf("rate limit with retry after %s (< 1s): %v", rl.RetryAfter, err)
	}
}
