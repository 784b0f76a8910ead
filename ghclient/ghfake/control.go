package ghfake

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
)

// controlPrefix is where ControlHandler lives; ServeHTTP hands these paths to
// it, so one server can be both the fake GitHub and its remote control.
const controlPrefix = "/_fake/"

// ScopeJSON is a scope on the control API: {"kind":"org","name":"acme"}.
type ScopeJSON struct {
	Kind ghclient.ScopeKind `json:"kind"`
	Name string             `json:"name"`
}

// RunnerRequest is the body of POST /_fake/runners and POST /_fake/runners/state.
type RunnerRequest struct {
	Scope  ScopeJSON `json:"scope"`
	Name   string    `json:"name"`
	Busy   *bool     `json:"busy,omitempty"`
	Online *bool     `json:"online,omitempty"`
	// ListingLags is SetListingLags.
	ListingLags *bool `json:"listingLags,omitempty"`
}

// SecondaryState is GET /_fake/secondary's answer: the limit in force
// (defaults filled in) and every credential's usage, by credential.
type SecondaryState struct {
	Limit SecondaryLimit   `json:"limit"`
	Usage []SecondaryUsage `json:"usage"`
}

// FaultRequest is the body of POST /_fake/faults; Delay is a Go duration ("2s").
type FaultRequest struct {
	Fault
	Delay string `json:"delay,omitempty"`
}

// RateLimitRequest is the body of POST /_fake/ratelimit: every credential's
// window (SetRateLimit), or Credential's alone (SetCredentialRateLimit).
type RateLimitRequest struct {
	Credential        string `json:"credential,omitempty"`
	Limit             int    `json:"limit"`
	Remaining         int    `json:"remaining"`
	ResetAfterSeconds int    `json:"resetAfterSeconds,omitempty"`
	Status            int    `json:"status,omitempty"` // 403 or 429
}

// AppRequest is the body of POST /_fake/apps: an App and the PEM public key
// its JWTs must verify against; ClientID optionally names it too.
type AppRequest struct {
	AppID        int64  `json:"appID"`
	ClientID     string `json:"clientID,omitempty"`
	PublicKeyPEM string `json:"publicKeyPEM"`
}

// InstallationRequest is the body of POST /_fake/installations; ID chooses
// the installation's ID (AddInstallationWithID), 0 lets the fake choose.
type InstallationRequest struct {
	ID     int64    `json:"id,omitempty"`
	AppID  int64    `json:"appID"`
	Owners []string `json:"owners"`
}

// JITRequest is the body of POST /_fake/runners/jit.
type JITRequest struct {
	Scope  ScopeJSON `json:"scope"`
	Name   string    `json:"name"`
	Labels []string  `json:"labels,omitempty"`
}

// JITResponse is generate-jitconfig's answer (201), also on the control API.
type JITResponse struct {
	Runner           Runner `json:"runner"`
	EncodedJITConfig string `json:"encoded_jit_config"`
}

