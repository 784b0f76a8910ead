package ghfake

import (
	"encoding/json"
	"fmt"
	"net/http"
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
}

// FaultRequest is the body of POST /_fake/faults; Delay is a Go duration ("2s").
type FaultRequest struct {
	Fault
	Delay string `json:"delay,omitempty"`
}

// RateLimitRequest is the body of POST /_fake/ratelimit.
type RateLimitRequest struct {
	Limit             int `json:"limit"`
	Remaining         int `json:"remaining"`
	ResetAfterSeconds int `json:"resetAfterSeconds,omitempty"`
	Status            int `json:"status,omitempty"` // 403 or 429
}

// ControlHandler exposes the test controls as JSON over HTTP under /_fake/, for
// out-of-process tests and demos. Control requests are never logged.
//
//	POST   /_fake/runners        RunnerRequest -> 201 {"id":N} (busy/online applied if set)
//	GET    /_fake/runners?kind=org&name=acme -> 200 [Runner...]
//	DELETE /_fake/runners?kind=org&name=acme&runner=NAME -> 204 | 404
//	POST   /_fake/runners/state  RunnerRequest (busy and/or online) -> 204 | 404
//	POST   /_fake/faults         FaultRequest -> 204
//	DELETE /_fake/faults         -> 204
//	GET    /_fake/requests       -> 200 [Request...]
//	DELETE /_fake/requests       -> 204
//	POST   /_fake/latency        {"latency":"100ms"} -> 204
//	POST   /_fake/token          {"token":"..."} -> 204 ("" turns token auth off)
//	POST   /_fake/ratelimit      RateLimitRequest -> 204
func (f *Fake) ControlHandler() http.Handler {
	mux := http.NewServeMux()
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
		scope, err := scopeFrom(ScopeJSON{Kind: ghclient.ScopeKind(r.URL.Query().Get("kind")), Name: r.URL.Query().Get("name")})
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
	mux.HandleFunc("DELETE /_fake/runners", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		scope, err := scopeFrom(ScopeJSON{Kind: ghclient.ScopeKind(q.Get("kind")), Name: q.Get("name")})
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !f.RemoveRunnerByName(scope, q.Get("runner")) {
			http.Error(w, "no such runner", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
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
	mux.HandleFunc("POST /_fake/faults", func(w http.ResponseWriter, r *http.Request) {
		var req FaultRequest
		if !decode(w, r, &req) {
			return
		}
		if req.Delay != "" {
			d, err := time.ParseDuration(req.Delay)
			if err != nil {
				http.Error(w, "delay: "+err.Error(), http.StatusBadRequest)
				return
			}
			req.Fault.Delay = d
		}
		f.InjectFault(req.Fault)
		w.WriteHeader(http.StatusNoContent)
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
	mux.HandleFunc("POST /_fake/latency", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Latency string `json:"latency"`
		}
		if !decode(w, r, &req) {
			return
		}
		d, err := time.ParseDuration(req.Latency)
		if err != nil {
			http.Error(w, "latency: "+err.Error(), http.StatusBadRequest)
			return
		}
		f.SetLatency(d)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /_fake/token", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Token string `json:"token"`
		}
		if !decode(w, r, &req) {
			return
		}
		f.SetToken(req.Token)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /_fake/ratelimit", func(w http.ResponseWriter, r *http.Request) {
		var req RateLimitRequest
		if !decode(w, r, &req) {
			return
		}
		var reset time.Time
		if req.ResetAfterSeconds > 0 {
			reset = f.clock().Add(time.Duration(req.ResetAfterSeconds) * time.Second)
		}
		f.SetRateLimit(req.Limit, req.Remaining, reset)
		if req.Status != 0 {
			f.SetRateLimitStatus(req.Status)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
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
