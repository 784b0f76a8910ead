package framework

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// remoteFake serves a fake GitHub over HTTP and returns it, its server and
// a RemoteGitHub driving it that fails t on any control error. The fake
// takes the webhook's token, as Start's does.
func remoteFake(t *testing.T) (*ghfake.Fake, *httptest.Server, *RemoteGitHub) {
	t.Helper()
	fake := ghfake.New(ghfake.WithToken(githubToken))
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return fake, srv, &RemoteGitHub{BaseURL: srv.URL, Fail: func(err error) { t.Fatal(err) }}
}

// RemoteGitHub must do to an out-of-process fake what the scenarios do to an
// in-process one: check each control against the fake's own state.
func TestRemoteGitHubControlsTheFake(t *testing.T) {
	fake, srv, remote := remoteFake(t)
	org := fixture.Org("acme")

	id := remote.AddRunner(org, "r1")
	if got, ok := fake.Runner(org, "r1"); !ok || got.ID != id || id == 0 {
		t.Fatalf("AddRunner: remote id %d, fake has %+v %v", id, got, ok)
	}
	if !remote.SetBusy(org, "r1", true) {
		t.Fatal("SetBusy reported failure")
	}
	if got, _ := fake.Runner(org, "r1"); !got.Busy {
		t.Fatal("SetBusy did not reach the fake")
	}
	if remote.SetBusy(org, "nope", true) {
		t.Error("SetBusy of an unknown runner reported success")
	}
	if got, ok := remote.Runner(org, "r1"); !ok || !got.Busy || got.ID != id {
		t.Errorf("Runner = %+v %v", got, ok)
	}
	if _, ok := remote.Runner(org, "nope"); ok {
		t.Error("Runner found an unknown runner")
	}

	remote.InjectFault(ghfake.Fault{Kind: ghfake.FaultStatus, Status: 503, Times: 1})
	resp, err := srv.Client().Get(srv.URL + "/orgs/acme/actions/runners")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("injected fault: status %d, want 503", resp.StatusCode)
	}
	reqs := remote.Requests()
	if len(reqs) != 1 || reqs[0].Status != 503 || reqs[0].Path != "/orgs/acme/actions/runners" {
		t.Errorf("Requests = %+v, want the one 503", reqs)
	}
	remote.ResetLog()
	remote.ClearFaults()
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("ResetLog left %d requests", n)
	}

	// GitHub answers 404 for an organization it does not have, until AddScope.
	if got := getStatus(t, srv, "/orgs/beta/actions/runners"); got != 404 {
		t.Errorf("unknown organization: %d, want 404", got)
	}
	remote.AddScope(fixture.Org("beta"))
	if got := getStatus(t, srv, "/orgs/beta/actions/runners"); got != 200 {
		t.Errorf("organization added with AddScope: %d, want 200", got)
	}

	// A listing delay hides a new runner from the listing until it passes.
	remote.SetListingDelay(time.Hour)
	remote.AddRunner(fixture.Org("beta"), "late")
	if got := listedNames(t, srv, "/orgs/beta/actions/runners"); len(got) != 0 {
		t.Errorf("listed %v right after registration with a listing delay, want none", got)
	}
	remote.SetListingDelay(0)
	remote.AddRunner(fixture.Org("beta"), "prompt")
	if got := listedNames(t, srv, "/orgs/beta/actions/runners"); len(got) != 1 || got[0] != "prompt" {
		t.Errorf("listed %v without a delay, want [prompt]", got)
	}
}

// The secondary limit and the lagging listing reach the fake through the
// control API as well.
func TestRemoteGitHubSecondaryAndLag(t *testing.T) {
	fake, srv, remote := remoteFake(t)
	org := fixture.Org("acme")
	fake.AddRunner(org, "r1")

	remote.SetSecondaryLimit(ghfake.SecondaryLimit{PointsPerMinute: 1})
	get := func() int { return getStatus(t, srv, "/orgs/acme/actions/runners") }
	if first, second := get(), get(); first != 200 || second != 403 {
		t.Errorf("GETs over a 1-point limit: %d then %d, want 200 then 403", first, second)
	}
	if u := remote.SecondaryUsage()[GitHubCredential()]; u.Points != 2 || u.Limited != 1 {
		t.Errorf("usage %+v, want 2 points and 1 limited for the webhook's credential", u)
	}
	remote.ResetSecondaryUsage()
	if u := fake.SecondaryUsage(); len(u) != 0 {
		t.Errorf("usage after reset %+v", u)
	}

	fake.SetBusy(org, "r1", true)
	if !remote.SetListingLags(org, "r1", true) || remote.SetListingLags(org, "nope", true) {
		t.Error("SetListingLags: want true for r1, false for an unknown runner")
	}
	remote.SetSecondaryLimit(ghfake.SecondaryLimit{Off: true})
	if list := listRunners(t, srv, "/orgs/acme/actions/runners?name=r1"); len(list) != 1 || list[0].Busy {
		t.Errorf("lagging listing %+v: want r1 listed idle", list)
	}
}

// getWithToken GETs path from the fake with the webhook's token.
func getWithToken(t *testing.T, srv *httptest.Server, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+githubToken)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// getStatus GETs path from the fake with the webhook's token and returns the status.
func getStatus(t *testing.T, srv *httptest.Server, path string) int {
	t.Helper()
	resp := getWithToken(t, srv, path)
	resp.Body.Close()
	return resp.StatusCode
}

// listRunners lists path's runners with the webhook's token.
func listRunners(t *testing.T, srv *httptest.Server, path string) []ghfake.Runner {
	t.Helper()
	resp := getWithToken(t, srv, path)
	defer resp.Body.Close()
	var list struct {
		Runners []ghfake.Runner `json:"runners"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return list.Runners
}

// listedNames lists path's runners' names with the webhook's token.
func listedNames(t *testing.T, srv *httptest.Server, path string) []string {
	t.Helper()
	var names []string
	for _, r := range listRunners(t, srv, path) {
		names = append(names, r.Name)
	}
	return names
}
