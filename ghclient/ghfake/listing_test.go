package ghfake_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

// Every list endpoint answers with an ETag, stable while its answer is; a
// matching If-None-Match gets 304 with no body, which spends no primary quota
// but still a secondary point.
func TestConditionalList(t *testing.T) {
	ent, _ := ghclient.EnterpriseScope("big")
	tests := map[string]struct {
		scope ghclient.Scope
		path  string
	}{
		"repository":   {repo, "/repos/acme/app/actions/runners"},
		"organization": {org, "/orgs/acme/actions/runners"},
		"enterprise":   {ent, "/enterprises/big/actions/runners"},
		"GHES root":    {org, "/api/v3/orgs/acme/actions/runners"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, srv := serve(t)
			f.SetToken("t1")
			for i := range 3 {
				f.AddRunner(tc.scope, fmt.Sprintf("r%d", i))
			}
			u := srv.URL + tc.path + "?per_page=2"
			get := func(etag string) answer {
				h := bearer("t1")
				if etag != "" {
					h["If-None-Match"] = etag
				}
				return do(t, http.MethodGet, u, h)
			}
			first := get("")
			etag := first.header.Get("ETag")
			if first.status != 200 || !strings.HasPrefix(etag, `W/"`) || !strings.HasSuffix(etag, `"`) {
				t.Fatalf("list %d ETag %q, want 200 and a weak ETag", first.status, etag)
			}
			if again := get(""); again.header.Get("ETag") != etag {
				t.Errorf("ETag changed without a change: %q then %q", etag, again.header.Get("ETag"))
			}
			remaining := get("").header.Get("X-RateLimit-Remaining")
			points := f.SecondaryUsage()[ghfake.TokenCredential("t1")].Points

			nm := get(etag)
			if nm.status != http.StatusNotModified || nm.body != "" || nm.header.Get("ETag") != etag || nm.header.Get("Link") != "" {
				t.Fatalf("conditional list %d ETag %q Link %q body %q, want 304, the ETag, no Link, no body",
					nm.status, nm.header.Get("ETag"), nm.header.Get("Link"), nm.body)
			}
			if got := nm.header.Get("X-RateLimit-Remaining"); got != remaining {
				t.Errorf("304 x-ratelimit-remaining %q, want %q: a 304 costs no primary quota", got, remaining)
			}
			if got := f.SecondaryUsage()[ghfake.TokenCredential("t1")].Points; got != points+1 {
				t.Errorf("secondary points %d after the 304, want %d", got, points+1)
			}
			for hdr, want := range map[string]int{
				etag:                                http.StatusNotModified,
				`"other", ` + etag:                  http.StatusNotModified,
				strings.TrimPrefix(etag, "W/"):      http.StatusNotModified, // weak comparison
				"*":                                 http.StatusNotModified,
				`W/"other"`:                         http.StatusOK,
				strings.Replace(etag, `"`, `"x`, 1): http.StatusOK,
			} {
				if got := get(hdr).status; got != want {
					t.Errorf("If-None-Match %s: %d, want %d", hdr, got, want)
				}
			}

			// Another page, another filter, another token, another answer:
			// other ETags.
			page2 := do(t, http.MethodGet, srv.URL+tc.path+"?per_page=2&page=2", bearer("t1")).header.Get("ETag")
			byName := do(t, http.MethodGet, srv.URL+tc.path+"?name=r1", bearer("t1")).header.Get("ETag")
			f.SetToken("t2")
			otherToken := do(t, http.MethodGet, u, bearer("t2")).header.Get("ETag")
			f.SetToken("t1")
			f.SetBusy(tc.scope, "r0", true)
			changed := get(etag)
			seen := map[string]string{etag: "first"}
			for what, e := range map[string]string{"page 2": page2, "name filter": byName, "token t2": otherToken, "after SetBusy": changed.header.Get("ETag")} {
				if prev, dup := seen[e]; dup || e == "" {
					t.Errorf("%s ETag %q, same as %s", what, e, prev)
				}
				seen[e] = what
			}
			if changed.status != 200 || !strings.Contains(changed.body, `"busy":true`) {
				t.Errorf("after a change the old ETag got %d %s, want 200 with the change", changed.status, changed.body)
			}
		})
	}
}

