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
	"sync/atomic"
	"time"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/test/process"
)

// Replicas are webhook processes behind the one address the API server
// calls, as the chart's Service puts its replicas behind one: a TLS proxy
// on the webhook's registered port sends each review to the next replica
// in turn (per request, not per connection, so reviews sent at once over
// kept-alive connections still spread).
type Replicas struct {
	e        *Env
	children []*process.Child
	backends []*url.URL
	srv      *http.Server
	next     atomic.Uint64
	// served counts the reviews each replica was sent.
	served []atomic.Int64
}

// StartReplicas stops the webhook and runs n replicas of it in its place,
// each named by POD_NAME runner-guard-<i>, with the flags given. Stop puts
// the single webhook back.
func (e *Env) StartReplicas(ctx context.Context, n int, extraArgs ...string) (*Replicas, error) {
	if e.webhook == nil {
		return nil, errors.New("the webhook runs in the cluster; replicas need the local harness")
	}
	if n < 1 {
		return nil, fmt.Errorf("%d replicas", n)
	}
	if err := e.StopWebhook(); err != nil {
		return nil, err
	}
	r := &Replicas{e: e, served: make([]atomic.Int64, n)}
	port := e.webhookPort
	defer func() { e.webhookPort = port }()
	for i := range n {
		p, err := e.ports.Free()
		if err != nil {
			r.stopChildren()
			return nil, err
		}
		e.webhookPort = p
		if err := e.StartWebhookWith(ctx, WebhookProcess{Env: []string{fmt.Sprintf("POD_NAME=runner-guard-%d", i)}}, extraArgs...); err != nil {
			r.stopChildren()
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		r.children = append(r.children, e.webhook)
		r.backends = append(r.backends, &url.URL{Scheme: "https", Host: e.webhookAddr()})
	}
	e.webhookPort = port
	if err := r.serve(); err != nil {
		r.stopChildren()
		return nil, err
	}
	e.webhook = r.children[0]
	e.opts.Logf("%d runner-guard replicas behind 127.0.0.1:%d", n, port)
	return r, nil
}

// serve runs the round-robin proxy on the webhook's registered address,
// with the webhook's own certificate, trusting its CA toward the replicas.
func (r *Replicas) serve() error {
	cert, err := tls.LoadX509KeyPair(filepath.Join(r.e.certDir, certs.CertFile), filepath.Join(r.e.certDir, certs.KeyFile))
	if err != nil {
		return fmt.Errorf("replicas proxy: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(r.e.certDir, certs.CACertFile))
	if err != nil {
		return fmt.Errorf("replicas proxy: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return errors.New("replicas proxy: no CA certificate")
	}
	toReplicas := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert, err := r.e.APIServerClientCertificate(); err == nil {
		toReplicas.Certificates = []tls.Certificate{cert}
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			i := int((r.next.Add(1) - 1) % uint64(len(r.backends)))
			r.served[i].Add(1)
			pr.SetURL(r.backends[i])
		},
		Transport: &http.Transport{TLSClientConfig: toReplicas, MaxIdleConnsPerHost: 64},
	}
	ln, err := net.Listen("tcp", r.e.webhookAddr())
	if err != nil {
		return fmt.Errorf("replicas proxy: %w", err)
	}
	r.srv = &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = r.srv.ServeTLS(ln, "", "") }()
	return nil
}

// Served is how many reviews each replica was sent.
func (r *Replicas) Served() []int64 {
	out := make([]int64, len(r.served))
	for i := range r.served {
		out[i] = r.served[i].Load()
	}
	return out
}

// Stop stops the replicas and the proxy and starts the single webhook
// again on the registered address.
func (r *Replicas) Stop(ctx context.Context) error {
	if r.srv != nil {
		_ = r.srv.Close()
	}
	r.stopChildren()
	return r.e.StartWebhook(ctx, r.e.opts.WebhookArgs...)
}

func (r *Replicas) stopChildren() {
	for _, c := range r.children {
		_ = c.Stop(15 * time.Second)
	}
}
