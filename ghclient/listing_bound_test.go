package ghclient

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A scope's listing lives as long as decisions ask about it: a tenant naming
// a new repository in every pod does not grow the client for ever.
func TestListingsForgetIdleScopes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"total_count":0,"runners":[]}`)
	}))
	t.Cleanup(srv.Close)
	clock := newTestClock()
	c, err := New(Config{BaseURL: srv.URL, AllowHTTP: true, Token: "t", Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		scope := Scope{Kind: ScopeRepo, Name: fmt.Sprintf("acme/repo-%d", i)}
		if _, err := c.Listed(context.Background(), scope, "r", RefreshStale); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
	}
	if got := c.listingsHeld(); got > int(listingIdle/time.Minute)+1 {
		t.Errorf("listings held after 100 scopes asked once each, a minute apart = %d, want those of the last %s", got, listingIdle)
	}
}

// A refresh of a scope's listing that failed is not asked again within
// ListingTTL: every decision in the scope would fail alike.
func TestListedRemembersAFailedRefresh(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	clock := newTestClock()
	c, err := New(Config{BaseURL: srv.URL, AllowHTTP: true, Token: "t", Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	scope := Scope{Kind: ScopeOrg, Name: "acme"}
	for range 10 {
		if _, err := c.Listed(context.Background(), scope, "r", RefreshStale); err == nil {
			t.Fatal("want the 502")
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("requests for 10 refreshes after a failed one = %d, want 1", n)
	}
	clock.Advance(ListingTTL)
	_, _ = c.Listed(context.Background(), scope, "r", RefreshStale)
	if n := calls.Load(); n != 2 {
		t.Errorf("after ListingTTL, requests = %d, want 2 (asked again)", n)
	}
}
