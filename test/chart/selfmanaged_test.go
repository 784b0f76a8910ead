package chart

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSelfManagedCertificatesInstall installs the chart with Helm 4 in the
// default certificates mode, selfManaged: the chart renders no certificate
// and no caBundle; the webhook makes its CA and serving certificate in the
// Secret, injects the caBundle, and raises the entries once it answers. A
// plain Helm 4 upgrade then succeeds and changes neither the caBundle nor the
// policies; uninstall takes the Secret with the configuration.
func TestSelfManagedCertificatesInstall(t *testing.T) {
	e := startInstallEnv(t)
	e.selfManaged = true
	e.deploy("install", "certificates.mode=selfManaged")
	e.requireFailurePolicies(admissionregistrationv1.Ignore)
	vwc, err := e.env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(e.ctx, "runner-guard", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, wh := range vwc.Webhooks {
		if len(wh.ClientConfig.CABundle) > 0 {
			t.Fatalf("%s: the chart rendered a caBundle in selfManaged mode", wh.Name)
		}
	}
	if _, err := e.env.Client.CoreV1().Secrets(namespace).Get(e.ctx, "runner-guard-webhook-cert", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the chart rendered the certificate Secret in selfManaged mode: %v", err)
	}
	e.startWebhook()
	e.waitActivated()
	e.waitForWebhook()
	bundle := e.caBundle()
	secret, err := e.env.Client.CoreV1().Secrets(namespace).Get(e.ctx, "runner-guard-webhook-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook made no certificate Secret: %v", err)
	}
	if !bytes.Equal([]byte(bundle), secret.Data["ca.crt"]) {
		t.Errorf("caBundle is not the Secret's ca.crt")
	}
	t.Run("busy runner refused", e.scenarioBusy)

	e.deploy("upgrade", "certificates.mode=selfManaged", "policy.busyRetryAfter=20s")
	e.requireActivated()
	if e.caBundle() != bundle {
		t.Error("helm upgrade changed the injected caBundle")
	}
	t.Run("busy runner refused after upgrade", e.scenarioBusy)

	e.helm("uninstall", releaseName, "--namespace", namespace, "--wait", "--timeout", "2m")
	t.Run("uninstall unblocks deletes", e.scenarioUninstalled)
	e.eventually("certificate Secret deleted with its configuration", 60*time.Second, func() error {
		_, err := e.env.Client.CoreV1().Secrets(namespace).Get(e.ctx, "runner-guard-webhook-cert", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("certificate Secret: %v, want it garbage-collected", err)
	})
}
