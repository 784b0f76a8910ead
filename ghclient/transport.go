package ghclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpproxy"
)

// Proxy is an explicit forward proxy for GitHub requests, as ARC's
// EphemeralRunner spec.proxy gives one: set, it replaces the environment's
// HTTPS_PROXY, HTTP_PROXY and NO_PROXY for the client it configures.
type Proxy struct {
	// HTTPS and HTTP are proxy URLs (http://HOST:PORT, optionally with
	// user:password@) for https:// and http:// requests; empty: direct.
	HTTPS, HTTP string
	// NoProxy lists hosts, domains (".example.com"), IPs and CIDRs reached
	// directly, with NO_PROXY's syntax.
	NoProxy []string
}

// Network is how a client reaches GitHub: whom it trusts and through which
// proxy. The zero value is the system's CA pool and the environment's proxy
// (http.ProxyFromEnvironment).
type Network struct {
	// CABundle holds PEM certificates trusted besides the system pool, for a
	// GitHub Enterprise Server behind a private CA.
	CABundle []byte
	// Proxy, when set, is used instead of the environment's proxy variables.
	Proxy *Proxy
}

// network is a validated Network.
type network struct {
	roots *x509.CertPool                        // nil: the base transport's (the system pool)
	proxy func(*http.Request) (*url.URL, error) // nil: the base transport's
}

// checkNetwork validates bundles (each must hold at least one certificate)
// and the proxy URLs; the pool is the system's plus every bundle. Errors name
// FieldCABundle or FieldProxy and never repeat a proxy password.
func checkNetwork(bundles [][]byte, p *Proxy) (network, *fieldError) {
	var n network
	for _, b := range bundles {
		if len(b) == 0 {
			continue
		}
		if n.roots == nil {
			sys, err := x509.SystemCertPool()
			if err != nil || sys == nil {
				sys = x509.NewCertPool()
			}
			n.roots = sys.Clone()
		}
		if !n.roots.AppendCertsFromPEM(b) {
			return network{}, &fieldError{FieldCABundle, errors.New("holds no PEM certificate")}
		}
	}
	if p == nil {
		return n, nil // the base transport's proxy: the environment's for http.DefaultTransport
	}
	for _, u := range []struct{ name, raw string }{{"https", p.HTTPS}, {"http", p.HTTP}} {
		if err := checkProxyURL(u.raw); err != nil {
			return network{}, &fieldError{FieldProxy, fmt.Errorf("%s: %w", u.name, err)}
		}
	}
	cfg := &httpproxy.Config{HTTPSProxy: p.HTTPS, HTTPProxy: p.HTTP, NoProxy: strings.Join(p.NoProxy, ",")}
	f := cfg.ProxyFunc()
	n.proxy = func(r *http.Request) (*url.URL, error) { return f(r.URL) }
	return n, nil
}

// checkProxyURL accepts "" or an absolute http, https or socks5 URL with a host.
func checkProxyURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL", RedactURL(raw))
	}
	switch u.Scheme {
	case "http", "https", "socks5", "socks5h":
	default:
		return fmt.Errorf("%q: want http://HOST:PORT (or https://, socks5://)", RedactURL(raw))
	}
	if u.Host == "" {
		return fmt.Errorf("%q: no host", RedactURL(raw))
	}
	return nil
}

// transport applies n to a clone of base (http.DefaultTransport when nil,
// whose proxy is the environment's). A base that is not an *http.Transport
// (a test's) is used as it is, since it chose its own connections.
func (n network) transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	t, ok := base.(*http.Transport)
	if !ok {
		return base
	}
	t = t.Clone()
	if n.proxy != nil {
		t.Proxy = n.proxy
	}
	if n.roots != nil {
		if t.TLSClientConfig == nil {
			t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		t.TLSClientConfig.RootCAs = n.roots
	}
	return t
}
