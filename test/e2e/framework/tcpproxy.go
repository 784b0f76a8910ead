package framework

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// tcpProxy is a loopback TCP proxy: each connection it accepts goes to the
// backend set at that moment ("" closes it at once), and each chunk a client
// sends is held for the delay set (none by default). TLS passes through
// untouched. ServiceProxy and SlowProxy are its two uses.
type tcpProxy struct {
	ln      net.Listener
	backend atomic.Pointer[string]
	delay   atomic.Int64 // nanoseconds

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// listenTCPProxy listens on addr (host:port) and forwards to backend.
func listenTCPProxy(addr, backend string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.backend.Store(&backend)
	p.wg.Go(p.serve)
	return p, nil
}

// Close stops the proxy and its connections.
func (p *tcpProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *tcpProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		backend := *p.backend.Load()
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
		p.wg.Go(func() { p.pipe(out, in, true) })
		p.wg.Go(func() { p.pipe(in, out, false) })
	}
}

// pipe copies src to dst until either side closes, holding each chunk for
// the proxy's delay when fromClient.
func (p *tcpProxy) pipe(dst, src net.Conn, fromClient bool) {
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
			if d := time.Duration(p.delay.Load()); fromClient && d > 0 {
				time.Sleep(d) // the delay being simulated, not a wait for anything
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
