// Package rotation keeps runner-guard's own CA and serving certificate in a
// Secret, renews both before they expire, and injects the CA bundle into the
// webhook configuration (certificates.mode selfManaged): no cert-manager, and
// nothing random in what the chart renders, so `helm template` and GitOps
// tools render the same configuration every time.
//
// A renewal never fails a call. A new serving certificate under the same CA
// changes nothing the API server checks. A new CA is added to the bundle
// beside the old one first; serving certificates are signed by it only once
// the API server has had it in every entry's caBundle for the propagation
// delay, and the old CA stays in the bundle until it expires, so whichever
// certificate a replica serves during the change, the caBundle verifies it.
//
// Every replica reconciles; the Secret update and the configuration patch
// test the resourceVersion they were computed from, so replicas never
// interleave, and the plan is the same whichever replica makes it.
package rotation

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/runner-guard/runner-guard/certs"
)

// The Secret's keys. tls.crt and tls.key are what a kubernetes.io/tls Secret
// holds; ca.crt is the bundle the configuration's entries trust.
const (
	KeyCert           = "tls.crt"
	KeyKey            = "tls.key"
	KeyBundle         = "ca.crt"
	KeySignerCert     = "signer.crt"
	KeySignerKey      = "signer.key"
	KeyPreviousCert   = "previous-signer.crt"
	KeyPreviousKey    = "previous-signer.key"
	DefaultValidity   = 90 * 24 * time.Hour
	DefaultCAValidity = 2 * 365 * 24 * time.Hour
	// DefaultPropagation is how long a new CA is in every entry's caBundle
	// before it signs serving certificates: the API server reads webhook
	// configurations through an informer, within seconds.
	DefaultPropagation = time.Minute
)

// Policy is how long certificates live and when they are renewed.
type Policy struct {
	// Validity of a serving certificate; renewed with a third of it left.
	Validity time.Duration
	// CAValidity of a CA; a new one is made with a third of it left.
	CAValidity time.Duration
	// Propagation is how long a new CA is in the live caBundle before it signs.
	Propagation time.Duration
}

// Check refuses a policy whose renewals could not happen in time: a CA must
// outlive several serving certificates, and a serving certificate must
// outlive the propagation delay.
func (p Policy) Check() error {
	switch {
	case p.Validity <= 0 || p.CAValidity <= 0 || p.Propagation < 0:
		return fmt.Errorf("validity %v, CA validity %v and propagation %v must be positive", p.Validity, p.CAValidity, p.Propagation)
	case p.CAValidity < 3*p.Validity:
		return fmt.Errorf("CA validity %v must be at least three serving certificates' validity (%v)", p.CAValidity, p.Validity)
	case p.Validity < 3*p.Propagation:
		return fmt.Errorf("validity %v must be at least three times the propagation delay %v", p.Validity, p.Propagation)
	}
	return nil
}

// Names are the names the serving certificate must cover: those the API
// server verifies for each entry (activation.ServerName).
type Names struct {
	DNS []string
	IPs []net.IP
}

// Split sorts server names into DNS names and IP addresses.
func Split(names []string) Names {
	var n Names
	for _, s := range names {
		if ip := net.ParseIP(s); ip != nil {
			n.IPs = append(n.IPs, ip)
		} else if !slices.Contains(n.DNS, s) {
			n.DNS = append(n.DNS, s)
		}
	}
	return n
}

// Reason says why a plan changes the Secret.
type Reason string

const (
	ReasonNoCA         Reason = "no-ca"          // none stored, or unreadable
	ReasonCARenewal    Reason = "ca-renewal"     // the CA has a third of its life left
	ReasonPreviousGone Reason = "previous-gone"  // the previous CA expired
	ReasonNoCert       Reason = "no-cert"        // none stored, or unreadable
	ReasonCertRenewal  Reason = "cert-renewal"   // a third of its life left
	ReasonNewSigner    Reason = "new-signer"     // the new CA may sign now
	ReasonNames        Reason = "names"          // it lacks a name the API server checks
	ReasonUntrusted    Reason = "untrusted-cert" // not signed by a CA in the bundle
	ReasonBundle       Reason = "bundle"         // the stored bundle is not the trusted CAs
)

