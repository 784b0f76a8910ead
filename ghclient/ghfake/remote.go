package ghfake

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
)

// Remote drives a fake GitHub in another process through ControlHandler's
// /_fake/ API. Every method mirrors the *Fake method of the same name and
// returns an error for a failed or refused control request.
type Remote struct {
	// BaseURL ends before /_fake/, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Client defaults to one with a 10 s timeout.
	Client *http.Client
}

// notFoundError is a 404 from the control API.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// IsNotFound reports whether a Remote error was a 404 (no such runner or
// installation).
func IsNotFound(err error) bool {
	var nf *notFoundError
	return errors.As(err, &nf)
}

func (g *Remote) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("fake GitHub control %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	u := strings.TrimSuffix(g.BaseURL, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("fake GitHub control %s %s: %w", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := g.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fake GitHub control %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return &notFoundError{fmt.Sprintf("fake GitHub control %s %s: %s", method, path, strings.TrimSpace(string(data)))}
	case resp.StatusCode >= 300:
		return fmt.Errorf("fake GitHub control %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(data)))
	case out != nil:
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("fake GitHub control %s %s: decode %q: %w", method, path, data, err)
		}
	}
	return nil
}

func scopeJSON(s ghclient.Scope) ScopeJSON { return ScopeJSON{Kind: s.Kind, Name: s.Name} }

func scopeQuery(s ghclient.Scope) url.Values {
	return url.Values{"kind": {string(s.Kind)}, "name": {s.Name}}
}

// AddRunner registers an idle, online runner and returns its ID.
func (g *Remote) AddRunner(ctx context.Context, scope ghclient.Scope, name string) (int64, error) {
	var out struct {
		ID int64 `json:"id"`
	}
	err := g.do(ctx, http.MethodPost, "/_fake/runners", nil, RunnerRequest{Scope: scopeJSON(scope), Name: name}, &out)
	return out.ID, err
}

// RegisterJITRunner registers a runner as generate-jitconfig does.
func (g *Remote) RegisterJITRunner(ctx context.Context, scope ghclient.Scope, name string, labels ...string) (JITResponse, error) {
	var out JITResponse
	err := g.do(ctx, http.MethodPost, "/_fake/runners/jit", nil, JITRequest{Scope: scopeJSON(scope), Name: name, Labels: labels}, &out)
	return out, err
}

// SetBusy marks a runner busy or idle.
func (g *Remote) SetBusy(ctx context.Context, scope ghclient.Scope, name string, busy bool) error {
	return g.do(ctx, http.MethodPost, "/_fake/runners/state", nil, RunnerRequest{Scope: scopeJSON(scope), Name: name, Busy: &busy}, nil)
}

// SetOnline marks a runner online or offline.
func (g *Remote) SetOnline(ctx context.Context, scope ghclient.Scope, name string, online bool) error {
	return g.do(ctx, http.MethodPost, "/_fake/runners/state", nil, RunnerRequest{Scope: scopeJSON(scope), Name: name, Online: &online}, nil)
}

// Runners lists the scope's runners.
func (g *Remote) Runners(ctx context.Context, scope ghclient.Scope) ([]Runner, error) {
	var out []Runner
	err := g.do(ctx, http.MethodGet, "/_fake/runners", scopeQuery(scope), nil, &out)
	return out, err
}

// Runner returns the named runner; found is false when it is not registered.
func (g *Remote) Runner(ctx context.Context, scope ghclient.Scope, name string) (r Runner, found bool, err error) {
	runners, err := g.Runners(ctx, scope)
	for _, r := range runners {
		if r.Name == name {
			return r, true, err
		}
	}
	return Runner{}, false, err
}

// RemoveRunnerByName unregisters a runner (IsNotFound when it was not registered).
func (g *Remote) RemoveRunnerByName(ctx context.Context, scope ghclient.Scope, name string) error {
	q := scopeQuery(scope)
	q.Set("runner", name)
	return g.do(ctx, http.MethodDelete, "/_fake/runners", q, nil, nil)
}

// AddApp registers an App whose JWTs verify against pub; clientID may be empty.
func (g *Remote) AddApp(ctx context.Context, appID int64, clientID string, pub *rsa.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fmt.Errorf("encode public key: %w", err)
	}
	pemKey := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	return g.do(ctx, http.MethodPost, "/_fake/apps", nil, AppRequest{AppID: appID, ClientID: clientID, PublicKeyPEM: pemKey}, nil)
}

// AddInstallation installs the App on owners and returns the installation ID.
func (g *Remote) AddInstallation(ctx context.Context, appID int64, owners ...string) (int64, error) {
	var out struct {
		ID int64 `json:"id"`
	}
	err := g.do(ctx, http.MethodPost, "/_fake/installations", nil, InstallationRequest{AppID: appID, Owners: owners}, &out)
	return out.ID, err
}

// AddInstallationWithID installs the App on owners under installation ID id.
func (g *Remote) AddInstallationWithID(ctx context.Context, id, appID int64, owners ...string) error {
	return g.do(ctx, http.MethodPost, "/_fake/installations", nil, InstallationRequest{ID: id, AppID: appID, Owners: owners}, nil)
}

