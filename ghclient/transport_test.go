package ghclient_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

// privateCAFake serves a fake GitHub over TLS with a certificate for
// 127.0.0.1 signed by a CA of its own, like a GitHub Enterprise Server behind
// a company CA; it returns the fake, its API base and the CA's PEM.
func privateCAFake(t *testing.T) (*ghfake.Fake, string, []byte) {
	t.Helper()
	ca, err := certs.NewCA(certs.CAOptions{CommonName: "corp-internal-ca"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.Issue(certs.Options{IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	f := ghfake.New()
	f.SetToken(testToken)
	srv := httptest.NewUnstartedServer(f)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return f, srv.URL + "/api/v3/", ca.CertPEM()
}

func TestPrivateCA(t *testing.T) {
	f, base, caPEM := privateCAFake(t)
	f.AddRunner(org, "r1")
	tests := map[string]struct {
		bundle    []byte
		wantErr   string // "" for success
		wantField string // a ConfigError's field
	}{
		"system pool only: the certificate is unknown": {wantErr: "certificate signed by unknown authority"},
		"the private CA is trusted":                    {bundle: caPEM},
		"a bundle without certificates":                {bundle: []byte("not PEM\n"), wantField: "Network.CABundle"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := ghclient.New(ghclient.Config{BaseURL: base, Token: testToken, Network: ghclient.Network{CABundle: tc.bundle}})
			if tc.wantField != "" {
				var ce *ghclient.ConfigError
				if !errors.As(err, &ce) || ce.Field != tc.wantField {
					t.Fatalf("New: err = %v, want a ConfigError for %s", err, tc.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			st, err := c.Status(context.Background(), org, "r1")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Status: %v", err)
			case tc.wantErr == "" && st.State != ghclient.StateIdle:
				t.Fatalf("state = %v, want idle", st.State)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Status: err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestRouterCABundleAndOwnBundle(t *testing.T) {
	f, base, caPEM := privateCAFake(t)
	f.AddRunner(org, "r1")
	_, _, otherCA := privateCAFake(t)
	tests := map[string]struct {
		routerCA, ownCA []byte
		wantOK          bool
	}{
		"neither":                          {},
		"the Router's (flag) bundle":       {routerCA: caPEM, wantOK: true},
		"the runner's own bundle":          {ownCA: caPEM, wantOK: true},
		"both, the runner's is another CA": {routerCA: caPEM, ownCA: otherCA, wantOK: true},
		"only another CA":                  {ownCA: otherCA},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := ghclient.NewRouter(ghclient.RouterConfig{CABundle: tc.routerCA})
			if err != nil {
				t.Fatal(err)
			}
			creds := &ghclient.Credentials{Key: "ns/s", BaseURL: base, Token: testToken, Network: ghclient.Network{CABundle: tc.ownCA}}
			_, err = r.Status(context.Background(), ghclient.Runner{Scope: org, Name: "r1", Creds: creds})
			if (err == nil) != tc.wantOK {
				t.Fatalf("Status: err = %v, want ok %t", err, tc.wantOK)
			}
		})
	}
}

// forwardProxy is a plain-HTTP forward proxy in front of the fake: it
// answers absolute-URL requests itself and counts them.
func forwardProxy(t *testing.T, f *ghfake.Fake) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() {
			http.Error(w, "not a proxy request", http.StatusBadRequest)
			return
		}
		n.Add(1)
		f.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestExplicitProxy(t *testing.T) {
	f := ghfake.New()
	f.SetToken(testToken)
	f.AddRunner(org, "r1")
	proxy, proxied := forwardProxy(t, f)
	// Only the proxy can be dialled: a direct request for the host fails
	// without a DNS query.
	const base = "http://ghes.invalid/api/v3/"
	proxyAddr := proxy.Listener.Addr().String()
	onlyProxy := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != proxyAddr {
			return nil, fmt.Errorf("test network: no route to %s", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	tests := map[string]struct {
		proxy       *ghclient.Proxy
		wantProxied bool
		wantField   bool
	}{
		"http proxy":                   {proxy: &ghclient.Proxy{HTTP: proxy.URL}, wantProxied: true},
		"noProxy names the host":       {proxy: &ghclient.Proxy{HTTP: proxy.URL, NoProxy: []string{"other.example", "ghes.invalid"}}},
		"noProxy names its domain":     {proxy: &ghclient.Proxy{HTTP: proxy.URL, NoProxy: []string{".invalid"}}},
		"only an https proxy":          {proxy: &ghclient.Proxy{HTTPS: proxy.URL}},
		"a proxy URL without a scheme": {proxy: &ghclient.Proxy{HTTP: "ftp://proxy:3128"}, wantField: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, err := ghclient.NewRouter(ghclient.RouterConfig{AllowHTTP: true, Transport: onlyProxy})
			if err != nil {
				t.Fatal(err)
			}
			before := proxied.Load()
			creds := &ghclient.Credentials{Key: "ns/s", BaseURL: base, Token: testToken, Network: ghclient.Network{Proxy: tc.proxy}}
			_, err = r.Status(context.Background(), ghclient.Runner{Scope: org, Name: "r1", Creds: creds})
			var ce *ghclient.CredentialsError
			switch {
			case tc.wantField:
				if !errors.As(err, &ce) || ce.Field != ghclient.FieldProxy {
					t.Fatalf("err = %v, want a CredentialsError for %s", err, ghclient.FieldProxy)
				}
			case tc.wantProxied && err != nil:
				t.Fatalf("Status through the proxy: %v", err)
			case !tc.wantProxied && (err == nil || !strings.Contains(err.Error(), "no route to ghes.invalid")):
				t.Fatalf("Status: err = %v, want a direct dial of ghes.invalid", err)
			}
			if got := proxied.Load() - before; (got > 0) != tc.wantProxied {
				t.Errorf("proxied requests = %d, want proxied %t", got, tc.wantProxied)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	base := ghclient.Credentials{Key: "ns/a", Version: "1", BaseURL: "https://ghes.example/api/v3/", AppID: "7", InstallationID: 9, PrivateKey: []byte("k")}
	same := map[string]func(c *ghclient.Credentials){
		"another Secret":  func(c *ghclient.Credentials) { c.Key = "other-ns/b" },
		"another version": func(c *ghclient.Credentials) { c.Version = "2" },
		"the key file's trailing newline": func(c *ghclient.Credentials) {
			c.PrivateKey = append([]byte(nil), "k\n"...)
		},
	}
	differ := map[string]func(c *ghclient.Credentials){
		"API base":        func(c *ghclient.Credentials) { c.BaseURL = "https://other.example/api/v3/" },
		"App ID":          func(c *ghclient.Credentials) { c.AppID = "8" },
		"installation":    func(c *ghclient.Credentials) { c.InstallationID = 10 },
		"key":             func(c *ghclient.Credentials) { c.PrivateKey = []byte("k2") },
		"token":           func(c *ghclient.Credentials) { c.Token = "t" },
		"CA bundle":       func(c *ghclient.Credentials) { c.Network.CABundle = []byte("pem") },
		"an empty proxy":  func(c *ghclient.Credentials) { c.Network.Proxy = &ghclient.Proxy{} },
		"proxy URL":       func(c *ghclient.Credentials) { c.Network.Proxy = &ghclient.Proxy{HTTPS: "http://p:3128"} },
		"noProxy":         func(c *ghclient.Credentials) { c.Network.Proxy = &ghclient.Proxy{NoProxy: []string{"a"}} },
		"fields run into": func(c *ghclient.Credentials) { c.AppID, c.BaseURL = "", base.BaseURL+"7" },
	}
	check := func(name string, mod func(c *ghclient.Credentials), wantSame bool) {
		c := base
		mod(&c)
		if got := c.Fingerprint() == base.Fingerprint(); got != wantSame {
			t.Errorf("%s: same fingerprint = %t, want %t", name, got, wantSame)
		}
	}
	for name, mod := range same {
		check(name, mod, true)
	}
	for name, mod := range differ {
		check(name, mod, false)
	}
}

// Hundreds of scale sets whose Secrets hold three distinct contents share
// three clients, and an App installation's token is minted once.
func TestRouterManySecretsFewContents(t *testing.T) {
	f, srv := appFake(t)
	installA := f.AddInstallation(appID, "acme")
	installB := f.AddInstallation(appID, "beta")
	r := newRouter(t, srv)
	contents := []func(key string) *ghclient.Credentials{
		func(key string) *ghclient.Credentials { return appCreds(key, installA) },
		func(key string) *ghclient.Credentials { return appCreds(key, installB) },
		func(key string) *ghclient.Credentials { return tokenCreds(key, "1", testToken) },
	}
	scopes := []ghclient.Scope{org, beta, org}
	for i := range 200 {
		name := fmt.Sprintf("runner-%d", i)
		f.AddRunner(scopes[i%3], name)
		creds := contents[i%3](fmt.Sprintf("scale-set-%d/github-secret", i))
		if _, err := r.Status(context.Background(), ghclient.Runner{Scope: scopes[i%3], Name: name, Creds: creds}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if r.Len() != 3 {
		t.Errorf("clients = %d, want 3", r.Len())
	}
	if got := countCalls(f, "POST", "/access_tokens"); got != 2 {
		t.Errorf("installation tokens minted = %d, want 2 (one per installation)", got)
	}
}
