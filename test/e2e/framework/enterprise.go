package framework

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/test/process"
)

// WebhookProcess changes how StartWebhookWith runs the binary.
type WebhookProcess struct {
	// Env is added to the test's environment (HTTPS_PROXY, NO_PROXY, ...).
	Env []string
	// Wrap is a command the binary and its flags are appended to, e.g.
	// MountNamespace's, so it sees a hosts file of the test's own.
	Wrap []string
}

// TLSServer serves a handler over HTTPS with a certificate from a private CA
// made for it, as a GitHub Enterprise Server behind a company CA is served.
type TLSServer struct {
	// URL is https://HOST:PORT for the first DNS name (127.0.0.1 without one).
	URL string
	// Addr is the listener's 127.0.0.1:PORT.
	Addr string
	// CAPEM is the private CA's certificate: trust it and the server is trusted.
	CAPEM []byte

	srv      *http.Server
	accepted atomic.Int64
}

// StartTLSServer serves h on a loopback port with a certificate for
// dnsNames and 127.0.0.1, signed by a new CA only CAPEM names.
func StartTLSServer(h http.Handler, dnsNames ...string) (*TLSServer, error) {
	ca, err := certs.NewCA(certs.CAOptions{CommonName: "e2e-private-ca"})
	if err != nil {
		return nil, err
	}
	b, err := ca.Issue(certs.Options{DNSNames: dnsNames, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &TLSServer{Addr: l.Addr().String(), CAPEM: ca.CertPEM()}
	host := "127.0.0.1"
	if len(dnsNames) > 0 {
		host = dnsNames[0]
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	s.URL = "https://" + net.JoinHostPort(host, port)
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second,
		// Refused handshakes are what the scenarios test; keep them out of the output.
		ErrorLog:  log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = s.srv.ServeTLS(&countingListener{Listener: l, n: &s.accepted}, "", "") }()
	return s, nil
}

// Accepted counts the TCP connections the server accepted.
func (s *TLSServer) Accepted() int64 { return s.accepted.Load() }

// Close stops the server.
func (s *TLSServer) Close() error { return s.srv.Close() }

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// MountNamespace returns a command prefix that runs a program in a mount
// namespace of its own where /etc/hosts maps names to 127.0.0.1, written
// into dir. Go's proxy rules never proxy loopback addresses, so a test that
// proves a proxy carries requests for GitHub needs a host name; this gives
// one without touching the machine's /etc/hosts. It needs root (unshare and
// mount); ErrNeedsRoot otherwise.
func MountNamespace(dir string, names ...string) ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNeedsRoot
	}
	for _, tool := range []string{"unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %s not found", ErrNeedsRoot, tool)
		}
	}
	hosts := filepath.Join(dir, "hosts")
	content := "127.0.0.1 localhost\n::1 localhost\n127.0.0.1 " + strings.Join(names, " ") + "\n"
	if err := os.WriteFile(hosts, []byte(content), 0o644); err != nil {
		return nil, err
	}
	// unshare and sh exec what follows, so the program keeps the process ID
	// its caller signals.
	return []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c", `mount --bind "$0" /etc/hosts && exec "$@"`, hosts}, nil
}

// ErrNeedsRoot: the machine cannot give a process a mount namespace.
var ErrNeedsRoot = errors.New("needs root with unshare and mount")

// ProxyNetwork checks what the proxy scenarios need, tinyproxy and a mount
// namespace where host resolves (MountNamespace, its /etc/hosts in dir), and
// returns the namespace's command prefix. When this machine lacks either,
// skip says why and the scenarios should be skipped; in CI (CI set), which
// installs both, a lack is an error instead.
func ProxyNetwork(dir, host string) (wrap []string, skip string, err error) {
	inCI := os.Getenv("CI") != ""
	if _, err := exec.LookPath("tinyproxy"); err != nil && !inCI {
		return nil, "tinyproxy is not installed (hack/install-tinyproxy.sh installs it; make test and make e2e run it)", nil
	}
	wrap, err = MountNamespace(dir, host)
	if errors.Is(err, ErrNeedsRoot) && !inCI {
		return nil, fmt.Sprintf("resolving %s needs a mount namespace: %v", host, err), nil
	}
	return wrap, "", err
}

// Tinyproxy is Debian's tinyproxy, a real forward proxy, on a loopback port
// with its own configuration and log file.
type Tinyproxy struct {
	// URL is http://127.0.0.1:PORT, for HTTPS_PROXY.
	URL     string
	LogPath string
	proc    *process.Child
}

// TinyproxyOptions configure StartTinyproxy.
type TinyproxyOptions struct {
	// Dir holds its configuration and log.
	Dir string
	// Wrap runs it (a MountNamespace prefix, so it resolves the test's host names).
	Wrap []string
	// ConnectPorts are the only ports CONNECT may reach.
	ConnectPorts []int
	// User and Password, when set, are required of every client (BasicAuth).
	User, Password string
}

// StartTinyproxy starts tinyproxy (hack/install-tinyproxy.sh installs it).
func StartTinyproxy(ctx context.Context, o TinyproxyOptions) (*Tinyproxy, error) {
	dir, wrap := o.Dir, o.Wrap
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		return nil, fmt.Errorf("tinyproxy not installed (hack/install-tinyproxy.sh, run by make test and make e2e): %w", err)
	}
	port, err := process.FreePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "tinyproxy.log")
	conf := []string{
		fmt.Sprintf("Port %d", port),
		"Listen 127.0.0.1",
		"Timeout 60",
		"LogFile \"" + logPath + "\"",
		"LogLevel Connect",
		"MaxClients 50",
		"Allow 127.0.0.1",
		"DisableViaHeader Yes",
	}
	for _, p := range o.ConnectPorts {
		conf = append(conf, fmt.Sprintf("ConnectPort %d", p))
	}
	if o.User != "" {
		conf = append(conf, fmt.Sprintf("BasicAuth %s %s", o.User, o.Password))
	}
	confPath := filepath.Join(dir, "tinyproxy.conf")
	if err := os.WriteFile(confPath, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	args := []string{"-d", "-c", confPath}
	cmd := bin
	if len(wrap) > 0 {
		cmd, args = wrap[0], append(append(append([]string{}, wrap[1:]...), bin), args...)
	}
	p, err := process.StartLogged(dir, "tinyproxy", process.Command(cmd, args, nil))
	if err != nil {
		return nil, err
	}
	t := &Tinyproxy{URL: fmt.Sprintf("http://127.0.0.1:%d", port), LogPath: logPath, proc: p}
	err = process.WaitReady(ctx, "tinyproxy", 20*time.Second, p, func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, err
	}
	return t, nil
}

// Connects returns the CONNECT requests tinyproxy logged, as "HOST:PORT".
func (t *Tinyproxy) Connects() ([]string, error) {
	b, err := os.ReadFile(t.LogPath)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		// CONNECT   Dec 01 14:00:00.000 [123]: Request (file descriptor 6): CONNECT host:port HTTP/1.1
		_, req, ok := strings.Cut(line, "): CONNECT ")
		if !ok {
			continue
		}
		target, _, _ := strings.Cut(req, " ")
		out = append(out, target)
	}
	return out, nil
}

// Stop ends tinyproxy.
func (t *Tinyproxy) Stop() error { return t.proc.Stop(5 * time.Second) }
