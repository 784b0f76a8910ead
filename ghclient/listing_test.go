package ghclient_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
)

// One listing of a scope answers every runner in it for ListingTTL without a
// request; renewed, its unchanged pages are answered 304, which spend no
// hourly quota. Busy and idle are as GitHub lists them; a runner missing
// from the listing is absent (never proof it is gone).
func TestListedSharesOneConditionalListing(t *testing.T) {
	e, advance := newClockedEnv(t)
	ctx := context.Background()
	for i := range 150 { // two pages
		e.fake.AddRunner(org, fmt.Sprintf("r%03d", i))
	}
	e.fake.SetBusy(org, "r007", true)
	e.fake.SetBusy(org, "r140", true)
	if e.client.HasListing() {
		t.Error("HasListing before any listing was taken")
	}

	for name, want := range map[string]ghclient.ListedState{
		"r007": ghclient.ListedBusy, "r140": ghclient.ListedBusy, "r008": ghclient.ListedIdle, "gone": ghclient.ListedAbsent,
	} {
		got, err := e.client.Listed(ctx, org, name, ghclient.RefreshStale)
		if err != nil || got.State != want {
			t.Errorf("Listed(%s) = %v, %v; want %v", name, got.State, err, want)
		}
	}
	if n := e.fake.Count(http.MethodGet); n != 2 {
		t.Fatalf("%d GETs for four runners of one scope, want 2 (one listing of two pages)", n)
	}
	if got, _ := e.client.Listed(ctx, org, "r007", ghclient.RefreshNever); got.State != ghclient.ListedBusy {
		t.Errorf("a fresh listing without refresh: %v, want busy", got.State)
	}
	if !e.client.HasListing() {
		t.Error("HasListing false with a fresh listing")
	}

	advance(ghclient.ListingTTL)
	if got, _ := e.client.Listed(ctx, org, "r007", ghclient.RefreshNever); got.State != ghclient.ListedUnknown {
		t.Errorf("a stale listing without refresh: %v, want unknown (and no request)", got.State)
	}
	if e.client.HasListing() {
		t.Error("HasListing true with only a stale listing")
	}
	e.fake.ResetLog()
	if got, err := e.client.Listed(ctx, org, "r007", ghclient.RefreshStale); err != nil || got.State != ghclient.ListedBusy {
		t.Fatalf("renewed listing: %v, %v; want busy", got.State, err)
	}
	for _, r := range e.fake.Requests() {
		if r.Status != http.StatusNotModified {
			t.Errorf("%s %s answered %d; an unchanged page should be 304", r.Method, r.Path, r.Status)
		}
	}

	advance(ghclient.ListingTTL)
	e.fake.SetBusy(org, "r007", false)
	if got, err := e.client.Listed(ctx, org, "r007", ghclient.RefreshStale); err != nil || got.State != ghclient.ListedIdle {
		t.Fatalf("after the job ended: %v, %v; want idle", got.State, err)
	}
	if got, _ := e.client.Listed(ctx, org, "r140", ghclient.RefreshNever); got.State != ghclient.ListedBusy {
		t.Errorf("the second page's busy runner after a renewal: %v, want busy", got.State)
	}
}

// Concurrent decisions in one scope share one listing.
func TestListedConcurrentCallersShareOneRefresh(t *testing.T) {
	e := newEnv(t)
	addBusy(e.fake, org, "r1")
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if got, err := e.client.Listed(context.Background(), org, "r1", ghclient.RefreshStale); err != nil || got.State != ghclient.ListedBusy {
				t.Errorf("Listed = %v, %v", got.State, err)
			}
		})
	}
	wg.Wait()
	if n := e.fake.Count(http.MethodGet); n != 1 {
		t.Errorf("%d listings for 20 concurrent callers, want 1", n)
	}
}