// ControlHandler exposes the test controls as JSON over HTTP under /_fake/, for
// out-of-process tests and demos. Control requests are never logged.
//
//	POST   /_fake/runners        RunnerRequest -> 201 {"id":N} (busy/online applied if set)
//	GET    /_fake/runners?kind=org&name=acme -> 200 [Runner...]
//	DELETE /_fake/runners?kind=org&name=acme&runner=NAME -> 204 | 404
//	POST   /_fake/runners/state  RunnerRequest (busy, online and/or listingLags) -> 204 | 404
//	POST   /_fake/faults         FaultRequest -> 204
//	DELETE /_fake/faults         -> 204
//	GET    /_fake/requests       -> 200 [Request...]
//	DELETE /_fake/requests       -> 204
//	POST   /_fake/latency        {"latency":"100ms"} -> 204
//	POST   /_fake/token          {"token":"..."} -> 204 (SetToken; "" accepts none)
//	POST   /_fake/tokens         {"token":"..."} -> 204 (AddToken)
//	POST   /_fake/scopes         ScopeJSON -> 204 (AddScope)
//	DELETE /_fake/scopes?kind=repo&name=o/r -> 204 | 404 (RemoveScope)
//	POST   /_fake/leniency       Leniency -> 204 ({} is GitHub's strictness)
//	POST   /_fake/listingdelay   {"delay":"2s"} -> 204 (SetListingDelay)
//	POST   /_fake/ratelimit      RateLimitRequest -> 204
//	POST   /_fake/apps           AppRequest -> 204
//	POST   /_fake/installations  InstallationRequest -> 201 {"id":N}
//	GET    /_fake/installations  -> 200 [Installation...]
//	DELETE /_fake/installations?id=N -> 204 | 404 (its tokens are revoked)
//	POST   /_fake/runners/jit    JITRequest -> 201 JITResponse | 409
//	POST   /_fake/style          {"style":"ghes"|"dotcom"|""} -> 204
//	POST   /_fake/secondary      SecondaryLimit -> 204 ({} is GitHub's limit, {"off":true} stops enforcing)
//	GET    /_fake/secondary      -> 200 SecondaryState
//	DELETE /_fake/secondary      -> 204 (ResetSecondaryUsage)
func (f *Fake) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	f.handleAppControls(mux)
	f.handleSecondaryControls(mux)
	f.handleStrictnessControls(mux)
	f.handleEventControls(mux)
	f.handleWorkflowControls(mux) // runs_control.go
	mux.HandleFunc("POST /_fake/runners", func(w http.ResponseWriter, r *http.Request) {
		var req RunnerRequest
		scope, ok := decodeRunner(w, r, &req)
		if !ok {
			return
		}
		id := f.AddRunner(scope, req.Name)
		f.applyState(scope, req)
		writeJSON(w, http.StatusCreated, map[string]int64{"id": id})
	})
	mux.HandleFunc("GET /_fake/runners", func(w http.ResponseWriter, r *http.Request) {
		scope, err := scopeFromQuery(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		runners := f.Runners(scope)
		if runners == nil {
			runners = []Runner{}
		}
		writeJSON(w, http.StatusOK, runners)
	})
	remover(mux, "DELETE /_fake/runners", "no such runner", func(scope ghclient.Scope, q url.Values) bool {
		return f.RemoveRunnerByName(scope, q.Get("runner"))
	})
	mux.HandleFunc("POST /_fake/runners/state", func(w http.ResponseWriter, r *http.Request) {
		var req RunnerRequest
		scope, ok := decodeRunner(w, r, &req)
		if !ok {
			return
		}
		if _, found := f.Runner(scope, req.Name); !found {
			http.Error(w, "no such runner", http.StatusNotFound)
			return
		}
		f.applyState(scope, req)
		w.WriteHeader(http.StatusNoContent)
	})
	setter(mux, "POST /_fake/faults", func(req FaultRequest) error {
		if req.Delay != "" {
			d, err := time.ParseDuration(req.Delay)
			if err != nil {
				return fmt.Errorf("delay: %w", err)
			}
			req.Fault.Delay = d
		}
		f.InjectFault(req.Fault)
		return nil
	})
	mux.HandleFunc("DELETE /_fake/faults", func(w http.ResponseWriter, _ *http.Request) {
		f.ClearFaults()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /_fake/requests", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, f.Requests())
	})
	mux.HandleFunc("DELETE /_fake/requests", func(w http.ResponseWriter, _ *http.Request) {
		f.ResetLog()
		w.WriteHeader(http.StatusNoContent)
	})
	setter(mux, "POST /_fake/latency", func(req struct {
		Latency string `json:"latency"`
	}) error {
		d, err := time.ParseDuration(req.Latency)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		f.SetLatency(d)
		return nil
	})
	setter(mux, "POST /_fake/token", func(req struct {
		Token string `json:"token"`
	}) error {
		f.SetToken(req.Token)
		return nil
	})
	setter(mux, "POST /_fake/ratelimit", func(req RateLimitRequest) error {
		var reset time.Time
		if req.ResetAfterSeconds > 0 {
			reset = f.clock().Add(time.Duration(req.ResetAfterSeconds) * time.Second)
		}
		if req.Credential != "" {
			f.SetCredentialRateLimit(req.Credential, req.Limit, req.Remaining, reset)
		} else {
			f.SetRateLimit(req.Limit, req.Remaining, reset)
		}
		if req.Status != 0 {
			f.SetRateLimitStatus(req.Status)
		}
		return nil
	})
	return mux
}

