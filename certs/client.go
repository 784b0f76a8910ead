package certs

import (
	"crypto/x509"
	"errors"
	"time"
)

// ClientOptions describe a TLS client certificate, such as the one an API
// server presents to a webhook started with --client-ca-file. Zero values
// take the defaults.
type ClientOptions struct {
	// CommonName is the client's name; required.
	CommonName string
	// Organizations are the subject's O values, which a Kubernetes API
	// server or kubelet takes as the client's groups; default "runner-guard".
	Organizations []string
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
	leaf, err := ca.newLeaf(opts.Validity, opts.Now)
	if err != nil {
		return nil, err
	}
	tmpl := leaf.template(opts.CommonName, x509.ExtKeyUsageClientAuth)
	if len(opts.Organizations) > 0 {
		tmpl.Subject.Organization = append([]string(nil), opts.Organizations...)
	}
	return ca.sign(tmpl, leaf.key)
}
