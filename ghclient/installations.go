package ghclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/golang-jwt/jwt/v4"
	"github.com/google/go-github/v93/github"
)

// maxInstallations bounds the per-owner cache; an App is rarely installed on
// more owners than that in one cluster.
const maxInstallations = 1000

// ErrAppNotInstalled: the GitHub App has no installation on the runner's owner.
var ErrAppNotInstalled = errors.New("the GitHub App is not installed there")

// installations finds the App installation of each runner owner with the app
// JWT and keeps one client per owner; every installation shares the one key.
type installations struct {
	atr    *ghinstallation.AppsTransport
	appAPI *github.Client // authenticated as the App itself
	build  func(http.RoundTripper) (*github.Client, error)

	mu     sync.Mutex
	owners map[string]*installation // lower-case owner login
}

// installation is a discovered (or being discovered) installation; done is
// closed once id/gh or err are set.
type installation struct {
	done chan struct{}
	id   int64
	gh   *github.Client
	err  error
	// until is when a failed discovery (404, 401 or 403) is asked again.
	until time.Time
}

// remembered reports whether inst still answers at now: in flight, found,
// or a failure whose memory has not run out.
func (inst *installation) remembered(now time.Time) bool {
	select {
	case <-inst.done:
		return inst.err == nil || now.Before(inst.until)
	default:
		return true // in flight
	}
}

func ownerOf(scope Scope) string {
	owner, _, _ := strings.Cut(scope.Name, "/")
	return strings.ToLower(owner)
}

// client returns the owner's installation client, discovering it once for all
// concurrent callers. Discovery runs detached from ctx (bounded by
// lookupTimeout) so one caller giving up does not fail the others.
func (in *installations) client(ctx context.Context, c *Client, scope Scope) (*github.Client, error) {
	owner := ownerOf(scope)
	in.mu.Lock()
	inst, ok := in.owners[owner]
	if !ok || !inst.remembered(c.now()) {
		in.makeRoomLocked()
		inst = &installation{done: make(chan struct{})}
		in.owners[owner] = inst
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
		go func() {
			defer cancel()
			in.discover(dctx, c, scope, owner, inst)
		}()
	}
	in.mu.Unlock()

	select {
	case <-inst.done:
		return inst.gh, inst.err
	case <-ctx.Done():
		return nil, fmt.Errorf("find the GitHub App installation for %s: %w", scope, ctx.Err())
	}
}

// makeRoomLocked drops finished entries when the cache is full; a dropped
// owner costs one more look-up.
func (in *installations) makeRoomLocked() {
	if len(in.owners) < maxInstallations {
		return
	}
	for k, inst := range in.owners {
		select {
		case <-inst.done:
			delete(in.owners, k)
		default:
		}
		if len(in.owners) < maxInstallations*9/10 {
			return
		}
	}
}

func (in *installations) discover(ctx context.Context, c *Client, scope Scope, owner string, inst *installation) {
	defer close(inst.done)
	var (
		found *github.Installation
		resp  *github.Response
		err   error
	)
	op := fmt.Sprintf("find the GitHub App installation for %s", scope)
	if scope.Kind == ScopeRepo {
		o, r, _ := strings.Cut(scope.Name, "/")
		found, resp, err = in.appAPI.Apps.GetRepositoryInstallation(ctx, o, r)
	} else {
		found, resp, err = in.appAPI.Apps.GetOrganizationInstallation(ctx, scope.Name)
	}
	raw := err
	switch {
	case statusOf(err) == http.StatusNotFound:
		err = fmt.Errorf("%s: %w (GitHub answered 404)", op, ErrAppNotInstalled)
	case err != nil:
		err = c.wrap(op, resp, err)
	case found.GetID() <= 0:
		err = fmt.Errorf("%s: GitHub answered without an installation ID", op)
	}
	if err == nil {
		inst.id = found.GetID()
		// A copy per installation: ghinstallation writes the apps transport's
		// fields on each token refresh. The key (signer) stays shared.
		atr := *in.atr
		// Each installation has a primary limit of its own: one spent
		// must not hold the others' requests.
		inst.gh, err = in.build(&limitKeyTransport{next: ghinstallation.NewFromAppsTransport(&atr, inst.id), key: "installation/" + strconv.FormatInt(inst.id, 10)})
	}
	if err != nil {
		inst.err = err
		if rememberedStatus(raw, c.now(), c.cloud) != 0 {
			// The App is not installed there (or may not look): asking
			// again for every decision changes nothing.
			inst.until = c.now().Add(FailureTTL)
			return
		}
		// Other failures are not kept: the next caller asks again.
		in.drop(owner, inst)
	}
}

// forget drops the owner's installation so the next request looks it up again.
func (in *installations) forget(scope Scope) {
	owner := ownerOf(scope)
	in.mu.Lock()
	defer in.mu.Unlock()
	if inst, ok := in.owners[owner]; ok {
		select {
		case <-inst.done:
			delete(in.owners, owner)
		default: // still being discovered: that answer is fresh
		}
	}
}

func (in *installations) drop(owner string, inst *installation) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.owners[owner] == inst {
		delete(in.owners, owner)
	}
}

// appsTransport signs app JWTs; a client ID becomes the JWT's issuer, as
// GitHub accepts either.
func appsTransport(rt http.RoundTripper, app *appAuth) (*ghinstallation.AppsTransport, error) {
	if app.id > 0 {
		return ghinstallation.NewAppsTransportFromPrivateKey(rt, app.id, app.key), nil
	}
	signer := issuerSigner{issuer: app.issuer, next: ghinstallation.NewRSASigner(jwt.SigningMethodRS256, app.key)}
	atr, err := ghinstallation.NewAppsTransportWithOptions(rt, 0, ghinstallation.WithSigner(signer))
	if err != nil {
		return nil, &fieldError{FieldPrivateKey, err}
	}
	return atr, nil
}

// issuerSigner replaces the numeric issuer ghinstallation writes with a client ID.
type issuerSigner struct {
	issuer string
	next   ghinstallation.Signer
}

func (s issuerSigner) Sign(claims jwt.Claims) (string, error) {
	if rc, ok := claims.(*jwt.RegisteredClaims); ok {
		cp := *rc
		cp.Issuer = s.issuer
		return s.next.Sign(&cp)
	}
	return s.next.Sign(claims)
}
