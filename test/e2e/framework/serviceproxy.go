package framework

// ServiceProxy plays a Service in front of webhook processes: a loopback TCP
// listener at a fixed address forwarding each new connection to the current
// backend, so a new process can take over before the old one stops, as a
// Deployment's rolling update does behind its Service. TLS passes through
// untouched. With no backend, connections are closed at once (a Service
// with no ready endpoint).
type ServiceProxy struct{ *tcpProxy }

// NewServiceProxy listens on addr (host:port), with no backend yet.
func NewServiceProxy(addr string) (*ServiceProxy, error) {
	p, err := listenTCPProxy(addr, "")
	if err != nil {
		return nil, err
	}
	return &ServiceProxy{p}, nil
}

// SetBackend sends new connections to addr (host:port); "" refuses them.
// Connections already open stay with the backend they were opened to.
func (p *ServiceProxy) SetBackend(addr string) { p.backend.Store(&addr) }
