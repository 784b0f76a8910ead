package rotation_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/runner-guard/runner-guard/certs/rotation"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook/activation"
)

// TestRotatorKeepsSecretAndCABundle runs a Rotator against a fake API: it
// creates the Secret (owned by the configuration), injects the bundle into
// runner-guard's entry only, serves a certificate the bundle verifies for
// the URL's host, and renews that certificate when it is due, under the same
// CA.
func TestRotatorKeepsSecretAndCABundle(t *testing.T) {
	url := "https://127.0.0.1:9443/validate-runner-pods"
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "runner-guard", UID: "vwc-uid", ResourceVersion: "1"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "legacy-runner-pods.runner-guard.io", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
				Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}},
			// Not runner-guard's: left alone.
			{Name: "other.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://other.example.com/")},
				Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}},
		},
	}
	cs := fake.NewClientset(vwc)
	var clock atomic.Pointer[time.Time]
	start := time.Now()
	clock.Store(&start)
	r, err := rotation.New(rotation.Options{Namespace: "rg", SecretName: "webhook-cert", ConfigurationName: "runner-guard",
		Client: cs, Policy: rotation.Policy{Validity: time.Hour, CAValidity: 3 * time.Hour, Propagation: time.Minute},
		Recheck: 20 * time.Millisecond, Log: testr.New(t), Now: func() time.Time { return *clock.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Start(ctx) }()

	// state is the Secret, the configuration and the served leaf once all agree.
	state := func() (*corev1.Secret, *admissionregistrationv1.ValidatingWebhookConfiguration, *x509.Certificate, error) {
		s, err := cs.CoreV1().Secrets("rg").Get(ctx, "webhook-cert", metav1.GetOptions{})
		if err != nil {
			return nil, nil, nil, err
		}
		v, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "runner-guard", metav1.GetOptions{})
		if err != nil {
			return nil, nil, nil, err
		}
		if !bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, s.Data[rotation.KeyBundle]) {
			return nil, nil, nil, errors.New("caBundle not injected yet")
		}
		c, err := r.GetCertificate(nil)
		if err != nil {
			return nil, nil, nil, err
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			return nil, nil, nil, err
		}
		if !bytes.Equal(leaf.Raw, fixture.ParseCert(t, s.Data[rotation.KeyCert]).Raw) {
			return nil, nil, nil, errors.New("not serving the Secret's certificate yet")
		}
		return s, v, leaf, nil
	}
	wait := func(what string, ok func(*corev1.Secret, *x509.Certificate) error) (*corev1.Secret, *admissionregistrationv1.ValidatingWebhookConfiguration, *x509.Certificate) {
		t.Helper()
		var last error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			s, v, leaf, err := state()
			if err == nil {
				err = ok(s, leaf)
			}
			if err == nil {
				return s, v, leaf
			}
			last = err
		}
		t.Fatalf("%s: %v", what, last)
		return nil, nil, nil
	}

	s, v, leaf := wait("first certificate", func(*corev1.Secret, *x509.Certificate) error { return nil })
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "vwc-uid" || s.OwnerReferences[0].Kind != "ValidatingWebhookConfiguration" {
		t.Errorf("Secret owners %+v, want the configuration", s.OwnerReferences)
	}
	if len(v.Webhooks[1].ClientConfig.CABundle) > 0 {
		t.Error("the caBundle was injected into another webhook's entry")
	}
	if err := activation.Verify(s.Data[rotation.KeyBundle], []*x509.Certificate{leaf}, "127.0.0.1", start); err != nil {
		t.Errorf("the injected bundle does not verify the served certificate: %v", err)
	}

	// Past two thirds of the certificate's hour: a new one, same CA.
	later := start.Add(45 * time.Minute)
	clock.Store(&later)
	s2, _, leaf2 := wait("renewed certificate", func(s2 *corev1.Secret, l *x509.Certificate) error {
		if l.SerialNumber.Cmp(leaf.SerialNumber) == 0 {
			return fmt.Errorf("still serving serial %v", l.SerialNumber)
		}
		return nil
	})
	if !bytes.Equal(s2.Data[rotation.KeyBundle], s.Data[rotation.KeyBundle]) {
		t.Error("renewing the serving certificate changed the CA bundle")
	}
	if err := activation.Verify(s2.Data[rotation.KeyBundle], []*x509.Certificate{leaf2}, "127.0.0.1", later); err != nil {
		t.Errorf("the bundle does not verify the renewed certificate: %v", err)
	}
}