// Plan is the Secret's data as it should be, and why it changed.
type Plan struct {
	Data    map[string][]byte
	Reasons []Reason
}

// Changed reports whether the Secret must be written.
func (p Plan) Changed() bool { return len(p.Reasons) > 0 }

// Bundle is the PEM bundle every entry's caBundle should hold.
func (p Plan) Bundle() []byte { return p.Data[KeyBundle] }

// Live is the caBundle the API server has: every entry's, as observed (nil
// when entries differ or none has one), and since when it was observed.
type Live struct {
	Bundle []byte
	Since  time.Time
}

// PlanFor decides the Secret's data from what it holds now (nil: no Secret),
// the names to cover, the live caBundle and the time.
func PlanFor(data map[string][]byte, names Names, live Live, pol Policy, now time.Time) (Plan, error) {
	out := Plan{Data: map[string][]byte{}}
	clock := func() time.Time { return now }
	signer := loadCA(data[KeySignerCert], data[KeySignerKey], now)
	previous := loadCA(data[KeyPreviousCert], data[KeyPreviousKey], now)
	if previous == nil && len(data[KeyPreviousCert]) > 0 {
		out.Reasons = append(out.Reasons, ReasonPreviousGone)
	}
	newCA := func() (*certs.CA, error) {
		return certs.NewCA(certs.CAOptions{CommonName: "runner-guard-webhook-ca", Validity: pol.CAValidity, Now: clock})
	}
	var err error
	switch {
	case signer == nil:
		if signer, err = newCA(); err != nil {
			return Plan{}, err
		}
		previous = nil
		out.Reasons = append(out.Reasons, ReasonNoCA)
	case dueAt(signer.Certificate()).Before(now) || dueAt(signer.Certificate()).Equal(now):
		previous = signer
		if signer, err = newCA(); err != nil {
			return Plan{}, err
		}
		out.Reasons = append(out.Reasons, ReasonCARenewal)
	}
	trusted := []*certs.CA{signer}
	if previous != nil {
		trusted = append(trusted, previous)
	}
	var bundle []byte
	for _, ca := range trusted {
		bundle = append(bundle, ca.CertPEM()...)
	}

	// Which CA signs: the newest, once the API server has had it in the
	// caBundle for the propagation delay; until then the previous one, which
	// it still trusts.
	issuer := signer
	if previous != nil && !maySign(signer, live, pol, now) {
		issuer = previous
	}

	leaf := parseLeaf(data[KeyCert], data[KeyKey])
	var why Reason
	switch {
	case leaf == nil:
		why = ReasonNoCert
	case !signedBy(leaf, trusted):
		why = ReasonUntrusted
	case !dueAt(leaf).After(now):
		why = ReasonCertRenewal
	case !covers(leaf, names):
		why = ReasonNames
	case issuer == signer && !signedBy(leaf, []*certs.CA{signer}):
		why = ReasonNewSigner
	}
	if why == "" {
		out.Data[KeyCert], out.Data[KeyKey] = data[KeyCert], data[KeyKey]
	} else {
		validity := min(pol.Validity, issuer.Certificate().NotAfter.Sub(now))
		b, err := issuer.Issue(certs.Options{DNSNames: names.DNS, IPs: names.IPs, Validity: validity, Now: clock})
		if err != nil {
			return Plan{}, fmt.Errorf("issue the serving certificate: %w", err)
		}
		out.Data[KeyCert], out.Data[KeyKey] = b.CertPEM, b.KeyPEM
		out.Reasons = append(out.Reasons, why)
	}
	out.Data[KeyBundle] = bundle
	if out.Data[KeySignerCert], out.Data[KeySignerKey], err = encodeCA(signer); err != nil {
		return Plan{}, err
	}
	if previous != nil {
		if out.Data[KeyPreviousCert], out.Data[KeyPreviousKey], err = encodeCA(previous); err != nil {
			return Plan{}, err
		}
	}
	// A bundle written in another order (or by hand) is rewritten, though
	// nothing else changed: the caBundle follows it.
	if !out.Changed() && !bytes.Equal(data[KeyBundle], bundle) {
		out.Reasons = append(out.Reasons, ReasonBundle)
	}
	return out, nil
}