// A listing that lags GitHub's broker says idle while the DELETE answers
// 422: Listed reports what it lists, and only Unregister can say busy then.
func TestListedLagsTheDelete(t *testing.T) {
	e := newEnv(t)
	addBusy(e.fake, org, "r1")
	e.fake.SetListingLags(org, "r1", true)
	if got, err := e.client.Listed(context.Background(), org, "r1", ghclient.RefreshStale); err != nil || got.State != ghclient.ListedIdle {
		t.Fatalf("Listed = %v, %v; want the lagging idle", got.State, err)
	}
	if out, err := e.client.Unregister(context.Background(), org, "r1", ghclient.IDHint{}); err != nil || out != ghclient.Busy {
		t.Fatalf("Unregister = %v, %v; want busy", out, err)
	}
}

// RefreshBusy renews a listing held that shows the runner busy once it is
// ListedBusyMaxAge old, so an eviction retried every 5 s learns of the job's
// end within one retry; unchanged, the renewal is 304s. It takes no listing
// when none is held (RefreshStale does); an idle answer, and RefreshStale
// alone, keep the listing for ListingTTL.
func TestListedRefreshBusy(t *testing.T) {
	e, advance := newClockedEnv(t)
	ctx := context.Background()
	addBusy(e.fake, org, "r1")
	e.fake.AddRunner(org, "r2")
	listed := func(name string, refresh ghclient.Refresh) ghclient.ListedState {
		t.Helper()
		got, err := e.client.Listed(ctx, org, name, refresh)
		if err != nil {
			t.Fatalf("Listed(%s): %v", name, err)
		}
		return got.State
	}
	if got := listed("r1", ghclient.RefreshBusy); got != ghclient.ListedUnknown || e.fake.Count(http.MethodGet) != 0 {
		t.Fatalf("RefreshBusy with no listing held: %v after %d GETs, want unknown and no request", got, e.fake.Count(http.MethodGet))
	}
	if got := listed("r1", ghclient.RefreshStale|ghclient.RefreshBusy); got != ghclient.ListedBusy {
		t.Fatalf("first listing: %v, want busy", got)
	}
	advance(ghclient.ListedBusyMaxAge)
	e.fake.ResetLog()
	if got := listed("r2", ghclient.RefreshBusy); got != ghclient.ListedIdle || e.fake.Count(http.MethodGet) != 0 {
		t.Errorf("an idle runner's answer from a %s-old listing: %v after %d GETs, want idle from the listing held", ghclient.ListedBusyMaxAge, got, e.fake.Count(http.MethodGet))
	}
	if got := listed("r1", ghclient.RefreshStale); got != ghclient.ListedBusy || e.fake.Count(http.MethodGet) != 0 {
		t.Errorf("RefreshStale within ListingTTL: %v after %d GETs, want busy from the listing held", got, e.fake.Count(http.MethodGet))
	}
	if got := listed("r1", ghclient.RefreshBusy); got != ghclient.ListedBusy || e.fake.Count(http.MethodGet) != 1 {
		t.Errorf("RefreshBusy on a %s-old busy listing: %v after %d GETs, want busy from one renewal", ghclient.ListedBusyMaxAge, got, e.fake.Count(http.MethodGet))
	}
	for _, r := range e.fake.Requests() {
		if r.Status != http.StatusNotModified {
			t.Errorf("%s %s answered %d; an unchanged page should be 304", r.Method, r.Path, r.Status)
		}
	}
	e.fake.SetBusy(org, "r1", false)
	advance(ghclient.ListedBusyMaxAge)
	if got := listed("r1", ghclient.RefreshBusy); got != ghclient.ListedIdle {
		t.Errorf("one retry after the job ended: %v, want idle", got)
	}
}

// newClockedEnv is newEnv with the client and the fake GitHub on one clock
// that only advance moves.
func newClockedEnv(t *testing.T) (e *env, advance func(time.Duration)) {
	t.Helper()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e = newEnv(t, func(c *ghclient.Config) { c.Now = clock })
	e.fake.SetClock(clock)
	return e, func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
}
