package framework

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
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
}

var (
	_ GitHub = &ghfake.Fake{}
	_ GitHub = &RemoteGitHub{}
)

// RemoteGitHub drives a fake GitHub in another process through /_fake/.
// Failures go to Fail (tests pass t.Fatal-like functions): the GitHub
// interface mirrors the in-process fake, whose controls cannot fail.
type RemoteGitHub struct {
	// BaseURL ends before /_fake/, e.g. http://127.0.0.1:8080 or an API server
	// service-proxy URL.
	BaseURL string
	Client  *http.Client
	Fail    func(error)
}

func (g *RemoteGitHub) fail(err error) {
	if g.Fail != nil {
		g.Fail(err)
		return
	}
	panic(err)
}

// do sends a control request; out, when set, receives the JSON answer.
func (g *RemoteGitHub) do(method, path string, query url.Values, body, out any) (int, bool) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			g.fail(err)
			return 0, false
		}
		rd = bytes.NewReader(b)
	}
	u := strings.TrimSuffix(g.BaseURL, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		g.fail(err)
		return 0, false
	}
	req.Header.Set("Content-Type", "application/json")
	client := g.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		g.fail(fmt.Errorf("fake GitHub control %s %s: %w", method, path, err))
		return 0, false
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound {
		g.fail(fmt.Errorf("fake GitHub control %s %s: %s: %s", method, path, resp.Status, data))
		return resp.StatusCode, false
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			g.fail(fmt.Errorf("fake GitHub control %s %s: decode %q: %w", method, path, data, err))
			return resp.StatusCode, false
		}
	}
	return resp.StatusCode, resp.StatusCode < 300
}

func scopeJSON(s ghclient.Scope) ghfake.ScopeJSON {
	return ghfake.ScopeJSON{Kind: s.Kind, Name: s.Name}
}

func (g *RemoteGitHub) AddRunner(scope ghclient.Scope, name string) int64 {
	var out struct {
		ID int64 `json:"id"`
	}
	g.do(http.MethodPost, "/_fake/runners", nil, ghfake.RunnerRequest{Scope: scopeJSON(scope), Name: name}, &out)
	return out.ID
}

func (g *RemoteGitHub) SetBusy(scope ghclient.Scope, name string, busy bool) bool {
	_, ok := g.do(http.MethodPost, "/_fake/runners/state", nil, ghfake.RunnerRequest{Scope: scopeJSON(scope), Name: name, Busy: &busy}, nil)
	return ok
}

func (g *RemoteGitHub) SetOnline(scope ghclient.Scope, name string, online bool) bool {
	_, ok := g.do(http.MethodPost, "/_fake/runners/state", nil, ghfake.RunnerRequest{Scope: scopeJSON(scope), Name: name, Online: &online}, nil)
	return ok
}

func (g *RemoteGitHub) Runner(scope ghclient.Scope, name string) (ghfake.Runner, bool) {
	var runners []ghfake.Runner
	g.do(http.MethodGet, "/_fake/runners", url.Values{"kind": {string(scope.Kind)}, "name": {scope.Name}}, nil, &runners)
	for _, r := range runners {
		if r.Name == name {
			return r, true
		}
	}
	return ghfake.Runner{}, false
}

func (g *RemoteGitHub) Requests() []ghfake.Request {
	var reqs []ghfake.Request
	g.do(http.MethodGet, "/_fake/requests", nil, nil, &reqs)
	return reqs
}

func (g *RemoteGitHub) ResetLog() { g.do(http.MethodDelete, "/_fake/requests", nil, nil, nil) }

func (g *RemoteGitHub) InjectFault(f ghfake.Fault) {
	req := ghfake.FaultRequest{Fault: f}
	if f.Delay > 0 {
		req.Delay = f.Delay.String()
	}
	g.do(http.MethodPost, "/_fake/faults", nil, req, nil)
}

func (g *RemoteGitHub) ClearFaults() { g.do(http.MethodDelete, "/_fake/faults", nil, nil, nil) }
