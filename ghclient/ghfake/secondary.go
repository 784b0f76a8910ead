package ghfake

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// GitHub's secondary rate limits for the REST API, as its rate-limit page
// documents them and the fake enforces them per credential:
//
//   - no more than 900 points per minute, where most GET, HEAD and OPTIONS
//     requests cost 1 point and most POST, PATCH, PUT and DELETE requests 5
//     (GitHub counts them for the REST API as a whole, not per route; the
//     fake counts over a rolling 60 s window);
//   - no more than 100 concurrent requests.
//
// An exceeded limit answers 403 (or 429) with retry-after and the
// secondary-limit documentation_url. A refused request still counts: a
// client that keeps sending while limited only stays limited, and GitHub may
// ban it, so the fake also counts the requests that arrive before a previous
// refusal's retry-after has passed (after an injected FaultSecondaryRateLimit
// too: its retry-after, or a minute when it names none).
const (
	// DefaultSecondaryPoints is GitHub's REST limit: points per credential per minute.
	DefaultSecondaryPoints = 900
	// DefaultSecondaryConcurrent is GitHub's limit of concurrent requests.
	DefaultSecondaryConcurrent = 100

	secondaryWindow = time.Minute

	// SecondaryLimitMessage is the message of an enforced secondary limit's
	// body; GitHub appends the request ID.
	SecondaryLimitMessage = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. " +
		"If you reach out to GitHub Support for help, please include the request ID "

	// Anonymous is the credential of requests without an Authorization header.
	Anonymous = "anonymous"
)

// SecondaryLimit configures the secondary rate limit; its zero value is
// GitHub's: enforced, 900 points per rolling minute, 100 concurrent requests,
// answered 403.
type SecondaryLimit struct {
	// Off stops enforcement; usage is still recorded.
	Off bool `json:"off,omitempty"`
	// PointsPerMinute is what a credential may spend in any rolling 60 s
	// (0: DefaultSecondaryPoints).
	PointsPerMinute int `json:"pointsPerMinute,omitempty"`
	// MaxConcurrent is how many requests a credential may have in flight
	// (0: DefaultSecondaryConcurrent).
	MaxConcurrent int `json:"maxConcurrent,omitempty"`
	// Status is the answer's status: 403 (0 means 403) or 429.
	Status int `json:"status,omitempty"`
}

func (l SecondaryLimit) points() int {
	return orDefault(max(l.PointsPerMinute, 0), DefaultSecondaryPoints)
}

func (l SecondaryLimit) concurrent() int {
	return orDefault(max(l.MaxConcurrent, 0), DefaultSecondaryConcurrent)
}

func (l SecondaryLimit) status() int {
	if l.Status == http.StatusTooManyRequests {
		return l.Status
	}
	return http.StatusForbidden
}

func (l SecondaryLimit) valid() bool {
	return l.PointsPerMinute >= 0 && l.MaxConcurrent >= 0 &&
		(l.Status == 0 || l.Status == http.StatusForbidden || l.Status == http.StatusTooManyRequests)
}

// normalized fills in the defaults.
func (l SecondaryLimit) normalized() SecondaryLimit {
	return SecondaryLimit{Off: l.Off, PointsPerMinute: l.points(), MaxConcurrent: l.concurrent(), Status: l.status()}
}

// SecondaryUsage is one credential's standing against the secondary limit.
type SecondaryUsage struct {
	Credential string `json:"credential"`
	// Points is what the credential spent in the rolling minute ending now,
	// refused requests included.
	Points int `json:"points"`
	// MaxPoints is the most it spent in any rolling 60 s since the last reset.
	MaxPoints int `json:"maxPoints"`
	// Requests counts every API request of the credential, refused or not.
	Requests int `json:"requests"`
	// Limited counts the answers refused by the secondary limit.
	Limited int `json:"limited"`
	// SentWhileLimited counts the requests that arrived before the
	// retry-after of a previous refusal had passed: GitHub may ban a client
	// that sends them.
	SentWhileLimited int `json:"sentWhileLimited"`
	// InFlight is how many of its requests the fake is answering now, and
	// PeakConcurrent the most at once since the last reset.
	InFlight       int `json:"inFlight"`
	PeakConcurrent int `json:"peakConcurrent"`
	// LimitedUntil is when the last refusal's retry-after ends (zero if never refused).
	LimitedUntil time.Time `json:"limitedUntil,omitzero"`
}

