package framework

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// SlowProxy is a TCP proxy on loopback that holds every chunk a client sends
// for a settable delay before passing it on: a slow API server (or network)
// in front of the real one, TLS passing through untouched.
type SlowProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewSlowProxy listens on 127.0.0.1 and forwards to target (host:port).
func NewSlowProxy(target string) (*SlowProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &SlowProxy{ln: ln, target: target}
	p.wg.Go(p.serve)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *SlowProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets how long each chunk from a client is held.
func (p *SlowProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Close stops the proxy and its connections.
func (p *SlowProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *SlowProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(out, in, true) })
		p.wg.Go(func() { p.pipe(in, out, false) })
	}
}

// pipe copies src to dst, holding each chunk when slow.
func (p *SlowProxy) pipe(dst, src net.Conn, slow bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); slow && d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or the other side closed
		}
	}
}

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
