package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/test/process"
)

// eventsBindFlag is the flag whose address is, with several replicas, the
// events Service's: each replica listens on a port of its own and a
// round-robin proxy serves the address the test gave.
const eventsBindFlag = "--events-bind-address"

// webhookReplica is one webhook process and the ports it serves on.
type webhookReplica struct {
	name        string // its POD_NAME
	child       *process.Child
	port        int // the admission webhook's (HTTPS)
	metricsPort int
	healthPort  int
	eventsPort  int // 0 without an events endpoint of its own
}

// Replicas are webhook processes behind the one address the API server
// calls, as the chart's Service puts its replicas behind one (see
// Options.Replicas); StartReplicas runs another number of them for a test.
type Replicas struct {
	e     *Env
	proxy *roundRobin
}

// StartReplicas stops the webhook and runs n replicas of it in its place,
// each named by POD_NAME runner-guard-<i>, with the flags given, behind a
// round-robin proxy on the registered address (even when n is 1, so Served
// counts). Stop puts the environment's own replicas back.
func (e *Env) StartReplicas(ctx context.Context, n int, extraArgs ...string) (*Replicas, error) {
	if !e.Local() {
		return nil, errors.New("the webhook runs in the cluster; replicas need the local harness")
	}
	if n < 1 {
		return nil, fmt.Errorf("%d replicas", n)
	}
	if err := e.StopWebhook(); err != nil {
		return nil, err
	}
	e.replicaOverride = n
	if err := e.StartWebhook(ctx, extraArgs...); err != nil {
		return nil, err
	}
	return &Replicas{e: e, proxy: e.proxy}, nil
}

// Served is how many reviews each replica was sent.
func (r *Replicas) Served() []int64 { return r.proxy.servedCounts() }

// Stop stops the replicas and starts the environment's own again on the
// registered address, with its Options.WebhookArgs.
func (r *Replicas) Stop(ctx context.Context) error {
	stopErr := r.e.StopWebhook()
	r.e.replicaOverride = 0
	return errors.Join(stopErr, r.e.StartWebhook(ctx, r.e.opts.WebhookArgs...))
}

// replicaCount is how many webhook processes StartWebhook runs, and whether
// a round-robin proxy stands on the registered address in front of them.
func (e *Env) replicaCount() (n int, proxied bool) {
	if e.replicaOverride > 0 {
		return e.replicaOverride, true
	}
	if e.opts.Replicas > 1 {
		return e.opts.Replicas, true
	}
	return 1, false
}

// ReplicaAddrs are the host:ports each replica itself serves the admission
// webhook on (one entry, WebhookAddr, when a single process runs there).
func (e *Env) ReplicaAddrs() []string {
	var out []string
	for _, r := range e.replicas {
		out = append(out, fmt.Sprintf("127.0.0.1:%d", r.port))
	}
	return out
}

// MetricsAddrs are the host:ports of each replica's /metrics, in replica order.
func (e *Env) MetricsAddrs() []string {
	var out []string
	for _, r := range e.replicas {
		out = append(out, fmt.Sprintf("127.0.0.1:%d", r.metricsPort))
	}
	return out
}

// withoutFlag returns the value of the last --flag=VALUE in args ("" when
// there is none) and args without any of them.
func withoutFlag(args []string, flag string) (value string, rest []string) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			value = v
			continue
		}
		rest = append(rest, a)
	}
	return value, rest
}

// roundRobin is the Service in front of several replicas: an HTTP proxy
// that sends each request to the next replica in turn (per request, not
// per connection, so reviews the API server sends over kept-alive
// connections still spread over every replica).
type roundRobin struct {
	srv       *http.Server
	transport *http.Transport
	backends  []*url.URL
	next      atomic.Uint64
	served    []atomic.Int64 // requests each backend was sent
	done      sync.WaitGroup
}

