// Package certs creates a self-signed certificate authority and TLS serving
// certificates for the webhook: for local runs, the e2e suites and the demo.
// A cluster with cert-manager does not need it (see manifests/certmanager).
//
// Keys are ECDSA P-256. A CA signs any number of leaves, so a test can rotate
// the serving certificate under the same CA:
//
//	ca, _ := certs.NewCA(certs.CAOptions{})
//	b1, _ := ca.Issue(certs.Options{})
//	b2, _ := ca.Issue(certs.Options{}) // same CA, new key and serial
//	_ = b2.WriteDir(dir)
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	// DefaultValidity is the lifetime of a serving certificate.
	DefaultValidity = 365 * 24 * time.Hour
	// DefaultCAValidity is the lifetime of a CA.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// ServiceName and Namespace are those of the webhook Service in manifests/base.
	ServiceName = "runner-guard-webhook"
	Namespace   = "runner-guard-system"

	// File names written by WriteDir: the names controller-runtime's webhook
	// server and cert-manager's Secrets use.
	CertFile   = "tls.crt"
	KeyFile    = "tls.key"
	CACertFile = "ca.crt"

	// backdate keeps a fresh certificate valid on a host whose clock is
	// slightly behind the one that issued it.
	backdate = 5 * time.Minute
)

// DefaultDNSNames are the SANs of a serving certificate when Options.DNSNames
// is empty: the in-cluster Service names and localhost.
func DefaultDNSNames() []string {
	return []string{
		ServiceName + "." + Namespace + ".svc",
		ServiceName + "." + Namespace + ".svc.cluster.local",
		"localhost",
	}
}

// DefaultIPs are the IP SANs of a serving certificate when Options.IPs is empty.
func DefaultIPs() []net.IP { return []net.IP{net.IPv4(127, 0, 0, 1)} }

