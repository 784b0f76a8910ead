// Package activation raises runner-guard's own ValidatingWebhookConfiguration
// from failurePolicy Ignore, which it is installed with, to the policy the
// installer chose, once the API server can actually be answered: the
// address it calls (the Service, so a replica the Service routes to, or the
// URL) presents a certificate the configuration's caBundle verifies for the
// host it calls. Until then a failed call is ignored, so a fresh install
// (cert-manager has not injected the caBundle yet, no replica is Ready yet)
// never fails a deletion or an eviction.
//
// The wanted policies are annotations on the configuration itself, so every
// replica of every version reads the same ones and a rollout never has an old
// and a new replica patching against each other. Every replica reconciles;
// the patch tests the resourceVersion it was computed from, so concurrent
// replicas cannot interleave and a lost race is retried on the next event.
package activation

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

const (
	// AnnotationDeletes is the failurePolicy wanted on the entries reviewing
	// pod DELETEs, once a replica serves.
	AnnotationDeletes = "runner-guard.io/deletes-failure-policy"
	// AnnotationEvictions is the failurePolicy wanted on the entries
	// reviewing pods/eviction CREATEs, once a replica serves.
	AnnotationEvictions = "runner-guard.io/evictions-failure-policy"
)

// Kind is what an entry of the configuration reviews.
type Kind string

const (
	// Deletes: DELETE of pods.
	Deletes Kind = "deletes"
	// Evictions: CREATE of pods/eviction.
	Evictions Kind = "evictions"
)

// Change is one entry whose failurePolicy is to be set.
type Change struct {
	Index int
	Name  string
	Kind  Kind
	From  admissionregistrationv1.FailurePolicyType
	To    admissionregistrationv1.FailurePolicyType
}

// Waiting is an entry that differs from its wanted policy but may not be
// raised yet, and why.
type Waiting struct {
	Name   string
	Reason string
}

// Plan is what to do with one observed configuration.
type Plan struct {
	ResourceVersion string
	Changes         []Change
	Waiting         []Waiting
}

// Done reports whether every entry already has its wanted policy.
func (p Plan) Done() bool { return len(p.Changes) == 0 && len(p.Waiting) == 0 }

// Wanted reads the wanted failurePolicy per kind from the configuration's
// annotations. A kind without its annotation is left as it is.
func Wanted(vwc *admissionregistrationv1.ValidatingWebhookConfiguration) (map[Kind]admissionregistrationv1.FailurePolicyType, error) {
	out := map[Kind]admissionregistrationv1.FailurePolicyType{}
	for kind, key := range map[Kind]string{Deletes: AnnotationDeletes, Evictions: AnnotationEvictions} {
		v, ok := vwc.Annotations[key]
		if !ok {
			continue
		}
		switch p := admissionregistrationv1.FailurePolicyType(v); p {
		case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
			out[kind] = p
		default:
			return nil, fmt.Errorf("annotation %s of ValidatingWebhookConfiguration %s: %q is not Fail or Ignore", key, vwc.Name, v)
		}
	}
	return out, nil
}

// KindOf says what an entry reviews: Evictions when a rule covers
// pods/eviction, Deletes when one covers DELETE of pods, else "" (an entry
// runner-guard does not own, left alone).
func KindOf(wh admissionregistrationv1.ValidatingWebhook) Kind {
	var deletes bool
	for _, r := range wh.Rules {
		core := slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")
		if !core {
			continue
		}
		if slices.Contains(r.Resources, "pods/eviction") {
			return Evictions
		}
		if slices.Contains(r.Resources, "pods") && (slices.Contains(r.Operations, admissionregistrationv1.Delete) ||
			slices.Contains(r.Operations, admissionregistrationv1.OperationAll)) {
			deletes = true
		}
	}
	if deletes {
		return Deletes
	}
	return ""
}

// ServerName is the name the API server verifies the webhook's certificate
// for: the Service's DNS name (name.namespace.svc), or the URL's host.
func ServerName(cc admissionregistrationv1.WebhookClientConfig) (string, error) {
	switch {
	case cc.Service != nil:
		return cc.Service.Name + "." + cc.Service.Namespace + ".svc", nil
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return "", fmt.Errorf("clientConfig.url: %w", err)
		}
		if u.Hostname() == "" {
			return "", fmt.Errorf("clientConfig.url %q has no host", *cc.URL)
		}
		return u.Hostname(), nil
	}
	return "", errors.New("clientConfig has neither service nor url")
}