// maySign reports whether the API server has had ca in the caBundle for the
// propagation delay.
func maySign(ca *certs.CA, live Live, pol Policy, now time.Time) bool {
	return inBundle(live.Bundle, ca.Certificate()) && !now.Before(signableFrom(ca.Certificate(), live, pol))
}

func signableFrom(ca *x509.Certificate, live Live, pol Policy) time.Time {
	since := issued(ca)
	if live.Since.After(since) {
		since = live.Since
	}
	return since.Add(pol.Propagation)
}

// Due is when the Secret next needs a look without any event: the earliest
// renewal of its certificates, or the end of the new CA's propagation.
func Due(data map[string][]byte, live Live, pol Policy) (time.Time, bool) {
	var due []time.Time
	for _, k := range []string{KeySignerCert, KeyCert} {
		if c := parseCert(data[k]); c != nil {
			due = append(due, dueAt(c))
		}
	}
	if c := parseCert(data[KeySignerCert]); c != nil && len(data[KeyPreviousCert]) > 0 {
		due = append(due, signableFrom(c, live, pol))
	}
	if c := parseCert(data[KeyPreviousCert]); c != nil {
		due = append(due, c.NotAfter)
	}
	if len(due) == 0 {
		return time.Time{}, false
	}
	return slices.MinFunc(due, time.Time.Compare), true
}

// dueAt is when a certificate is renewed: with a third of its life left.
func dueAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(issued(c))
	return c.NotAfter.Add(-life / 3)
}

// issued is when a certificate was made: certs backdates NotBefore by five
// minutes for clock skew.
func issued(c *x509.Certificate) time.Time { return c.NotBefore.Add(5 * time.Minute) }

// loadCA returns the stored CA, nil when absent, unreadable or expired.
func loadCA(certPEM, keyPEM []byte, now time.Time) *certs.CA {
	if len(certPEM) == 0 {
		return nil
	}
	ca, err := certs.LoadCA(certPEM, keyPEM)
	if err != nil || !now.Before(ca.Certificate().NotAfter) {
		return nil
	}
	return ca
}

func encodeCA(ca *certs.CA) (crt, key []byte, err error) {
	key, err = ca.KeyPEM()
	return ca.CertPEM(), key, err
}

// parseLeaf returns the serving certificate if its key matches it, else nil.
func parseLeaf(certPEM, keyPEM []byte) *x509.Certificate {
	c := parseCert(certPEM)
	if c == nil {
		return nil
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil
	}
	return c
}

func parseCert(p []byte) *x509.Certificate {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil
	}
	return c
}

// signedBy reports whether one of cas signed leaf.
func signedBy(leaf *x509.Certificate, cas []*certs.CA) bool {
	for _, ca := range cas {
		if leaf.CheckSignatureFrom(ca.Certificate()) == nil {
			return true
		}
	}
	return false
}

// covers reports whether leaf names every name the API server checks.
func covers(leaf *x509.Certificate, names Names) bool {
	for _, n := range names.DNS {
		if leaf.VerifyHostname(n) != nil {
			return false
		}
	}
	for _, ip := range names.IPs {
		if leaf.VerifyHostname(ip.String()) != nil {
			return false
		}
	}
	return true
}

// inBundle reports whether bundle holds c.
func inBundle(bundle []byte, c *x509.Certificate) bool {
	for len(bundle) > 0 {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			return false
		}
		if bytes.Equal(b.Bytes, c.Raw) {
			return true
		}
	}
	return false
}