// GitHub exempts a 304 from the primary limit only for a request correctly
// authorized with an Authorization header.
func TestConditionalListUnauthenticated(t *testing.T) {
	_, srv := serve(t)
	u := srv.URL + "/orgs/acme/actions/runners"
	first := do(t, http.MethodGet, u, nil)
	nm := do(t, http.MethodGet, u, map[string]string{"If-None-Match": first.header.Get("ETag")})
	if nm.status != http.StatusNotModified || nm.header.Get("X-RateLimit-Remaining") != "4998" {
		t.Errorf("anonymous conditional list %d remaining %q, want 304 and 4998", nm.status, nm.header.Get("X-RateLimit-Remaining"))
	}
}

// The listing can lag: a busy runner listed idle whose DELETE answers 422
// (actions/runner#4422). The log tells lists and removals apart.
func TestListingLags(t *testing.T) {
	f, srv := serve(t)
	id := f.AddRunner(org, "r1")
	f.AddRunner(org, "r2")
	f.SetBusy(org, "r1", true)
	if !f.SetListingLags(org, "r1", true) || f.SetListingLags(org, "nobody", true) {
		t.Fatal("SetListingLags: want true for r1, false for an unknown runner")
	}
	list := func() string { return do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners?name=r1", nil).body }
	byID := fmt.Sprintf("%s/orgs/acme/actions/runners/%d", srv.URL, id)

	if b := list(); !strings.Contains(b, `"busy":false`) {
		t.Errorf("lagging list %s, want r1 idle", b)
	}
	if b := do(t, http.MethodGet, byID, nil).body; !strings.Contains(b, `"busy":false`) {
		t.Errorf("lagging GET by ID %s, want r1 idle", b)
	}
	if a := do(t, http.MethodDelete, byID, nil); a.status != http.StatusUnprocessableEntity {
		t.Errorf("DELETE of the busy runner listed idle: %d, want 422", a.status)
	}
	if r, _ := f.Runner(org, "r1"); !r.Busy {
		t.Error("Runner shows the lag; it should show the truth")
	}
	g := &ghfake.Remote{BaseURL: srv.URL}
	if err := g.SetListingLags(context.Background(), org, "r1", false); err != nil {
		t.Fatal(err)
	}
	if b := list(); !strings.Contains(b, `"busy":true`) {
		t.Errorf("list after the lag %s, want r1 busy", b)
	}
	if err := g.SetListingLags(context.Background(), org, "nobody", true); !ghfake.IsNotFound(err) {
		t.Errorf("remote lag of an unknown runner: %v, want not found", err)
	}
	do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners", nil)

	counts := map[string]ghfake.RequestMatch{
		"lists in acme":       {Op: ghfake.OpList, Scope: org},
		"lists of r1 by name": {Op: ghfake.OpList, Runner: "r1"},
		"removals of r1":      {Op: ghfake.OpRemove, Runner: "r1"},
		"removals by ID":      {Op: ghfake.OpRemove, RunnerID: id},
		"422s":                {Status: http.StatusUnprocessableEntity},
		"gets of r1":          {Op: ghfake.OpGet, Scope: org, Runner: "r1"},
		"anything in a repo":  {Scope: repo},
		"removals of r2":      {Op: ghfake.OpRemove, Runner: "r2"},
		"anonymous":           {Credential: ghfake.Anonymous},
	}
	want := map[string]int{
		"lists in acme": 3, "lists of r1 by name": 2, "removals of r1": 1, "removals by ID": 1,
		"422s": 1, "gets of r1": 1, "anything in a repo": 0, "removals of r2": 0, "anonymous": 5,
	}
	log := f.Requests()
	for name, m := range counts {
		if got := ghfake.CountRequests(log, m); got != want[name] {
			t.Errorf("%s: %d, want %d", name, got, want[name])
		}
	}
	remote, err := g.Requests(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := ghfake.CountRequests(remote, counts["removals of r1"]); got != 1 {
		t.Errorf("removals of r1 through the control API's log: %d, want 1", got)
	}
	// Re-registering is a new runner: no lag.
	f.SetListingLags(org, "r2", true)
	f.ReRegister(org, "r2")
	f.SetBusy(org, "r2", true)
	if b := do(t, http.MethodGet, srv.URL+"/orgs/acme/actions/runners?name=r2", nil).body; !strings.Contains(b, `"busy":true`) {
		t.Errorf("re-registered runner %s, want busy", b)
	}
}