// RemoveInstallation uninstalls and revokes its tokens.
func (g *Remote) RemoveInstallation(ctx context.Context, id int64) error {
	return g.do(ctx, http.MethodDelete, "/_fake/installations", url.Values{"id": {strconv.FormatInt(id, 10)}}, nil, nil)
}

// SetStyle chooses the API roots served.
func (g *Remote) SetStyle(ctx context.Context, s Style) error {
	return g.do(ctx, http.MethodPost, "/_fake/style", nil, map[string]Style{"style": s}, nil)
}

// SetToken replaces the token the fake accepts ("" accepts none).
func (g *Remote) SetToken(ctx context.Context, token string) error {
	return g.do(ctx, http.MethodPost, "/_fake/token", nil, map[string]string{"token": token}, nil)
}

// SetLatency delays every API answer.
func (g *Remote) SetLatency(ctx context.Context, d time.Duration) error {
	return g.do(ctx, http.MethodPost, "/_fake/latency", nil, map[string]string{"latency": d.String()}, nil)
}

// SetRateLimit sets the primary window; status 0 keeps the current one.
func (g *Remote) SetRateLimit(ctx context.Context, req RateLimitRequest) error {
	return g.do(ctx, http.MethodPost, "/_fake/ratelimit", nil, req, nil)
}

// InjectFault queues a fault.
func (g *Remote) InjectFault(ctx context.Context, f Fault) error {
	req := FaultRequest{Fault: f}
	if f.Delay > 0 {
		req.Delay = f.Delay.String()
	}
	return g.do(ctx, http.MethodPost, "/_fake/faults", nil, req, nil)
}

// ClearFaults removes every queued fault.
func (g *Remote) ClearFaults(ctx context.Context) error {
	return g.do(ctx, http.MethodDelete, "/_fake/faults", nil, nil, nil)
}

// Requests returns the request log, oldest first.
func (g *Remote) Requests(ctx context.Context) ([]Request, error) {
	var out []Request
	err := g.do(ctx, http.MethodGet, "/_fake/requests", nil, nil, &out)
	return out, err
}

// ResetLog empties the request log.
func (g *Remote) ResetLog(ctx context.Context) error {
	return g.do(ctx, http.MethodDelete, "/_fake/requests", nil, nil, nil)
}

// SetListingLags makes the runner's listing show it idle while busy (or stops).
func (g *Remote) SetListingLags(ctx context.Context, scope ghclient.Scope, name string, lags bool) error {
	return g.do(ctx, http.MethodPost, "/_fake/runners/state", nil, RunnerRequest{Scope: scopeJSON(scope), Name: name, ListingLags: &lags}, nil)
}

// SetSecondaryLimit configures the secondary rate limit.
func (g *Remote) SetSecondaryLimit(ctx context.Context, l SecondaryLimit) error {
	return g.do(ctx, http.MethodPost, "/_fake/secondary", nil, l, nil)
}

// SecondaryState returns the secondary limit in force and every credential's usage.
func (g *Remote) SecondaryState(ctx context.Context) (SecondaryState, error) {
	var out SecondaryState
	err := g.do(ctx, http.MethodGet, "/_fake/secondary", nil, nil, &out)
	return out, err
}

// SecondaryUsage returns every credential's usage, keyed by credential.
func (g *Remote) SecondaryUsage(ctx context.Context) (map[string]SecondaryUsage, error) {
	st, err := g.SecondaryState(ctx)
	out := make(map[string]SecondaryUsage, len(st.Usage))
	for _, u := range st.Usage {
		out[u.Credential] = u
	}
	return out, err
}

// ResetSecondaryUsage forgets every credential's usage.
func (g *Remote) ResetSecondaryUsage(ctx context.Context) error {
	return g.do(ctx, http.MethodDelete, "/_fake/secondary", nil, nil, nil)
}

// AddToken accepts one more token.
func (g *Remote) AddToken(ctx context.Context, token string) error {
	return g.do(ctx, http.MethodPost, "/_fake/tokens", nil, map[string]string{"token": token}, nil)
}

// AddScope makes an owner, repository or enterprise exist with no runners.
func (g *Remote) AddScope(ctx context.Context, scope ghclient.Scope) error {
	return g.do(ctx, http.MethodPost, "/_fake/scopes", nil, scopeJSON(scope), nil)
}

// RemoveScope deletes a scope and its runners (IsNotFound when it was not held).
func (g *Remote) RemoveScope(ctx context.Context, scope ghclient.Scope) error {
	return g.do(ctx, http.MethodDelete, "/_fake/scopes", scopeQuery(scope), nil, nil)
}

// SetLeniency replaces the fake's leniencies.
func (g *Remote) SetLeniency(ctx context.Context, l Leniency) error {
	return g.do(ctx, http.MethodPost, "/_fake/leniency", nil, l, nil)
}

// SetListingDelay makes the listing lag registrations and removals by d.
func (g *Remote) SetListingDelay(ctx context.Context, d time.Duration) error {
	return g.do(ctx, http.MethodPost, "/_fake/listingdelay", nil, map[string]string{"delay": d.String()}, nil)
}