// TokenCredential names the credential of a token (a personal access token,
// or any token the fake does not know as an installation's): "token:" and a
// digest, so usage listings do not echo secrets.
func TokenCredential(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "token:" + hex.EncodeToString(sum[:8])
}

// InstallationCredential names the credential of an App installation. Every
// token minted for the installation shares it: GitHub counts an
// installation's requests together, whichever of its tokens sends them.
func InstallationCredential(id int64) string { return "installation:" + strconv.FormatInt(id, 10) }

// AppCredential names the credential of an App's JWT requests (token
// minting and installation look-ups).
func AppCredential(appID int64) string { return "app:" + strconv.FormatInt(appID, 10) }

// requestPoints is what a request costs against the secondary limit.
func requestPoints(method string) int {
	switch method {
	case http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete:
		return 5
	default: // GET, HEAD, OPTIONS
		return 1
	}
}

type spend struct {
	at     time.Time
	points int
}

// credUsage is one credential's rolling window and counters.
type credUsage struct {
	spends []spend // within the window, oldest first
	sum    int     // points in spends

	maxPoints, requests, limited, sentWhileLimited, inFlight, peak int
	limitedUntil                                                   time.Time
	// faultLimitedUntil is the end of an injected secondary limit's wait.
	faultLimitedUntil time.Time
}

// inWindow reports whether a spend at `at` still counts at now: the window is
// the 60 s ending at now, its start excluded.
func inWindow(at, now time.Time) bool { return now.Sub(at) < secondaryWindow }

func (u *credUsage) expire(now time.Time) {
	i := 0
	for i < len(u.spends) && !inWindow(u.spends[i].at, now) {
		u.sum -= u.spends[i].points
		i++
	}
	u.spends = u.spends[i:]
}

// waitFor is how long from now until the window has room for points more
// (0 if it has now). Points beyond the limit never fit: a whole window.
func (u *credUsage) waitFor(now time.Time, points, limit int) time.Duration {
	if u.sum+points <= limit {
		return 0
	}
	if points > limit {
		return secondaryWindow
	}
	left := u.sum
	for _, s := range u.spends {
		left -= s.points
		if left+points <= limit {
			return s.at.Add(secondaryWindow).Sub(now)
		}
	}
	return secondaryWindow
}

// arrive records a request of `points` at now and decides it: admitted (it is
// then in flight until leave) or refused with the retry-after in whole
// seconds. enforce false records without refusing.
func (u *credUsage) arrive(now time.Time, points int, lim SecondaryLimit, enforce bool) (admitted bool, retryAfter int) {
	u.expire(now)
	u.requests++
	whileLimited := now.Before(u.limitedUntil)
	if whileLimited || now.Before(u.faultLimitedUntil) {
		u.sentWhileLimited++
	}
	over := u.sum+points > lim.points() || u.inFlight >= lim.concurrent()
	// A refused request counts as sent.
	u.spends = append(u.spends, spend{at: now, points: points})
	u.sum += points
	u.maxPoints = max(u.maxPoints, u.sum)
	if !enforce || !whileLimited && !over {
		u.inFlight++
		u.peak = max(u.peak, u.inFlight)
		return true, 0
	}
	u.limited++
	wait := max(u.waitFor(now, points, lim.points()), u.limitedUntil.Sub(now))
	retryAfter = max(1, int((wait+time.Second-1)/time.Second))
	if until := now.Add(time.Duration(retryAfter) * time.Second); until.After(u.limitedUntil) {
		u.limitedUntil = until
	}
	return false, retryAfter
}

func (u *credUsage) leave() { u.inFlight = max(0, u.inFlight-1) }

// faultedUntil records an injected limit's wait: requests before t count as
// sent while limited, though injected faults, not the enforced limit,
// decide their answers (so faults compose as the test injects them).
func (u *credUsage) faultedUntil(t time.Time) {
	if t.After(u.faultLimitedUntil) {
		u.faultLimitedUntil = t
	}
}