// serveRoundRobin serves addr, forwarding to backends; tlsCfg nil serves
// plain HTTP. toBackends configures the TLS of the forwarded requests.
func serveRoundRobin(addr string, backends []*url.URL, tlsCfg, toBackends *tls.Config) (*roundRobin, error) {
	p := &roundRobin{backends: backends, served: make([]atomic.Int64, len(backends)),
		transport: &http.Transport{TLSClientConfig: toBackends, MaxIdleConnsPerHost: 64}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			i := int((p.next.Add(1) - 1) % uint64(len(p.backends)))
			p.served[i].Add(1)
			pr.SetURL(p.backends[i])
		},
		Transport: p.transport,
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("round-robin proxy on %s: %w", addr, err)
	}
	p.srv = &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsCfg}
	p.done.Go(func() {
		if tlsCfg != nil {
			_ = p.srv.ServeTLS(ln, "", "")
			return
		}
		_ = p.srv.Serve(ln)
	})
	return p, nil
}

// servedCounts is how many requests each backend was sent.
func (p *roundRobin) servedCounts() []int64 {
	out := make([]int64, len(p.served))
	for i := range p.served {
		out[i] = p.served[i].Load()
	}
	return out
}

// close stops serving; clients then get "connection refused", as from a
// Service with no ready endpoint.
func (p *roundRobin) close() {
	_ = p.srv.Close()
	p.done.Wait()
	p.transport.CloseIdleConnections()
}

// webhookProxyTLS is the TLS of the proxy on the registered address: the
// webhook's own serving certificate, and with Options.ClientCertAuth the
// same client certificate check as the replicas; toReplicas trusts the
// webhook's CA and presents the API server's client certificate.
func (e *Env) webhookProxyTLS() (serving, toReplicas *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(e.certDir, certs.CertFile), filepath.Join(e.certDir, certs.KeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("replicas proxy: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(e.certDir, certs.CACertFile))
	if err != nil {
		return nil, nil, fmt.Errorf("replicas proxy: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, nil, errors.New("replicas proxy: no CA certificate")
	}
	serving = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	toReplicas = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if e.clientAuth != nil {
		clientCAs := x509.NewCertPool()
		if !clientCAs.AppendCertsFromPEM(e.clientAuth.caPEM) {
			return nil, nil, errors.New("replicas proxy: no client CA certificate")
		}
		serving.ClientAuth, serving.ClientCAs = tls.RequireAndVerifyClientCert, clientCAs
		clientCert, err := e.APIServerClientCertificate()
		if err != nil {
			return nil, nil, err
		}
		toReplicas.Certificates = []tls.Certificate{clientCert}
	}
	return serving, toReplicas, nil
}

// serveReplicas puts the round-robin proxies in front of the running
// replicas: the admission webhook's on the registered address, and the
// events endpoint's on eventsAddr when set.
func (e *Env) serveReplicas(eventsAddr string) error {
	serving, toReplicas, err := e.webhookProxyTLS()
	if err != nil {
		return err
	}
	var webhooks, events []*url.URL
	for _, r := range e.replicas {
		webhooks = append(webhooks, &url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", r.port)})
		events = append(events, &url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", r.eventsPort)})
	}
	if e.proxy, err = serveRoundRobin(e.webhookAddr(), webhooks, serving, toReplicas); err != nil {
		return err
	}
	if eventsAddr != "" {
		if e.eventsProxy, err = serveRoundRobin(eventsAddr, events, nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// stopReplicas closes the proxies and stops every replica at once.
func (e *Env) stopReplicas() error {
	for _, p := range []*roundRobin{e.proxy, e.eventsProxy} {
		if p != nil {
			p.close()
		}
	}
	e.proxy, e.eventsProxy = nil, nil
	errs := make([]error, len(e.replicas))
	var wg sync.WaitGroup
	for i, r := range e.replicas {
		wg.Go(func() { errs[i] = r.child.Stop(15 * time.Second) })
	}
	wg.Wait()
	e.replicas = nil
	return errors.Join(errs...)
}