// Options describe a serving certificate. Zero values take the defaults.
type Options struct {
	// DNSNames are the DNS SANs; default DefaultDNSNames().
	DNSNames []string
	// IPs are the IP SANs; default DefaultIPs(). Both empty means defaults
	// for both; set only one to have only that kind.
	IPs []net.IP
	// Validity is the certificate lifetime; default DefaultValidity.
	Validity time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// CAOptions describe a certificate authority. Zero values take the defaults.
type CAOptions struct {
	// CommonName of the CA; default "runner-guard-ca".
	CommonName string
	// Validity is the CA lifetime; default DefaultCAValidity.
	Validity time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Bundle is a PEM-encoded serving certificate, its private key (PKCS #8,
// "PRIVATE KEY") and the certificate of the CA that signed it.
type Bundle struct {
	CACertPEM []byte
	CertPEM   []byte
	KeyPEM    []byte
}

// CA is a certificate authority that issues serving certificates.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// NewCA creates a self-signed CA with a fresh P-256 key.
func NewCA(opts CAOptions) (*CA, error) {
	if opts.Validity < 0 {
		return nil, fmt.Errorf("certs: CA validity %v is negative", opts.Validity)
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultCAValidity
	}
	if opts.CommonName == "" {
		opts.CommonName = "runner-guard-ca"
	}
	now := nowFunc(opts.Now)()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: opts.CommonName, Organization: []string{"runner-guard"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(opts.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("certs: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: parse CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Certificate returns the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// CertPEM returns the CA's certificate, PEM-encoded (a webhook's caBundle).
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Issue signs a new serving certificate with a fresh P-256 key. It is safe to
// call concurrently.
func (ca *CA) Issue(opts Options) (*Bundle, error) {
	dnsNames, ips := opts.DNSNames, opts.IPs
	if len(dnsNames) == 0 && len(ips) == 0 {
		dnsNames, ips = DefaultDNSNames(), DefaultIPs()
	}
	for _, n := range dnsNames {
		if err := checkDNSName(n); err != nil {
			return nil, err
		}
	}
	for _, ip := range ips {
		if ip == nil || (ip.To4() == nil && len(ip) != net.IPv6len) {
			return nil, fmt.Errorf("certs: invalid IP address %v", []byte(ip))
		}
	}
	leaf, err := ca.newLeaf(opts.Validity, opts.Now)
	if err != nil {
		return nil, err
	}
	cn := "runner-guard-webhook"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	tmpl := leaf.template(cn, x509.ExtKeyUsageServerAuth)
	tmpl.DNSNames = append([]string(nil), dnsNames...)
	tmpl.IPAddresses = append([]net.IP(nil), ips...)
	return ca.sign(tmpl, leaf.key)
}

// leaf is what every certificate ca signs starts from: a fresh P-256 key, a
// serial, and a validity window inside the CA's.
type leaf struct {
	key                 *ecdsa.PrivateKey
	serial              *big.Int
	notBefore, notAfter time.Time
}

// newLeaf checks validity (0: DefaultValidity) against the CA's own expiry
// and makes the key and serial.
func (ca *CA) newLeaf(validity time.Duration, clock func() time.Time) (leaf, error) {
	if validity < 0 {
		return leaf{}, fmt.Errorf("certs: validity %v is negative", validity)
	}
	if validity == 0 {
		validity = DefaultValidity
	}
	now := nowFunc(clock)()
	l := leaf{notBefore: now.Add(-backdate), notAfter: now.Add(validity)}
	if l.notAfter.After(ca.cert.NotAfter) {
		return leaf{}, fmt.Errorf("certs: certificate would expire at %s, after its CA (%s)",
			l.notAfter.UTC().Format(time.RFC3339), ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	var err error
	if l.key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return leaf{}, fmt.Errorf("certs: generate key: %w", err)
	}
	if l.serial, err = newSerial(); err != nil {
		return leaf{}, err
	}
	return l, nil
}

// template is the certificate l stands for: named cn, for one extended key
// usage (serving or client), with no SANs yet.
func (l leaf) template(cn string, usage x509.ExtKeyUsage) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          l.serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"runner-guard"}},
		NotBefore:             l.notBefore,
		NotAfter:              l.notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{usage},
		BasicConstraintsValid: true,
	}
}

// Generate creates a new CA (valid DefaultCAValidity, or longer if the leaf
// validity needs it) and one serving certificate signed by it.
func Generate(opts Options) (*Bundle, error) {
	caValidity := DefaultCAValidity
	if opts.Validity > caValidity {
		caValidity = opts.Validity + time.Hour
	}
	ca, err := NewCA(CAOptions{Validity: caValidity, Now: opts.Now})
	if err != nil {
		return nil, err
	}
	return ca.Issue(opts)
}

// WriteDir writes tls.crt, tls.key (mode 0600) and ca.crt into dir, creating
// it if needed. Each file is written to a temporary file in dir and renamed
// into place, so a reader (controller-runtime's certwatcher) never sees half a
// file. tls.key is renamed before tls.crt: a watcher that reloads on the
// certificate's change finds the matching key already there.
func (b *Bundle) WriteDir(dir string) error {
	if dir == "" {
		return errors.New("certs: empty directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{CACertFile, b.CACertPEM, 0o644},
		{KeyFile, b.KeyPEM, 0o600},
		{CertFile, b.CertPEM, 0o644},
	} {
		if len(f.data) == 0 {
			return fmt.Errorf("certs: bundle has no %s", f.name)
		}
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(name)
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("certs: write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("certs: sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("certs: close %s: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	ok = true
	return nil
}

func nowFunc(f func() time.Time) func() time.Time {
	if f == nil {
		return time.Now
	}
	return f
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certs: serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}

// checkDNSName accepts host names and a leading wildcard label.
func checkDNSName(n string) error {
	bad := func(why string) error { return fmt.Errorf("certs: invalid DNS name %q: %s", n, why) }
	if n == "" {
		return bad("empty")
	}
	if len(n) > 253 {
		return bad("longer than 253 characters")
	}
	if net.ParseIP(n) != nil {
		return bad("an IP address; pass it as an IP SAN")
	}
	for i, label := range strings.Split(strings.TrimSuffix(n, "."), ".") {
		if label == "*" && i == 0 {
			continue
		}
		if label == "" || len(label) > 63 {
			return bad("empty label or label longer than 63 characters")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return bad("label starts or ends with '-'")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return bad(fmt.Sprintf("character %q", c))
			}
		}
	}
	return nil
}

// sign issues tmpl for key with the CA and encodes the bundle.
func (ca *CA) sign(tmpl *x509.Certificate, key crypto.Signer) (*Bundle, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("certs: create certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("certs: encode key: %w", err)
	}
	return &Bundle{
		CACertPEM: ca.CertPEM(),
		CertPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// KeyPEM returns the CA's private key, PEM-encoded (PKCS #8), so the CA can be
// stored (the self-managed certificates' Secret) and loaded again with LoadCA.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("certs: encode CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// LoadCA parses a CA stored with CertPEM and KeyPEM. It refuses a certificate
// that is not a CA or a key that does not match it.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("certs: CA certificate: no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("certs: CA certificate: not a CA")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("certs: CA key: no PEM block")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: CA key: %w", err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("certs: CA key: %T, want ECDSA", parsed)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("certs: CA key does not match the CA certificate")
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cb.Bytes})}, nil
}
