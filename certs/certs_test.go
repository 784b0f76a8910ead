package certs_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// newCA is certs.NewCA for a test that cannot go on without the CA.
func newCA(t *testing.T, opts certs.CAOptions) *certs.CA {
	t.Helper()
	ca, err := certs.NewCA(opts)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// keyPair loads a bundle's certificate and key as tls.X509KeyPair does.
func keyPair(t *testing.T, b *certs.Bundle) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func pool(t *testing.T, caPEM []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA PEM not accepted")
	}
	return p
}

func TestGenerateDefaults(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	b, err := certs.Generate(certs.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	leaf, ca := fixture.ParseCert(t, b.CertPEM), fixture.ParseCert(t, b.CACertPEM)

	wantDNS := []string{
		"runner-guard-webhook.runner-guard-system.svc",
		"runner-guard-webhook.runner-guard-system.svc.cluster.local",
		"localhost",
	}
	if strings.Join(leaf.DNSNames, ",") != strings.Join(wantDNS, ",") {
		t.Errorf("DNS SANs = %v, want %v", leaf.DNSNames, wantDNS)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("IP SANs = %v, want [127.0.0.1]", leaf.IPAddresses)
	}

	// Key type: ECDSA P-256 for both.
	for name, c := range map[string]*x509.Certificate{"leaf": leaf, "ca": ca} {
		pub, ok := c.PublicKey.(*ecdsa.PublicKey)
		if !ok || pub.Curve != elliptic.P256() {
			t.Errorf("%s key is %T, want ECDSA P-256", name, c.PublicKey)
		}
	}

	// Usages.
	if leaf.IsCA {
		t.Error("leaf is a CA")
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("leaf key usage = %v, want digitalSignature only", leaf.KeyUsage)
	}
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("leaf ext key usage = %v, want [serverAuth]", leaf.ExtKeyUsage)
	}
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA: IsCA=%v basic=%v usage=%v; want a CA with certSign", ca.IsCA, ca.BasicConstraintsValid, ca.KeyUsage)
	}

	// Validity: leaf 1 year, CA 10 years, both backdated a little.
	if got := leaf.NotAfter.Sub(now); got != 365*24*time.Hour {
		t.Errorf("leaf valid for %v after now, want 8760h", got)
	}
	if got := ca.NotAfter.Sub(now); got != 10*365*24*time.Hour {
		t.Errorf("CA valid for %v after now, want 87600h", got)
	}
	if !leaf.NotBefore.Before(now) || now.Sub(leaf.NotBefore) > 10*time.Minute {
		t.Errorf("leaf NotBefore = %v, want shortly before %v", leaf.NotBefore, now)
	}

	// The chain verifies for every SAN, at "now" and not after expiry.
	roots := pool(t, b.CACertPEM)
	for _, host := range append(wantDNS, "127.0.0.1") {
		_, err := leaf.Verify(x509.VerifyOptions{
			DNSName: host, Roots: roots, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "example.invalid", Roots: roots, CurrentTime: now}); err == nil {
		t.Error("verify succeeded for a name that is not a SAN")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: roots, CurrentTime: now.Add(366 * 24 * time.Hour)}); err == nil {
		t.Error("verify succeeded after expiry")
	}

	// The key is PKCS #8 and matches the certificate.
	if _, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM); err != nil {
		t.Errorf("key pair: %v", err)
	}
	if block, _ := pem.Decode(b.KeyPEM); block == nil || block.Type != "PRIVATE KEY" {
		t.Errorf("key PEM type = %v, want PRIVATE KEY", block)
	} else if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		t.Errorf("key is not PKCS #8: %v", err)
	}
}