// Address is the host:port the API server dials for a clientConfig: the
// Service's DNS name and port (443 by default), or the URL's host and port.
func Address(cc admissionregistrationv1.WebhookClientConfig) (string, error) {
	host, err := ServerName(cc)
	if err != nil {
		return "", err
	}
	port := "443"
	switch {
	case cc.Service != nil && cc.Service.Port != nil:
		port = fmt.Sprint(*cc.Service.Port)
	case cc.URL != nil:
		u, _ := url.Parse(*cc.URL) // parsed by ServerName
		if p := u.Port(); p != "" {
			port = p
		}
	}
	return net.JoinHostPort(host, port), nil
}

// Verify checks that caBundle verifies the served chain (leaf first) as a
// serving certificate for serverName at now, as the API server would.
func Verify(caBundle []byte, served []*x509.Certificate, serverName string, now time.Time) error {
	if len(served) == 0 {
		return errors.New("no certificate is served")
	}
	if len(strings.TrimSpace(string(caBundle))) == 0 {
		return errors.New("caBundle is empty (not injected yet)")
	}
	roots := x509.NewCertPool()
	if !appendPEM(roots, caBundle) {
		return errors.New("caBundle holds no PEM certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range served[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if ip := net.ParseIP(serverName); ip == nil {
		opts.DNSName = serverName
	}
	if _, err := served[0].Verify(opts); err != nil {
		return fmt.Errorf("caBundle does not verify the served certificate: %w", err)
	}
	if ip := net.ParseIP(serverName); ip != nil {
		// x509 checks IP SANs through VerifyHostname, not DNSName.
		if err := served[0].VerifyHostname(serverName); err != nil {
			return fmt.Errorf("served certificate: %w", err)
		}
	}
	return nil
}

// appendPEM adds every CERTIFICATE block of b to pool and reports whether it
// found one.
func appendPEM(pool *x509.CertPool, b []byte) bool {
	found := false
	for len(b) > 0 {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			continue
		}
		pool.AddCert(c)
		found = true
	}
	return found
}

// Served returns the certificate chain (leaf first) presented at an entry's
// clientConfig: what the API server is served when it calls that entry, or
// an error when nothing answers there.
type Served func(admissionregistrationv1.WebhookClientConfig) ([]*x509.Certificate, error)

// PlanFor decides, for a configuration as observed and what its entries'
// clientConfigs serve, which entries to set to their wanted policy. Lowering
// to Ignore needs no proof and is always planned; raising to Fail only for
// an entry whose clientConfig answers with a chain its caBundle verifies for
// the host the API server calls.
func PlanFor(vwc *admissionregistrationv1.ValidatingWebhookConfiguration, served Served, now time.Time) (Plan, error) {
	wanted, err := Wanted(vwc)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{ResourceVersion: vwc.ResourceVersion}
	for i, wh := range vwc.Webhooks {
		kind := KindOf(wh)
		want, ok := wanted[kind]
		if kind == "" || !ok {
			continue
		}
		from := admissionregistrationv1.Fail // the API's default
		if wh.FailurePolicy != nil {
			from = *wh.FailurePolicy
		}
		if from == want {
			continue
		}
		if want == admissionregistrationv1.Fail {
			name, err := ServerName(wh.ClientConfig)
			var chain []*x509.Certificate
			if err == nil {
				chain, err = served(wh.ClientConfig)
			}
			if err == nil {
				err = Verify(wh.ClientConfig.CABundle, chain, name, now)
			}
			if err != nil {
				p.Waiting = append(p.Waiting, Waiting{Name: wh.Name, Reason: err.Error()})
				continue
			}
		}
		p.Changes = append(p.Changes, Change{Index: i, Name: wh.Name, Kind: kind, From: from, To: want})
	}
	return p, nil
}

// jsonPatchOp is one RFC 6902 operation.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// Patch is the JSON patch making the plan's changes. It tests the
// resourceVersion the plan was made from and each entry's name, so it
// applies only to the configuration as observed: a concurrent change (another
// replica, a kubectl apply) makes it fail instead of setting a policy on an
// entry that moved.
func (p Plan) Patch() ([]byte, error) {
	if len(p.Changes) == 0 {
		return nil, errors.New("no change to patch")
	}
	if p.ResourceVersion == "" {
		return nil, errors.New("no resourceVersion to test the patch against")
	}
	ops := []jsonPatchOp{{Op: "test", Path: "/metadata/resourceVersion", Value: p.ResourceVersion}}
	for _, c := range p.Changes {
		ops = append(ops,
			jsonPatchOp{Op: "test", Path: fmt.Sprintf("/webhooks/%d/name", c.Index), Value: c.Name},
			// add, not replace: it also sets a member the object lacks.
			jsonPatchOp{Op: "add", Path: fmt.Sprintf("/webhooks/%d/failurePolicy", c.Index), Value: string(c.To)})
	}
	return json.Marshal(ops)
}
