package rotation_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/certs/rotation"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/rotationload"
)

// TestRotationWhileServing runs two replicas' Rotators against a real API
// server whose webhook configuration (failurePolicy Fail) calls a webhook
// serving their certificate, every review on a new TLS handshake. With
// lifetimes of seconds, the CA and the serving certificate are renewed
// several times while eight clients send dry-run deletes: none may fail.
// Deleting the configuration (helm uninstall) then takes the Secret with it.
func TestRotationWhileServing(t *testing.T) {
	assets := fixture.KubebuilderAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cp, err := framework.StartControlPlane(ctx, t.TempDir(), assets, t.Logf)
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	defer cp.Stop()

	res, err := rotationload.Run(ctx, rotationload.Options{
		Client: cp.Client, Replicas: 2, Clients: 8, Duration: 40 * time.Second,
		Policy: rotation.Policy{Validity: 6 * time.Second, CAValidity: 18 * time.Second, Propagation: 2 * time.Second},
		Log:    testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d calls passed, %d failed; %d CAs, %d serving certificates; %d handshakes", res.Passed, res.Failed, res.CAs, res.Certs, res.Handshakes)
	if res.Failed > 0 {
		t.Errorf("%d calls failed during rotation, first: %s", res.Failed, res.FirstError)
	}
	if res.CAs < 3 || res.Certs < 6 {
		t.Errorf("%d CAs and %d serving certificates in 40s: want at least 3 and 6 (renewals did not happen)", res.CAs, res.Certs)
	}

	if err := cp.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, rotationload.Configuration, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		_, err := cp.Client.CoreV1().Secrets(rotationload.Namespace).Get(ctx, rotationload.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Secret after its configuration was deleted: %v, want it garbage-collected", err)
		}
	}
}