func TestIssueCustomSANsAndRotation(t *testing.T) {
	ca := newCA(t, certs.CAOptions{Validity: 48 * time.Hour})
	opts := certs.Options{
		DNSNames: []string{"webhook.example.test", "*.svc.example.test"},
		IPs:      []net.IP{net.ParseIP("::1"), net.ParseIP("10.0.0.7")},
		Validity: time.Hour,
	}
	b1, err := ca.Issue(opts)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := ca.Issue(opts)
	if err != nil {
		t.Fatal(err)
	}
	if string(b1.CACertPEM) != string(b2.CACertPEM) || string(b1.CACertPEM) != string(ca.CertPEM()) {
		t.Error("leaves of one CA carry different CA certificates")
	}
	c1, c2 := fixture.ParseCert(t, b1.CertPEM), fixture.ParseCert(t, b2.CertPEM)
	if c1.SerialNumber.Cmp(c2.SerialNumber) == 0 || string(b1.KeyPEM) == string(b2.KeyPEM) {
		t.Error("two leaves share a serial number or key")
	}
	if got := c1.NotAfter.Sub(c1.NotBefore); got < time.Hour || got > time.Hour+10*time.Minute {
		t.Errorf("leaf lifetime %v, want about 1h", got)
	}
	roots := pool(t, ca.CertPEM())
	for _, c := range []*x509.Certificate{c1, c2} {
		for _, host := range []string{"webhook.example.test", "a.svc.example.test", "::1", "10.0.0.7"} {
			if _, err := c.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
				t.Errorf("verify %s: %v", host, err)
			}
		}
		if _, err := c.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: roots}); err == nil {
			t.Error("custom SANs still include the default localhost")
		}
	}

	// Only IPs given: no DNS SANs are added.
	b3, err := ca.Issue(certs.Options{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err == nil {
		t.Fatalf("a 1-year leaf from a 2-day CA was issued: %v", fixture.ParseCert(t, b3.CertPEM).NotAfter)
	}
	b3, err = ca.Issue(certs.Options{IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if c := fixture.ParseCert(t, b3.CertPEM); len(c.DNSNames) != 0 || len(c.IPAddresses) != 1 {
		t.Errorf("IP-only leaf: DNS %v IPs %v", c.DNSNames, c.IPAddresses)
	}
}

func TestBadOptions(t *testing.T) {
	for name, opts := range map[string]certs.Options{
		"negative validity": {Validity: -time.Second},
		"empty DNS name":    {DNSNames: []string{""}},
		"space in name":     {DNSNames: []string{"bad name"}},
		"IP as DNS name":    {DNSNames: []string{"127.0.0.1"}},
		"label too long":    {DNSNames: []string{strings.Repeat("a", 64) + ".example"}},
		"leading hyphen":    {DNSNames: []string{"-a.example"}},
		"bad IP":            {IPs: []net.IP{{1, 2, 3}}},
		"outlives its CA":   {Validity: 11 * 365 * 24 * time.Hour, DNSNames: []string{"x"}},
	} {
		t.Run(name, func(t *testing.T) {
			ca := newCA(t, certs.CAOptions{})
			if _, err := ca.Issue(opts); err == nil {
				t.Errorf("Issue(%+v) succeeded", opts)
			} else if !strings.HasPrefix(err.Error(), "certs: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
	if _, err := certs.NewCA(certs.CAOptions{Validity: -time.Hour}); err == nil {
		t.Error("NewCA with negative validity succeeded")
	}
	// Generate stretches its CA to cover a long leaf.
	if _, err := certs.Generate(certs.Options{Validity: 20 * 365 * 24 * time.Hour}); err != nil {
		t.Errorf("Generate with a 20-year leaf: %v", err)
	}
	if err := (&certs.Bundle{}).WriteDir(t.TempDir()); err == nil {
		t.Error("WriteDir of an empty bundle succeeded")
	}
	if err := (&certs.Bundle{}).WriteDir(""); err == nil {
		t.Error("WriteDir of an empty dir succeeded")
	}
}

func TestWriteDirAndHandshake(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "serving-certs")
	b, err := certs.Generate(certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	want := map[string]os.FileMode{"tls.crt": 0o644, "tls.key": 0o600, "ca.crt": 0o644}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("dir holds %v, want exactly tls.crt, tls.key, ca.crt (no temp files)", names)
	}
	for name, mode := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s mode = %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}

	// Rotation: a second write replaces the files in place.
	b2, err := certs.Generate(certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "tls.crt")); string(got) != string(b2.CertPEM) {
		t.Error("second WriteDir did not replace tls.crt")
	}

	// A TLS server using the files, a client trusting only ca.crt.
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, serverName := range []string{"runner-guard-webhook.runner-guard-system.svc", "localhost", "127.0.0.1"} {
		done := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, err = io.WriteString(c, "hello")
				c.Close()
			}
			done <- err
		}()
		dialAndRead(t, ln.Addr().String(), serverName, caPEM)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	// A client trusting another CA fails.
	other, err := certs.Generate(certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool(t, other.CACertPEM), ServerName: "localhost"})
	if err == nil {
		conn.Close()
		t.Error("handshake trusting an unrelated CA succeeded")
	}
}

func dialAndRead(t *testing.T, addr, serverName string, caPEM []byte) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool(t, caPEM), ServerName: serverName, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("handshake as %s: %v", serverName, err)
	}
	defer conn.Close()
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v", got, err)
	}
}
