package ghclient

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v93/github"
)

func TestRateLimitedMapping(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	resp := func(status int, hdr map[string]string) *http.Response {
		h := http.Header{}
		for k, v := range hdr {
			h.Set(k, v)
		}
		req, _ := http.NewRequest(http.MethodDelete, "https://api.github.com/orgs/acme/actions/runners/1", nil)
		return &http.Response{StatusCode: status, Header: h, Request: req}
	}
	dur := func(d time.Duration) *time.Duration { return &d }

	tests := map[string]struct {
		err         error
		ghes        bool // GitHub Enterprise Server: no rate-limit headers is normal
		wantLimited bool
		wantPrimary bool
		wantWait    time.Duration
	}{
		"primary from response: until reset": {
			err:         &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: now.Add(90 * time.Second)}}, Response: resp(403, nil)},
			wantLimited: true, wantPrimary: true, wantWait: 90 * time.Second,
		},
		"primary with retry-after prefers retry-after": {
			err:         &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: now.Add(time.Hour)}}, Response: resp(429, map[string]string{"Retry-After": "12"})},
			wantLimited: true, wantPrimary: true, wantWait: 12 * time.Second,
		},
		"primary whose reset has passed: at least a second": {
			err:         &github.RateLimitError{Rate: github.Rate{Reset: github.Timestamp{Time: now.Add(-time.Minute)}}, Response: resp(403, nil)},
			wantLimited: true, wantPrimary: true, wantWait: time.Second,
		},
		"primary without reset: a minute": {
			err:         &github.RateLimitError{Response: resp(403, nil)},
			wantLimited: true, wantPrimary: true, wantWait: time.Minute,
		},
		"secondary with retry-after": {
			err:         &github.AbuseRateLimitError{Response: resp(403, map[string]string{"Retry-After": "45", "X-RateLimit-Remaining": "10"}), RetryAfter: dur(45 * time.Second)},
			wantLimited: true, wantWait: 45 * time.Second,
		},
		"secondary without any wait: a minute": {
			err:         &github.AbuseRateLimitError{Response: resp(403, map[string]string{"X-RateLimit-Remaining": "10"})},
			wantLimited: true, wantWait: time.Minute,
		},
		"secondary remembered client-side: time left": {
			err:         &github.AbuseRateLimitError{Response: resp(403, nil), RetryAfter: dur(8 * time.Second)},
			wantLimited: true, wantWait: 8 * time.Second,
		},
		"plain 403 with retry-after": {
			err:         fmt.Errorf("wrapped: %w", &github.ErrorResponse{Response: resp(403, map[string]string{"Retry-After": "20", "X-RateLimit-Remaining": "10"})}),
			wantLimited: true, wantWait: 20 * time.Second,
		},
		"plain 429 with remaining > 0: a minute": {
			err:         &github.ErrorResponse{Response: resp(429, map[string]string{"X-RateLimit-Remaining": "10"})},
			wantLimited: true, wantWait: time.Minute,
		},
		"plain 403 mentioning a rate limit": {
			err:         &github.ErrorResponse{Response: resp(403, map[string]string{"X-RateLimit-Remaining": "10"}), Message: "You have exceeded a secondary rate limit"},
			wantLimited: true, wantWait: time.Minute,
		},
		"plain 403 with remaining > 0: permission error": {
			err: &github.ErrorResponse{Response: resp(403, map[string]string{"X-RateLimit-Remaining": "10"}), Message: "Resource not accessible by integration"},
		},
		"token exchange answered 429 without headers": {
			err:         fmt.Errorf("refresh: %w", &ghinstallation.HTTPError{Response: resp(429, nil)}),
			wantLimited: true, wantWait: time.Minute,
		},
		"token exchange answered 401": {
			err: &ghinstallation.HTTPError{Response: resp(401, nil)},
		},
		"bare 403 on github.com: a limit from something in between": {
			err:         &github.ErrorResponse{Response: resp(403, nil), Message: "Forbidden"},
			wantLimited: true, wantWait: time.Minute,
		},
		"bare 403 on GHES: an error": {
			err: &github.ErrorResponse{Response: resp(403, nil), Message: "Must have admin rights to Repository."}, ghes: true,
		},
		"bare 429 on GHES: still a limit": {
			err: &github.ErrorResponse{Response: resp(429, nil)}, ghes: true,
			wantLimited: true, wantWait: time.Minute,
		},
		"403 on GHES with retry-after: a limit": {
			err: &github.ErrorResponse{Response: resp(403, map[string]string{"Retry-After": "9"})}, ghes: true,
			wantLimited: true, wantWait: 9 * time.Second,
		},
		"403 on GHES saying rate limit: a limit": {
			err: &github.ErrorResponse{Response: resp(403, nil), Message: "API rate limit exceeded"}, ghes: true,
			wantLimited: true, wantWait: time.Minute,
		},
		"500":             {err: &github.ErrorResponse{Response: resp(500, nil)}},
		"transport error": {err: errors.New("connection refused")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rl := rateLimited(tc.err, now, !tc.ghes)
			if (rl != nil) != tc.wantLimited {
				t.Fatalf("rateLimited = %v, want limited=%v", rl, tc.wantLimited)
			}
			if rl == nil {
				return
			}
			if rl.Primary != tc.wantPrimary {
				t.Errorf("Primary = %v, want %v", rl.Primary, tc.wantPrimary)
			}
			if rl.RetryAfter != tc.wantWait {
				t.Errorf("RetryAfter = %s, want %s", rl.RetryAfter, tc.wantWait)
			}
			if !errors.Is(rl, tc.err) {
				t.Errorf("RateLimited does not wrap the original error")
			}
		})
	}
}
