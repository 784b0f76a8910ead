package framework

import (
	"context"
	"net/http"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

// GitHub is what the scenarios do to the fake GitHub: *ghfake.Fake in process,
// or RemoteGitHub over its /_fake/ control API when the fake runs in a cluster.
type GitHub interface {
	AddRunner(scope ghclient.Scope, name string) int64
	SetBusy(scope ghclient.Scope, name string, busy bool) bool
	SetOnline(scope ghclient.Scope, name string, online bool) bool
	Runner(scope ghclient.Scope, name string) (ghfake.Runner, bool)
	Requests() []ghfake.Request
	ResetLog()
	InjectFault(f ghfake.Fault)
	ClearFaults()
	// SetSecondaryLimit, SecondaryUsage and ResetSecondaryUsage drive
	// GitHub's secondary rate limit, which the fake enforces per credential
	// (the webhook's is GitHubCredential()).
	SetSecondaryLimit(l ghfake.SecondaryLimit)
	SecondaryUsage() map[string]ghfake.SecondaryUsage
	ResetSecondaryUsage()
	// SetListingLags shows a busy runner idle in GitHub's listing while its
	// DELETE still answers 422.
	SetListingLags(scope ghclient.Scope, name string, lags bool) bool
}

// GitHubCredential is what the fake GitHub counts the webhook's requests
// against: the key of its token in SecondaryUsage and Request.Credential.
func GitHubCredential() string { return ghfake.TokenCredential(githubToken) }

var (
	_ GitHub = &ghfake.Fake{}
	_ GitHub = &RemoteGitHub{}
)

// RemoteGitHub drives a fake GitHub in another process through ghfake's own
// control client. Failures go to Fail (tests pass t.Fatal-like functions): the
// GitHub interface mirrors the in-process fake, whose controls cannot fail.
type RemoteGitHub struct {
	// BaseURL ends before /_fake/, e.g. http://127.0.0.1:8080 or an API server
	// service-proxy URL.
	BaseURL string
	Client  *http.Client
	Fail    func(error)
}

func (g *RemoteGitHub) remote() *ghfake.Remote {
	return &ghfake.Remote{BaseURL: g.BaseURL, Client: g.Client}
}

// check reports err (nil is fine) and says whether the control succeeded.
func (g *RemoteGitHub) check(err error) bool {
	switch {
	case err == nil:
		return true
	case ghfake.IsNotFound(err):
		return false
	case g.Fail != nil:
		g.Fail(err)
		return false
	}
	panic(err)
}

// ctx bounds one control request.
func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func (g *RemoteGitHub) AddRunner(scope ghclient.Scope, name string) int64 {
	c, cancel := ctx()
	defer cancel()
	id, err := g.remote().AddRunner(c, scope, name)
	g.check(err)
	return id
}

func (g *RemoteGitHub) SetBusy(scope ghclient.Scope, name string, busy bool) bool {
	c, cancel := ctx()
	defer cancel()
	return g.check(g.remote().SetBusy(c, scope, name, busy))
}

func (g *RemoteGitHub) SetOnline(scope ghclient.Scope, name string, online bool) bool {
	c, cancel := ctx()
	defer cancel()
	return g.check(g.remote().SetOnline(c, scope, name, online))
}

func (g *RemoteGitHub) Runner(scope ghclient.Scope, name string) (ghfake.Runner, bool) {
	c, cancel := ctx()
	defer cancel()
	r, found, err := g.remote().Runner(c, scope, name)
	return r, g.check(err) && found
}

func (g *RemoteGitHub) Requests() []ghfake.Request {
	c, cancel := ctx()
	defer cancel()
	reqs, err := g.remote().Requests(c)
	g.check(err)
	return reqs
}

func (g *RemoteGitHub) ResetLog() {
	c, cancel := ctx()
	defer cancel()
	g.check(g.remote().ResetLog(c))
}

func (g *RemoteGitHub) InjectFault(f ghfake.Fault) {
	c, cancel := ctx()
	defer cancel()
	g.check(g.remote().InjectFault(c, f))
}

func (g *RemoteGitHub) ClearFaults() {
	c, cancel := ctx()
	defer cancel()
	g.check(g.remote().ClearFaults(c))
}

func (g *RemoteGitHub) SetSecondaryLimit(l ghfake.SecondaryLimit) {
	c, cancel := ctx()
	defer cancel()
	g.check(g.remote().SetSecondaryLimit(c, l))
}

func (g *RemoteGitHub) SecondaryUsage() map[string]ghfake.SecondaryUsage {
	c, cancel := ctx()
	defer cancel()
	u, err := g.remote().SecondaryUsage(c)
	g.check(err)
	return u
}

func (g *RemoteGitHub) ResetSecondaryUsage() {
	c, cancel := ctx()
	defer cancel()
	g.check(g.remote().ResetSecondaryUsage(c))
}

func (g *RemoteGitHub) SetListingLags(scope ghclient.Scope, name string, lags bool) bool {
	c, cancel := ctx()
	defer cancel()
	return g.check(g.remote().SetListingLags(c, scope, name, lags))
}
