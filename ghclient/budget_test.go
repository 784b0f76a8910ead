package ghclient

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
)

// epochUnix is where a test's clock starts, in Unix seconds.
const epochUnix = 1_800_000_000

func newTestClock() *fakeclock.Clock { return fakeclock.New(time.Unix(epochUnix, 0)) }

func newTestBudgets(t *testing.T) *Budgets {
	t.Helper()
	bs, err := NewBudgets(BudgetConfig{}, NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func newTestBudget(t *testing.T, cfg BudgetConfig, clock *fakeclock.Clock) *Budget {
	t.Helper()
	cfg.Now, cfg.Sleep = clock.Now, clock.Sleep
	bs, err := NewBudgets(cfg, NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	return bs.For("token:test")
}

// takeN takes n requests of method at priority, counting those sent.
func takeN(ctx context.Context, b *Budget, n int, method string) (sent int, last error) {
	for range n {
		done, err := b.take(ctx, method, "")
		if err != nil {
			last = err
			continue
		}
		done()
		sent++
	}
	return sent, last
}

func TestBudgetNeverExceedsItsShareInAnyRollingMinute(t *testing.T) {
	clock := newTestClock()
	// Two replicas share 450 points: each holds 225.
	b := newTestBudget(t, BudgetConfig{PointsPerMinute: 450, Replicas: 2}, clock)
	type sent struct {
		at     time.Time
		points int
	}
	var log []sent
	ctx := context.Background() // no deadline: a release may wait up to a minute
	for i := range 400 {
		method := http.MethodDelete
		if i%3 == 0 {
			method = http.MethodGet
		}
		done, err := b.take(ctx, method, "")
		if err != nil {
			t.Fatalf("release %d refused without a deadline: %v", i, err)
		}
		done()
		log = append(log, sent{clock.Now(), cost(method)})
		clock.Advance(100 * time.Millisecond)
	}
	for i := range log {
		sum := 0
		for j := i; j < len(log) && log[j].at.Sub(log[i].at) < time.Minute; j++ {
			sum += log[j].points
		}
		if sum > 225 {
			t.Fatalf("%d points in the minute from request %d; the replica's share is 225", sum, i)
		}
	}
	if used, limit := b.Used(); limit != 225 || used > limit {
		t.Fatalf("Used() = %d of %d, want at most 225 of 225", used, limit)
	}
}

func TestBudgetPriorities(t *testing.T) {
	deadline := func(d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
	for name, tc := range map[string]struct {
		ctx      context.Context
		spend    int // DELETEs sent first at release priority
		wantSent int // of 10 more DELETEs
		wantWait bool
	}{
		"rechecks use at most half the window": {
			ctx: WithPriority(context.Background(), PriorityRecheck), spend: 0, wantSent: 9,
		},
		"rechecks never wait, even with a long deadline": {
			ctx: WithPriority(deadline(time.Hour), PriorityRecheck), spend: 18, wantSent: 0,
		},
		"releases use the whole window, then refuse what cannot fit before the deadline": {
			ctx: deadline(5 * time.Second), spend: 0, wantSent: 10,
		},
		"a release that cannot fit before its deadline is refused, not queued": {
			ctx: deadline(5 * time.Second), spend: 18, wantSent: 0, wantWait: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			clock := newTestClock()
			b := newTestBudget(t, BudgetConfig{PointsPerMinute: 90}, clock) // 18 DELETEs a minute
			if sent, err := takeN(context.Background(), b, tc.spend, http.MethodDelete); sent != tc.spend {
				t.Fatalf("setup: %d of %d sent: %v", sent, tc.spend, err)
			}
			start := clock.Now()
			sent, err := takeN(tc.ctx, b, 10, http.MethodDelete)
			if sent != tc.wantSent {
				t.Fatalf("sent %d of 10, want %d (last error %v)", sent, tc.wantSent, err)
			}
			if !clock.Now().Equal(start) {
				t.Fatalf("the clock moved %s: a request waited", clock.Now().Sub(start))
			}
			if sent < 10 {
				var spent *Spent
				if !errors.As(err, &spent) || spent.RetryAfter <= 0 || spent.GitHub {
					t.Fatalf("refusal = %v, want *Spent with a wait, by runner-guard's budget", err)
				}
				if tc.wantWait && spent.RetryAfter < 5*time.Second {
					t.Fatalf("RetryAfter %s, want the time until points free up (> the deadline)", spent.RetryAfter)
				}
			}
		})
	}
}

func TestBudgetReleaseWaitsForRoomInsideItsDeadline(t *testing.T) {
	clock := newTestClock()
	b := newTestBudget(t, BudgetConfig{PointsPerMinute: 10}, clock) // two DELETEs a minute
	if sent, _ := takeN(context.Background(), b, 2, http.MethodDelete); sent != 2 {
		t.Fatal("setup: the first two DELETEs were not sent")
	}
	clock.Advance(55 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
	defer cancel()
	done, err := b.take(ctx, http.MethodDelete, "")
	if err != nil {
		t.Fatalf("a release whose room comes in 5s, with 9s left, was refused: %v", err)
	}
	done()
	if waited := clock.Now().Sub(time.Unix(epochUnix, 0)); waited < time.Minute {
		t.Fatalf("sent after %s, want after the first DELETE left the window (1m)", waited)
	}
}

func TestBudgetHoldsWhileGitHubLimits(t *testing.T) {
	for name, tc := range map[string]struct {
		status   int
		header   map[string]string
		wantHold time.Duration // 0: no hold
		recheck  bool          // only rechecks are held
	}{
		"secondary limit with retry-after": {
			status: http.StatusForbidden, header: map[string]string{"Retry-After": "42", "X-RateLimit-Remaining": "4000"}, wantHold: 42 * time.Second,
		},
		"429 without retry-after waits a minute": {
			status: http.StatusTooManyRequests, header: map[string]string{}, wantHold: time.Minute,
		},
		"primary limit spent waits for its reset": {
			status: http.StatusForbidden, header: map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000600"}, wantHold: 10 * time.Minute,
		},
		"a permission 403 holds nothing": {
			status: http.StatusForbidden, header: map[string]string{"X-RateLimit-Remaining": "4000"},
		},
		"the hourly limit running low holds rechecks for releases": {
			status: http.StatusOK, header: map[string]string{"X-RateLimit-Remaining": "100", "X-RateLimit-Limit": "5000"}, recheck: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			clock := newTestClock()
			b := newTestBudget(t, BudgetConfig{}, clock)
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			b.observe("", &http.Response{StatusCode: tc.status, Header: h})
			_, relErr := b.take(context.Background(), http.MethodGet, "")
			_, reErr := b.take(WithPriority(context.Background(), PriorityRecheck), http.MethodGet, "")
			var spent *Spent
			switch {
			case tc.recheck:
				if relErr != nil || !errors.As(reErr, &spent) {
					t.Fatalf("release err %v, recheck err %v; want the release sent and the recheck held", relErr, reErr)
				}
			case tc.wantHold == 0:
				if relErr != nil || reErr != nil {
					t.Fatalf("held: %v / %v", relErr, reErr)
				}
			default:
				if !errors.As(relErr, &spent) || !spent.GitHub || spent.RetryAfter != tc.wantHold {
					t.Fatalf("release err %v, want GitHub's hold of %s", relErr, tc.wantHold)
				}
				clock.Advance(tc.wantHold)
				if _, err := b.take(context.Background(), http.MethodGet, ""); err != nil {
					t.Fatalf("still held after the wait: %v", err)
				}
			}
		})
	}
}

// GitHub's primary limit is per token or installation: one installation's
// spent limit holds only its own requests (and the App's JWT has its own),
// while a secondary limit's retry-after holds the whole credential.
func TestBudgetPrimaryLimitIsPerInstallation(t *testing.T) {
	spent := http.Header{"X-Ratelimit-Remaining": []string{"0"}, "X-Ratelimit-Limit": []string{"5000"}, "X-Ratelimit-Reset": []string{"1800000600"}}
	low := http.Header{"X-Ratelimit-Remaining": []string{"100"}, "X-Ratelimit-Limit": []string{"5000"}}
	clock := newTestClock()
	b := newTestBudget(t, BudgetConfig{}, clock)
	b.observe("installation/1", &http.Response{StatusCode: http.StatusForbidden, Header: spent})
	b.observe("installation/3", &http.Response{StatusCode: http.StatusOK, Header: low})
	recheck := WithPriority(context.Background(), PriorityRecheck)
	var held *Spent
	if _, err := b.take(context.Background(), http.MethodDelete, "installation/1"); !errors.As(err, &held) || !held.GitHub || held.RetryAfter != 10*time.Minute {
		t.Fatalf("the spent installation's DELETE: %v; want held by GitHub until its reset (10m)", err)
	}
	for _, key := range []string{"installation/2", "app-jwt", ""} {
		if _, err := b.take(context.Background(), http.MethodDelete, key); err != nil {
			t.Errorf("%q held by another installation's spent limit: %v", key, err)
		}
	}
	if _, err := b.take(recheck, http.MethodGet, "installation/3"); !errors.As(err, &held) {
		t.Errorf("a re-check on an installation whose hourly limit runs low: %v; want held for releases", err)
	}
	if _, err := b.take(recheck, http.MethodGet, "installation/2"); err != nil {
		t.Errorf("a re-check on another installation held by one running low: %v", err)
	}
	b.observe("installation/2", &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Retry-After": []string{"30"}}})
	if _, err := b.take(context.Background(), http.MethodGet, "installation/4"); !errors.As(err, &held) || held.RetryAfter != 30*time.Second {
		t.Errorf("after a secondary limit on one installation: %v; want every request of the credential held 30s", err)
	}
}

func TestBudgetConfigValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  BudgetConfig
		want string
	}{
		"over GitHub's points":      {BudgetConfig{PointsPerMinute: 901}, "PointsPerMinute 901"},
		"over GitHub's concurrency": {BudgetConfig{Concurrency: 101}, "Concurrency 101"},
		"negative replicas":         {BudgetConfig{Replicas: -1}, "Replicas"},
		"defaults":                  {BudgetConfig{}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewBudgets(tc.cfg, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	points, conc := BudgetConfig{PointsPerMinute: 450, Concurrency: 50, Replicas: 3}.share()
	if points != 150 || conc != 16 {
		t.Fatalf("share of 3 replicas = %d points, %d concurrent; want 150, 16", points, conc)
	}
	if points, _ := (BudgetConfig{PointsPerMinute: 10, Replicas: 10}).share(); points != writePoints {
		t.Fatalf("a replica's share %d cannot hold one DELETE", points)
	}
}

func TestCredentialIDHidesTheToken(t *testing.T) {
	ids := newTestBudgets(t)
	a := auth{base: "https://api.github.com/", token: "ghp_supersecret"}
	id := ids.credentialID(a)
	if strings.Contains(id, "supersecret") || id != ids.credentialID(a) {
		t.Fatalf("credentialID = %q: must be stable and not contain the token", id)
	}
	if other := ids.credentialID(auth{base: a.base, token: "ghp_other"}); other == id {
		t.Fatal("two tokens share one budget")
	}
}

// App and installation IDs are not secret: a Secret naming another team's
// App with a key of its own gets a budget of its own, so the token exchanges
// GitHub refuses it spend nothing of that team's.
func TestCredentialIDOfAnAppIncludesItsKey(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ids := newTestBudgets(t)
	app := func(k *rsa.PrivateKey) auth {
		return auth{base: "https://api.github.com/", app: &appAuth{issuer: "42", id: 42, install: 7, key: k}}
	}
	if first, again := ids.credentialID(app(key)), ids.credentialID(app(key)); first != again {
		t.Fatalf("one App and key get two budgets: %q, %q", first, again)
	}
	if ids.credentialID(app(key)) == ids.credentialID(app(forged)) {
		t.Fatalf("a forged key shares the App's budget %q", ids.credentialID(app(key)))
	}
}

// An unlimited budget holds nothing back but GitHub's own retry-after.
func TestBudgetUnlimited(t *testing.T) {
	clock := newTestClock()
	b := newTestBudget(t, BudgetConfig{PointsPerMinute: 10, Concurrency: 1, Unlimited: true}, clock)
	held := make([]func(), 0, 50)
	for i := range 50 {
		done, err := b.take(WithPriority(context.Background(), PriorityRecheck), http.MethodDelete, "")
		if err != nil {
			t.Fatalf("request %d held back by an unlimited budget: %v", i, err)
		}
		held = append(held, done) // none released: concurrency is not limited either
	}
	for _, done := range held {
		done()
	}
	b.observe("", &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Retry-After": []string{"30"}}})
	var spent *Spent
	if _, err := b.take(context.Background(), http.MethodGet, ""); !errors.As(err, &spent) || !spent.GitHub {
		t.Fatalf("GitHub's retry-after did not hold an unlimited budget: %v", err)
	}
}

// Under 5 % of the hourly limit left, a re-check is held for releases. That
// is runner-guard's own choice, not GitHub's limit: the refusal says so, so
// the on-error policy never lets a pod go on it.
func TestBudgetHourlyReserveIsOurs(t *testing.T) {
	clock := newTestClock()
	b := newTestBudget(t, BudgetConfig{}, clock)
	b.observe("", &http.Response{StatusCode: http.StatusOK, Header: http.Header{
		"X-Ratelimit-Limit": []string{"5000"}, "X-Ratelimit-Remaining": []string{"200"}}})
	var spent *Spent
	_, err := b.take(WithPriority(context.Background(), PriorityRecheck), http.MethodGet, "")
	if !errors.As(err, &spent) || spent.GitHub || !spent.Reserve {
		t.Fatalf("recheck under the hourly reserve: %v (%+v), want runner-guard's own hold", err, spent)
	}
	if _, err := b.take(context.Background(), http.MethodDelete, ""); err != nil {
		t.Fatalf("a release under the reserve was held: %v", err)
	}
}

// While another namespace wants the window (waits or was held back for
// room), one namespace takes at most its share of it; alone, or beside
// namespaces whose requests all fit, it may take the whole window. Its
// refusal names its namespace's share.
func TestBudgetNamespaceShare(t *testing.T) {
	clock := newTestClock()
	b := newTestBudget(t, BudgetConfig{PointsPerMinute: 100}, clock)
	short := func(ns string) context.Context {
		ctx, cancel := context.WithTimeout(WithNamespace(context.Background(), ns), 2*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	// Beside a quiet namespace, a may take the whole window.
	if sent, _ := takeN(short("b"), b, 1, http.MethodGet); sent != 1 {
		t.Fatal("b's request was held")
	}
	if sent, err := takeN(short("a"), b, 10, http.MethodDelete); sent != 10 {
		t.Fatalf("a sent %d of 10 DELETEs (%v), want all: b wants nothing more", sent, err)
	}
	clock.Advance(10 * time.Second)
	if sent, err := takeN(short("a"), b, 9, http.MethodDelete); sent != 9 {
		t.Fatalf("a sent %d of 9 more DELETEs (%v), want the whole window", sent, err)
	}
	// b is held back for room: it wants the window now.
	if sent, _ := takeN(short("b"), b, 1, http.MethodDelete); sent != 0 {
		t.Fatal("b's DELETE was sent in a full window")
	}
	// Once a's first spends leave the window, a may fill its half, no more:
	// the rest of the room is b's.
	clock.Advance(50 * time.Second)
	sent, err := takeN(short("a"), b, 2, http.MethodDelete)
	var spent *Spent
	if sent != 1 || !errors.As(err, &spent) || spent.Namespace != "a" || spent.GitHub || !strings.Contains(err.Error(), "namespace a's share (50%)") {
		t.Errorf("a's DELETE beyond its share while b waits: sent %d, %v; want 1 sent (its half), then refused, its namespace's share spent", sent, err)
	}
	if sent, err := takeN(short("b"), b, 9, http.MethodDelete); sent != 9 {
		t.Errorf("b sent %d of 9 DELETEs after a's flood (%v), want all: the freed room is b's", sent, err)
	}
}

// Credentials are named in metrics by a keyed hash long enough not to be
// searched: another process (another key) names the same token otherwise.
func TestCredentialIDIsKeyed(t *testing.T) {
	a := auth{base: "https://api.github.com/", token: "ghp_supersecret"}
	id := newTestBudgets(t).credentialID(a)
	if other := newTestBudgets(t).credentialID(a); other == id {
		t.Fatalf("two processes name one token alike (%q): the hash is not keyed", id)
	}
	hash := strings.TrimSuffix(strings.TrimPrefix(id, "token:"), "@https://api.github.com")
	if len(hash) < 32 {
		t.Fatalf("credential hash %q has %d hex digits, want at least 32 (128 bits)", hash, len(hash))
	}
}

// A budget lives as long as a client holds it; the last release forgets it
// and its metric series.
func TestBudgetReleased(t *testing.T) {
	m := NewMetrics()
	bs, err := NewBudgets(BudgetConfig{}, m)
	if err != nil {
		t.Fatal(err)
	}
	b := bs.For("token:a")
	if again := bs.For("token:a"); again != b {
		t.Fatal("one credential got two budgets")
	}
	b.observe("", &http.Response{StatusCode: http.StatusOK, Header: http.Header{"X-Ratelimit-Remaining": []string{"4999"}}})
	series := func() int {
		n := 0
		for _, c := range m.Collectors() {
			n += testutil.CollectAndCount(c, "runner_guard_github_budget_points_used", "runner_guard_github_rate_limit_remaining")
		}
		return n
	}
	if got := series(); got != 2 {
		t.Fatalf("series = %d, want 2 (points used, rate limit remaining)", got)
	}
	bs.Release(b)
	if bs.Len() != 1 {
		t.Fatalf("budgets = %d after one of two holders released, want 1", bs.Len())
	}
	bs.Release(b)
	if bs.Len() != 0 || series() != 0 {
		t.Fatalf("budgets = %d, series = %d after the last release, want none", bs.Len(), series())
	}
}

// GitHub's reset time is GitHub's clock: it is read against the answer's
// Date, so a local clock an hour off neither sends while limited nor holds
// the credential for an hour.
func TestBudgetResetRelativeToDate(t *testing.T) {
	for name, skew := range map[string]time.Duration{"local clock ahead": time.Hour, "local clock behind": -time.Hour} {
		t.Run(name, func(t *testing.T) {
			clock := newTestClock()
			b := newTestBudget(t, BudgetConfig{}, clock)
			github := clock.Now().Add(-skew)
			b.observe("", &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{
				"Date":                  []string{github.UTC().Format(http.TimeFormat)},
				"X-Ratelimit-Limit":     []string{"5000"},
				"X-Ratelimit-Remaining": []string{"0"},
				"X-Ratelimit-Reset":     []string{strconv.FormatInt(github.Add(time.Minute).Unix(), 10)},
			}})
			var spent *Spent
			if _, err := b.take(context.Background(), http.MethodGet, ""); !errors.As(err, &spent) || !spent.GitHub || spent.RetryAfter != time.Minute {
				t.Fatalf("right after the limit: %v, want GitHub's limit holding for 1m", err)
			}
			clock.Advance(time.Minute)
			if _, err := b.take(context.Background(), http.MethodGet, ""); err != nil {
				t.Fatalf("after the reset: %v", err)
			}
		})
	}
}
