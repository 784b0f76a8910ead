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
	// AddScope makes owners, repositories and enterprises exist with no
	// runners: the fake answers 404 for one it does not hold, as GitHub does.
	// AddRunner makes its scope exist too.
	AddScope(scopes ...ghclient.Scope)
	// SetListingDelay makes GitHub's listing lag registrations and removals
	// by d, as GitHub's does (0, the default, lists the truth at once).
	SetListingDelay(d time.Duration)
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

// control runs one control request with a bounded context and reports its
// error as check does.
func (g *RemoteGitHub) control(op func(context.Context, *ghfake.Remote) error) bool {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return g.check(op(c, g.remote()))
}

// controlValue is control for a request that answers a value, returned even
// when the request failed (then usually the zero value).
func controlValue[T any](g *RemoteGitHub, op func(context.Context, *ghfake.Remote) (T, error)) T {
	var v T
	g.control(func(c context.Context, r *ghfake.Remote) error {
		var err error
		v, err = op(c, r)
		return err
	})
	return v
}

func (g *RemoteGitHub) AddRunner(scope ghclient.Scope, name string) int64 {
	return controlValue(g, func(c context.Context, r *ghfake.Remote) (int64, error) { return r.AddRunner(c, scope, name) })
}

func (g *RemoteGitHub) SetBusy(scope ghclient.Scope, name string, busy bool) bool {
	return g.control(func(c context.Context, r *ghfake.Remote) error { return r.SetBusy(c, scope, name, busy) })
}

func (g *RemoteGitHub) SetOnline(scope ghclient.Scope, name string, online bool) bool {
	return g.control(func(c context.Context, r *ghfake.Remote) error { return r.SetOnline(c, scope, name, online) })
}

func (g *RemoteGitHub) Runner(scope ghclient.Scope, name string) (ghfake.Runner, bool) {
	var runner ghfake.Runner
	var found bool
	ok := g.control(func(c context.Context, r *ghfake.Remote) error {
		var err error
		runner, found, err = r.Runner(c, scope, name)
		return err
	})
	return runner, ok && found
}

func (g *RemoteGitHub) Requests() []ghfake.Request {
	return controlValue(g, func(c context.Context, r *ghfake.Remote) ([]ghfake.Request, error) { return r.Requests(c) })
}

func (g *RemoteGitHub) ResetLog() {
	g.control(func(c context.Context, r *ghfake.Remote) error { return r.ResetLog(c) })
}

func (g *RemoteGitHub) InjectFault(f ghfake.Fault) {
	g.control(func(c context.Context, r *ghfake.Remote) error { return r.InjectFault(c, f) })
}

func (g *RemoteGitHub) ClearFaults() {
	g.control(func(c context.Context, r *ghfake.Remote) error { return r.ClearFaults(c) })
}

func (g *RemoteGitHub) SetSecondaryLimit(l ghfake.SecondaryLimit) {
	g.control(func(c context.Context, r *ghfake.Remote) error { return r.SetSecondaryLimit(c, l) })
}

func (g *RemoteGitHub) SecondaryUsage() map[string]ghfake.SecondaryUsage {
	return controlValue(g, func(c context.Context, r *ghfake.Remote) (map[string]ghfake.SecondaryUsage, error) {
		return r.SecondaryUsage(c)
	})
}

func (g *RemoteGitHub) ResetSecondaryUsage() {
	g.control(func(c context.Context, r *ghfake.Remote) error { return r.ResetSecondaryUsage(c) })
}

func (g *RemoteGitHub) SetListingLags(scope ghclient.Scope, name string, lags bool) bool {
	return g.control(func(c context.Context, r *ghfake.Remote) error { return r.SetListingLags(c, scope, name, lags) })
}

func (g *RemoteGitHub) AddScope(scopes ...ghclient.Scope) {
	for _, scope := range scopes {
		g.control(func(c context.Context, r *ghfake.Remote) error { return r.AddScope(c, scope) })
	}
}

func (g *RemoteGitHub) SetListingDelay(d time.Duration) {
	g.control(func(c context.Context, r *ghfake.Remote) error { return r.SetListingDelay(c, d) })
}

// NewTenant is one scenario's tenant: the organization org-<name> on the
// fake GitHub, and namespace ns (with its default ServiceAccount).
func (e *Env) NewTenant(ctx context.Context, name, ns string) (ghclient.Scope, error) {
	org, err := ghclient.OrgScope("org-" + name)
	if err != nil {
		return ghclient.Scope{}, err
	}
	e.GitHub.AddScope(org)
	return org, e.CreateNamespace(ctx, ns)
}