// setter adds a control route that decodes a JSON body into a Req and applies
// it: 204 when apply succeeds, 400 with apply's error (or the decoding's)
// otherwise.
func setter[Req any](mux *http.ServeMux, pattern string, apply func(Req) error) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if !decode(w, r, &req) {
			return
		}
		if err := apply(req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func (f *Fake) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now()
}

func (f *Fake) applyState(scope ghclient.Scope, req RunnerRequest) {
	if req.Busy != nil {
		f.SetBusy(scope, req.Name, *req.Busy)
	}
	if req.Online != nil {
		f.SetOnline(scope, req.Name, *req.Online)
	}
	if req.ListingLags != nil {
		f.SetListingLags(scope, req.Name, *req.ListingLags)
	}
}

// handleSecondaryControls adds the secondary rate limit's controls.
func (f *Fake) handleSecondaryControls(mux *http.ServeMux) {
	setter(mux, "POST /_fake/secondary", func(req SecondaryLimit) error {
		if !req.valid() {
			return fmt.Errorf("pointsPerMinute %d, maxConcurrent %d: want >= 0; status %d: want 403 or 429",
				req.PointsPerMinute, req.MaxConcurrent, req.Status)
		}
		f.SetSecondaryLimit(req)
		return nil
	})
	mux.HandleFunc("GET /_fake/secondary", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		limit := f.secondary
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, SecondaryState{Limit: limit, Usage: sortedUsage(f.SecondaryUsage())})
	})
	mux.HandleFunc("DELETE /_fake/secondary", func(w http.ResponseWriter, _ *http.Request) {
		f.ResetSecondaryUsage()
		w.WriteHeader(http.StatusNoContent)
	})
}

