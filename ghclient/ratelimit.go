package ghclient

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v93/github"
)

const (
	// minRetryAfter keeps a limit whose reset is due (or clock skew) from being
	// reported as "retry now".
	minRetryAfter = time.Second
	// defaultSecondaryWait is GitHub's advice when a limit names no wait: at
	// least a minute.
	defaultSecondaryWait = time.Minute
	// maxRememberedSecondary caps how long go-github refuses requests after a
	// secondary limit. Without retry-after it derives the wait from
	// x-ratelimit-reset, the end of the hourly window, which would block every
	// admission for up to an hour on a limit GitHub asks us to wait out for a
	// minute or so.
	maxRememberedSecondary = 5 * time.Minute
)

// secondaryWait is retry-after when GitHub sent it; else what go-github will
// enforce client-side (at least a minute). A limit go-github remembered carries
// no headers and the time left.
func secondaryWait(e *github.AbuseRateLimitError) time.Duration {
	if wait, ok := retryAfterHeader(e.Response); ok {
		return max(wait, minRetryAfter)
	}
	var remembered time.Duration
	if e.RetryAfter != nil {
		remembered = *e.RetryAfter
	}
	if e.Response != nil && len(e.Response.Header) == 0 && remembered > 0 {
		return max(remembered, minRetryAfter)
	}
	return max(remembered, defaultSecondaryWait)
}

// rateLimited maps every form a rate limit takes to *RateLimited, or returns nil:
//   - *github.RateLimitError: primary limit, from a response or remembered by
//     go-github (refused client-side until reset, no network call);
//   - *github.AbuseRateLimitError: secondary limit, likewise;
//   - any other 403/429 carrying retry-after, remaining 0, a rate-limit message,
//     or no rate-limit headers at all (GitHub sends them on every answer, so a
//     bare 403/429 is a limit from something in between).
//
// A 403 with remaining > 0 and nothing else is a permission problem, not a
// limit. On GitHub Enterprise Server (cloud false) rate limiting is often off
// and no headers are sent, so a bare 403 is an error there too.
func rateLimited(err error, now time.Time, cloud bool) *RateLimited {
	var primary *github.RateLimitError
	if errors.As(err, &primary) {
		wait, ok := retryAfterHeader(primary.Response)
		if !ok {
			wait = defaultSecondaryWait
			if !primary.Rate.Reset.IsZero() {
				wait = untilReset(primary.Response, primary.Rate.Reset.Time, now)
			}
		}
		return &RateLimited{RetryAfter: max(wait, minRetryAfter), Primary: true, Err: err}
	}
	var secondary *github.AbuseRateLimitError
	if errors.As(err, &secondary) {
		return &RateLimited{RetryAfter: secondaryWait(secondary), Err: err}
	}

	var resp *http.Response
	var msg string
	var er *github.ErrorResponse
	var he *ghinstallation.HTTPError
	switch {
	case errors.As(err, &er):
		resp, msg = er.Response, er.Message
	case errors.As(err, &he):
		resp = he.Response
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests {
		return nil
	}
	if wait, ok := retryAfterHeader(resp); ok {
		return &RateLimited{RetryAfter: max(wait, minRetryAfter), Err: err}
	}
	remaining := resp.Header.Get("X-RateLimit-Remaining")
	if remaining == "0" {
		wait := defaultSecondaryWait
		if reset, perr := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64); perr == nil && reset > 0 {
			wait = untilReset(resp, time.Unix(reset, 0), now)
		}
		return &RateLimited{RetryAfter: max(wait, minRetryAfter), Primary: true, Err: err}
	}
	if resp.StatusCode == http.StatusTooManyRequests || remaining == "" && cloud ||
		strings.Contains(strings.ToLower(msg), "rate limit") {
		return &RateLimited{RetryAfter: defaultSecondaryWait, Err: err}
	}
	return nil
}

// untilReset is how long until GitHub's reset time: counted from the
// answer's Date header, both being GitHub's clock, so a local clock that is
// off neither holds requests for an hour nor sends them while limited.
// Without a Date, from now.
func untilReset(resp *http.Response, reset, now time.Time) time.Duration {
	if resp != nil {
		if date, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			return reset.Sub(date)
		}
	}
	return reset.Sub(now)
}

// retryAfterHeader reads `retry-after: SECONDS`.
func retryAfterHeader(resp *http.Response) (time.Duration, bool) {
	if resp == nil {
		return 0, false
	}
	v := resp.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || secs < 0 {
		return 0, false
	}
	return time.Duration(secs) * time.Second, true
}

// statusOf returns the HTTP status of an API error, or 0.
func statusOf(err error) int {
	var er *github.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		return er.Response.StatusCode
	}
	return 0
}

// anyStatusOf returns the HTTP status of an API error or of a failed
// installation-token exchange, or 0.
func anyStatusOf(err error) int {
	if s := statusOf(err); s != 0 {
		return s
	}
	var he *ghinstallation.HTTPError
	if errors.As(err, &he) && he.Response != nil {
		return he.Response.StatusCode
	}
	return 0
}
