package ghclient

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
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
		if _, err := c.Listed(context.Background(), scope, "r", true); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
	}
	if got := c.listingsHeld(); got > int(listingIdle/time.Minute)+1 {
		t.Errorf("listings held after 100 scopes asked once each, a minute apart = %d, want those of the last %s", got, listingIdle)
	}
}
