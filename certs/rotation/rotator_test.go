package rotation_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runner-guard/runner-guard/certs/rotation"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
)

// TestRotationWhileServing runs two replicas' Rotators against a real API
// server whose webhook configuration (failurePolicy Fail) calls a webhook
// serving their certificate, every review on a new TLS handshake. With
// lifetimes of seconds, the CA and the serving certificate are renewed
// several times while eight clients send dry-run deletes: none may fail.
func TestRotationWhileServing(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("KUBEBUILDER_ASSETS is not set (make test sets it)")
		}
		t.Skip("KUBEBUILDER_ASSETS is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := framework.StartControlPlane(ctx, t.TempDir(), assets, t.Logf)
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	defer cp.Stop()
	const ns, secret, name = "rotation", "webhook-cert", "rg-rotation"
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	pol := rotation.Policy{Validity: 6 * time.Second, CAValidity: 18 * time.Second, Propagation: 2 * time.Second}
	var replicas []*rotation.Rotator
	for i := range 2 {
		r, err := rotation.New(rotation.Options{Namespace: ns, SecretName: secret, ConfigurationName: name,
			Client: cp.Client, Policy: pol, Recheck: 500 * time.Millisecond, Log: testr.New(t).WithName(fmt.Sprint("replica-", i))})
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, r)
		go func() { _ = r.Start(ctx) }()
	}

	// The webhook: each handshake served by one replica or the other.
	var handshakes, reviews atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(allow(&reviews)),
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return replicas[handshakes.Add(1)%2].GetCertificate(h)
		}},
		ReadHeaderTimeout: 5 * time.Second,
	}
	srv.SetKeepAlivesEnabled(false)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()

	url := "https://" + ln.Addr().String() + "/validate"
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "legacy-runner-pods.runner-guard.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:     ptr.To(admissionregistrationv1.Fail),
			SideEffects:       ptr.To(admissionregistrationv1.SideEffectClassNone),
			// The API server's default; a slow handshake must not fail a call.
			TimeoutSeconds:          ptr.To[int32](10),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := cp.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "runner:test"}}}}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dryRunDelete := func() error {
		return cp.Client.CoreV1().Pods(ns).Delete(ctx, "runner", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}
	// The caBundle is injected and verifies what is served: calls answer.
	deadline := time.Now().Add(30 * time.Second)
	for err := dryRunDelete(); err != nil || reviews.Load() == 0; err = dryRunDelete() {
		if time.Now().After(deadline) {
			t.Fatalf("the webhook never answered: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Which CAs and serving certificates the Secret holds over the run.
	var mu sync.Mutex
	signers, leaves := map[string]bool{}, map[string]bool{}
	watch := func() {
		s, err := cp.Client.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			return
		}
		mu.Lock()
		signers[string(s.Data[rotation.KeySignerCert])] = true
		leaves[string(s.Data[rotation.KeyCert])] = true
		mu.Unlock()
	}

	var failed, passed atomic.Int64
	var firstErr atomic.Value
	end := time.Now().Add(40 * time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(end) {
				if err := dryRunDelete(); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				} else {
					passed.Add(1)
				}
			}
		})
	}
	for time.Now().Before(end) {
		watch()
		time.Sleep(250 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("%d calls passed, %d failed; %d CAs, %d serving certificates; %d handshakes", passed.Load(), failed.Load(), len(signers), len(leaves), handshakes.Load())
	if failed.Load() > 0 {
		t.Errorf("%d calls failed during rotation, first: %v", failed.Load(), firstErr.Load())
	}
	if len(signers) < 3 || len(leaves) < 6 {
		t.Errorf("%d CAs and %d serving certificates in 40s: want at least 3 and 6 (renewals did not happen)", len(signers), len(leaves))
	}

	// Deleting the configuration (helm uninstall) takes the Secret with it.
	if err := cp.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		_, err := cp.Client.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Secret after its configuration was deleted: %v, want it garbage-collected", err)
		}
	}
}

// allow admits every review and counts it.
func allow(n *atomic.Int64) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		n.Add(1)
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(&review)
	}
}
