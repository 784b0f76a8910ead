package framework

import (
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// SlowProxy is a TCP proxy on loopback that holds every chunk a client sends
// for a settable delay before passing it on: a slow API server (or network)
// in front of the real one, TLS passing through untouched.
type SlowProxy struct{ *tcpProxy }

// NewSlowProxy listens on 127.0.0.1 and forwards to target (host:port).
func NewSlowProxy(target string) (*SlowProxy, error) {
	p, err := listenTCPProxy("127.0.0.1:0", target)
	if err != nil {
		return nil, err
	}
	return &SlowProxy{p}, nil
}

// Addr is the proxy's host:port.
func (p *SlowProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets how long each chunk from a client is held.
func (p *SlowProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// WebhookKubeconfigVia writes a copy of the webhook's kubeconfig that reaches
// the API server through addr (the API server's certificate is for
// 127.0.0.1, whatever the port), and returns its path.
func (e *Env) WebhookKubeconfigVia(addr string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(e.kubeconfig)
	if err != nil {
		return "", err
	}
	for name, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			return "", fmt.Errorf("cluster %s: %w", name, err)
		}
		u.Host = addr
		c.Server = u.String()
	}
	path := filepath.Join(e.Dir, fmt.Sprintf("webhook-via-%d.kubeconfig", time.Now().UnixNano()))
	return path, clientcmd.WriteToFile(*cfg, path)
}

// APIServerAddr is the API server's host:port.
func (e *Env) APIServerAddr() (string, error) {
	u, err := url.Parse(e.ControlPlane.URL)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}
