package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"time"
)

// ClientOptions describe a TLS client certificate, such as the one an API
// server presents to a webhook started with --client-ca-file. Zero values
// take the defaults.
type ClientOptions struct {
	// CommonName is the client's name; required.
	CommonName string
	// Validity is the certificate lifetime; default DefaultValidity.
	Validity time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// IssueClient signs a new client certificate (ExtKeyUsageClientAuth, no SANs)
// with a fresh P-256 key. The Bundle's CertPEM and KeyPEM load with
// tls.X509KeyPair. It is safe to call concurrently.
func (ca *CA) IssueClient(opts ClientOptions) (*Bundle, error) {
	if opts.CommonName == "" {
		return nil, errors.New("certs: client certificate needs a common name")
	}
	if opts.Validity < 0 {
		return nil, fmt.Errorf("certs: validity %v is negative", opts.Validity)
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultValidity
	}
	now := nowFunc(opts.Now)()
	notAfter := now.Add(opts.Validity)
	if notAfter.After(ca.cert.NotAfter) {
		return nil, fmt.Errorf("certs: certificate would expire at %s, after its CA (%s)",
			notAfter.UTC().Format(time.RFC3339), ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: opts.CommonName, Organization: []string{"runner-guard"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	return ca.sign(tmpl, key)
}