func (u *credUsage) usage(cred string, now time.Time) SecondaryUsage {
	u.expire(now)
	return SecondaryUsage{
		Credential: cred, Points: u.sum, MaxPoints: u.maxPoints, Requests: u.requests,
		Limited: u.limited, SentWhileLimited: u.sentWhileLimited,
		InFlight: u.inFlight, PeakConcurrent: u.peak, LimitedUntil: u.limitedUntil,
	}
}

// SetSecondaryLimit configures the secondary rate limit (the zero value is
// GitHub's, enforced); a field out of range (the control API refuses it)
// takes its default. Usage recorded so far is kept.
func (f *Fake) SetSecondaryLimit(l SecondaryLimit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.secondary = l.normalized()
}

// SecondaryUsage returns every credential's usage, keyed by credential
// (TokenCredential, InstallationCredential, AppCredential or Anonymous).
func (f *Fake) SecondaryUsage() map[string]SecondaryUsage {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	out := make(map[string]SecondaryUsage, len(f.usage))
	for cred, u := range f.usage {
		out[cred] = u.usage(cred, now)
	}
	return out
}

// ResetSecondaryUsage forgets every credential's usage: windows, maxima,
// counters and pending retry-afters (requests in flight stay counted).
func (f *Fake) ResetSecondaryUsage() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for cred, u := range f.usage {
		if u.inFlight == 0 {
			delete(f.usage, cred)
			continue
		}
		f.usage[cred] = &credUsage{inFlight: u.inFlight, peak: u.inFlight}
	}
}

func (f *Fake) usageLocked(cred string) *credUsage {
	u, ok := f.usage[cred]
	if !ok {
		u = &credUsage{}
		f.usage[cred] = u
	}
	return u
}

// secondaryLocked admits r for its credential or returns the refusal. GitHub
// Enterprise Server has rate limiting off by default, so StyleGHES only
// records; an exhausted primary limit is answered as such, not as a
// secondary one.
func (f *Fake) secondaryLocked(cred string, points int, now time.Time) (response, bool) {
	enforce := !f.secondary.Off && f.style != StyleGHES && f.primaryLocked(cred, now).Remaining > 0
	admitted, retryAfter := f.usageLocked(cred).arrive(now, points, f.secondary, enforce)
	if admitted {
		return response{}, true
	}
	f.requestSeq++
	id := "FAKE:" + strconv.FormatInt(f.requestSeq, 10)
	h := http.Header{}
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-GitHub-Media-Type", "github.v3; format=json")
	h.Set("X-GitHub-Request-Id", id)
	h.Set("Retry-After", strconv.Itoa(retryAfter))
	f.rateHeadersLocked(h, cred)
	return jsonResponse(f.secondary.status(), h, struct {
		Message          string `json:"message"`
		DocumentationURL string `json:"documentation_url"`
	}{SecondaryLimitMessage + id + ".", SecondaryDocsURL}), false
}

// credentialLocked names what GitHub would count r against: the App of a
// JWT, the installation of a token the fake minted, else the token itself.
func (f *Fake) credentialLocked(r *http.Request) string {
	tok, ok := credential(r)
	switch {
	case !ok:
		return Anonymous
	case f.knownTokenLocked(tok):
		return TokenCredential(tok)
	}
	if it, ok := f.appTokens[tok]; ok {
		return InstallationCredential(it.credentialID)
	}
	if appID, ok := f.jwtIssuerLocked(tok); ok {
		return AppCredential(appID)
	}
	return TokenCredential(tok)
}

// jwtIssuerLocked reads, without verifying, the App a JWT claims to be from.
func (f *Fake) jwtIssuerLocked(tok string) (int64, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return 0, false
	}
	var claims struct {
		Iss any `json:"iss"`
	}
	if decodeSegment(parts[1], &claims) != nil {
		return 0, false
	}
	var iss string
	switch v := claims.Iss.(type) {
	case string:
		iss = v
	case float64:
		iss = strconv.FormatInt(int64(v), 10)
	default:
		return 0, false
	}
	if id, ok := f.clientIDs[iss]; ok {
		return id, true
	}
	id, err := strconv.ParseInt(iss, 10, 64)
	return id, err == nil
}

// sortedUsage lists usage by credential, for the control API.
func sortedUsage(m map[string]SecondaryUsage) []SecondaryUsage {
	out := make([]SecondaryUsage, 0, len(m))
	for _, u := range m {
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Credential < out[j].Credential })
	return out
}