// remover serves a DELETE control whose scope is in the kind and name query
// parameters: 204 when remove found what the request names, else 404 notFound.
func remover(mux *http.ServeMux, pattern, notFound string, remove func(ghclient.Scope, url.Values) bool) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		scope, err := scopeFromQuery(q)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !remove(scope, q) {
			http.Error(w, notFound, http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

func scopeFromQuery(q url.Values) (ghclient.Scope, error) {
	return scopeFrom(ScopeJSON{Kind: ghclient.ScopeKind(q.Get("kind")), Name: q.Get("name")})
}

func scopeFrom(s ScopeJSON) (ghclient.Scope, error) {
	switch s.Kind {
	case ghclient.ScopeEnterprise:
		return ghclient.EnterpriseScope(s.Name)
	case ghclient.ScopeOrg:
		return ghclient.OrgScope(s.Name)
	case ghclient.ScopeRepo:
		return ghclient.RepoScope(s.Name)
	default:
		return ghclient.Scope{}, fmt.Errorf("unknown scope kind %q (want enterprise, org or repo)", s.Kind)
	}
}

func decodeRunner(w http.ResponseWriter, r *http.Request, req *RunnerRequest) (ghclient.Scope, bool) {
	if !decode(w, r, req) {
		return ghclient.Scope{}, false
	}
	scope, err := scopeFrom(req.Scope)
	if err == nil && req.Name == "" {
		err = fmt.Errorf("missing runner name")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return ghclient.Scope{}, false
	}
	return scope, true
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "decode body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// handleAppControls adds the App, installation, JIT and style controls.
func (f *Fake) handleAppControls(mux *http.ServeMux) {
	setter(mux, "POST /_fake/apps", func(req AppRequest) error {
		if req.AppID <= 0 {
			return fmt.Errorf("appID %d: want > 0", req.AppID)
		}
		pub, err := parsePublicKey([]byte(req.PublicKeyPEM))
		if err != nil {
			return fmt.Errorf("publicKeyPEM: %w", err)
		}
		f.AddApp(req.AppID, pub)
		if req.ClientID != "" {
			f.SetAppClientID(req.AppID, req.ClientID)
		}
		return nil
	})
	mux.HandleFunc("POST /_fake/installations", func(w http.ResponseWriter, r *http.Request) {
		var req InstallationRequest
		if !decode(w, r, &req) {
			return
		}
		if req.AppID <= 0 || len(req.Owners) == 0 || req.ID < 0 {
			http.Error(w, "appID and owners are required, and id must not be negative", http.StatusBadRequest)
			return
		}
		id := req.ID
		if id > 0 {
			f.AddInstallationWithID(id, req.AppID, req.Owners...)
		} else {
			id = f.AddInstallation(req.AppID, req.Owners...)
		}
		writeJSON(w, http.StatusCreated, map[string]int64{"id": id})
	})
	mux.HandleFunc("GET /_fake/installations", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, f.Installations())
	})
	mux.HandleFunc("DELETE /_fake/installations", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.URL.Query().Get("id"), 10, 64)
		if err != nil {
			http.Error(w, "id: "+err.Error(), http.StatusBadRequest)
			return
		}
		if !f.RemoveInstallation(id) {
			http.Error(w, "no such installation", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /_fake/runners/jit", func(w http.ResponseWriter, r *http.Request) {
		var req JITRequest
		if !decode(w, r, &req) {
			return
		}
		scope, err := scopeFrom(req.Scope)
		if err == nil && req.Name == "" {
			err = errors.New("missing runner name")
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		run, cfg, err := f.RegisterJITRunner(scope, req.Name, req.Labels...)
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		writeJSON(w, http.StatusCreated, JITResponse{Runner: run, EncodedJITConfig: cfg})
	})
	setter(mux, "POST /_fake/style", func(req struct {
		Style Style `json:"style"`
	}) error {
		switch req.Style {
		case StyleAny, StyleDotCom, StyleGHES:
		default:
			return fmt.Errorf("unknown style %q", req.Style)
		}
		f.SetStyle(req.Style)
		return nil
	})
}

func parsePublicKey(pemBytes []byte) (*rsa.PublicKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if pub, err := x509.ParsePKIXPublicKey(block.Bytes); err == nil {
		if rsaPub, ok := pub.(*rsa.PublicKey); ok {
			return rsaPub, nil
		}
		return nil, errors.New("not an RSA key")
	}
	return x509.ParsePKCS1PublicKey(block.Bytes)
}

// handleStrictnessControls adds the controls of what the fake holds and
// accepts: scopes, tokens, leniency and the listing's delay.
func (f *Fake) handleStrictnessControls(mux *http.ServeMux) {
	setter(mux, "POST /_fake/tokens", func(req struct {
		Token string `json:"token"`
	}) error {
		if req.Token == "" {
			return errors.New("missing token")
		}
		f.AddToken(req.Token)
		return nil
	})
	setter(mux, "POST /_fake/scopes", func(req ScopeJSON) error {
		scope, err := scopeFrom(req)
		if err != nil {
			return err
		}
		f.AddScope(scope)
		return nil
	})
	remover(mux, "DELETE /_fake/scopes", "no such scope", func(scope ghclient.Scope, _ url.Values) bool {
		return f.RemoveScope(scope)
	})
	setter(mux, "POST /_fake/leniency", func(req Leniency) error {
		f.SetLeniency(req)
		return nil
	})
	setter(mux, "POST /_fake/listingdelay", func(req struct {
		Delay string `json:"delay"`
	}) error {
		d, err := time.ParseDuration(req.Delay)
		if err != nil || d < 0 {
			return fmt.Errorf("delay %q: want a duration >= 0", req.Delay)
		}
		f.SetListingDelay(d)
		return nil
	})
}
