package certs_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/test/fixture"
)

func TestIssueClient(t *testing.T) {
	ca := newCA(t, certs.CAOptions{})
	b, err := ca.IssueClient(certs.ClientOptions{CommonName: "kube-apiserver"})
	if err != nil {
		t.Fatal(err)
	}
	c := fixture.ParseCert(t, b.CertPEM)
	if c.Subject.CommonName != "kube-apiserver" {
		t.Errorf("CN = %q", c.Subject.CommonName)
	}
	if len(c.ExtKeyUsage) != 1 || c.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("ExtKeyUsage = %v, want only client auth", c.ExtKeyUsage)
	}
	if c.IsCA || len(c.DNSNames) != 0 || len(c.IPAddresses) != 0 {
		t.Errorf("IsCA %v, SANs %v %v: want a plain client leaf", c.IsCA, c.DNSNames, c.IPAddresses)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("does not verify as a client certificate of its CA: %v", err)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool}); err == nil {
		t.Error("verifies for server auth; want client auth only")
	}
	if string(b.CACertPEM) != string(ca.CertPEM()) {
		t.Error("bundle's CA is not the issuing CA")
	}
}

// TestIssueClientOrganizations: the O values are the groups a Kubernetes
// component grants the client; without them the certificate names the project.
func TestIssueClientOrganizations(t *testing.T) {
	ca := newCA(t, certs.CAOptions{})
	for _, tc := range []struct {
		orgs, want []string
	}{
		{nil, []string{"runner-guard"}},
		{[]string{"system:masters"}, []string{"system:masters"}},
		// DER encodes the values as a SET, in sorted order.
		{[]string{"system:nodes", "ops"}, []string{"ops", "system:nodes"}},
	} {
		b, err := ca.IssueClient(certs.ClientOptions{CommonName: "kube-apiserver-kubelet-client", Organizations: tc.orgs})
		if err != nil {
			t.Fatal(err)
		}
		if got := fixture.ParseCert(t, b.CertPEM).Subject.Organization; strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("Organizations %v: subject O = %v, want %v", tc.orgs, got, tc.want)
		}
	}
}

func TestIssueClientBadOptions(t *testing.T) {
	now := time.Now()
	ca := newCA(t, certs.CAOptions{Validity: time.Hour, Now: func() time.Time { return now }})
	for name, opts := range map[string]certs.ClientOptions{
		"no common name":  {},
		"negative":        {CommonName: "x", Validity: -time.Second},
		"outlives its CA": {CommonName: "x", Validity: 2 * time.Hour, Now: func() time.Time { return now }},
	} {
		if _, err := ca.IssueClient(opts); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestClientHandshake: a server that requires client certificates from the
// CA accepts the issued certificate and refuses one from another CA.
func TestClientHandshake(t *testing.T) {
	ca := newCA(t, certs.CAOptions{})
	other := newCA(t, certs.CAOptions{CommonName: "other"})
	serving, err := ca.Issue(certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srvCert := keyPair(t, serving)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{srvCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			if err := conn.(*tls.Conn).Handshake(); err == nil {
				_, _ = conn.Write([]byte("ok"))
			}
			_ = conn.Close()
		}
	}()
	defer func() { l.Close(); <-done }()

	dial := func(issuer *certs.CA) (string, error) {
		b, err := issuer.IssueClient(certs.ClientOptions{CommonName: "client"})
		if err != nil {
			t.Fatal(err)
		}
		cert := keyPair(t, b)
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.Addr().String(),
			&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}})
		if err != nil {
			return "", err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(conn)
		return string(got), err
	}
	if got, err := dial(ca); err != nil || got != "ok" {
		t.Errorf("client certificate of the CA: %q, %v; want ok", got, err)
	}
	if got, err := dial(other); err == nil || !strings.Contains(err.Error(), "tls") {
		t.Errorf("client certificate of another CA: %q, %v; want a TLS error", got, err)
	}
}
