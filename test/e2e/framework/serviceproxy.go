package framework

import (
	"net"
	"sync"
)

// ServiceProxy plays a Service in front of webhook processes: a loopback TCP
// listener at a fixed address forwarding each new connection to the current
// backend, so a new process can take over before the old one stops, as a
// Deployment's rolling update does behind its Service. TLS passes through
// untouched. With no backend, connections are closed at once (a Service
// with no ready endpoint).
type ServiceProxy struct {
	ln net.Listener

	mu      sync.Mutex
	backend string
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// NewServiceProxy listens on addr (host:port).
func NewServiceProxy(addr string) (*ServiceProxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &ServiceProxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

// SetBackend sends new connections to addr (host:port); "" refuses them.
// Connections already open stay with the backend they were opened to.
func (p *ServiceProxy) SetBackend(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backend = addr
}

// Close stops the proxy and its connections.
func (p *ServiceProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *ServiceProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		backend := p.backend
		p.mu.Unlock()
		if backend == "" {
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", backend)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(out, in) })
		p.wg.Go(func() { p.pipe(in, out) })
	}
}

// pipe copies src to dst until either side closes.
func (p *ServiceProxy) pipe(dst, src net.Conn) {
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
