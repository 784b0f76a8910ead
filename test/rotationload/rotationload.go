// Package rotationload renews runner-guard's self-managed certificates
// (certs/rotation) on a real API server while clients send reviews through
// it: replicas' Rotators keep the Secret and inject the caBundle into a
// webhook configuration with failurePolicy Fail whose webhook serves their
// certificate, one new TLS handshake per review. The rotation test and the
// benchmark both run it; every failed call is one the API server could not
// verify.
package rotationload

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runner-guard/runner-guard/certs/rotation"
)

// Names of what Run creates.
const (
	Namespace     = "rotation"
	SecretName    = "webhook-cert"
	Configuration = "rg-rotation"
)

// Options say how hard and how long.
type Options struct {
	Client kubernetes.Interface
	// Replicas run a Rotator each; the webhook serves them in turn.
	Replicas int
	// Clients send dry-run deletes concurrently for Duration.
	Clients  int
	Duration time.Duration
	// Policy has lifetimes of seconds, so Duration spans several renewals.
	Policy rotation.Policy
	Log    logr.Logger
}

// Result is what happened during the load.
type Result struct {
	Passed, Failed int64
	FirstError     string
	// CAs and Certs count the distinct CAs and serving certificates the
	// Secret held while the clients ran.
	CAs, Certs int
	Handshakes int64
}

// Run sets up the namespace, the configuration and the replicas, waits until
// calls answer, then loads them for Duration. The Rotators stop when ctx ends.
func Run(ctx context.Context, o Options) (Result, error) {
	cs := o.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		return Result{}, err
	}
	var replicas []*rotation.Rotator
	for i := range max(o.Replicas, 1) {
		r, err := rotation.New(rotation.Options{Namespace: Namespace, SecretName: SecretName, ConfigurationName: Configuration,
			Client: cs, Policy: o.Policy, Recheck: 500 * time.Millisecond, Log: o.Log.WithName(fmt.Sprint("replica-", i))})
		if err != nil {
			return Result{}, err
		}
		replicas = append(replicas, r)
		go func() { _ = r.Start(ctx) }()
	}

	var handshakes, reviews atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(allow(&reviews)),
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return replicas[int(handshakes.Add(1))%len(replicas)].GetCertificate(h)
		}},
		ReadHeaderTimeout: 5 * time.Second,
	}
	srv.SetKeepAlivesEnabled(false) // a handshake, so a certificate check, per review
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	defer srv.Close()

	url := "https://" + ln.Addr().String() + "/validate"
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: Configuration},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "legacy-runner-pods.runner-guard.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": Namespace}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](10),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		return Result{}, err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runner", Namespace: Namespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "runner:test"}}}}
	if _, err := cs.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return Result{}, err
	}
	dryRunDelete := func() error {
		return cs.CoreV1().Pods(Namespace).Delete(ctx, "runner", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}
	// The caBundle is injected and verifies what is served: calls answer.
	deadline := time.Now().Add(60 * time.Second)
	for err := dryRunDelete(); err != nil || reviews.Load() == 0; err = dryRunDelete() {
		if time.Now().After(deadline) {
			return Result{}, fmt.Errorf("the webhook never answered: %w", errors.Join(err, ctx.Err()))
		}
		time.Sleep(200 * time.Millisecond)
	}

	var mu sync.Mutex
	signers, leaves := map[string]bool{}, map[string]bool{}
	var res Result
	var failed, passed atomic.Int64
	var firstErr atomic.Value
	end := time.Now().Add(o.Duration)
	var wg sync.WaitGroup
	for range max(o.Clients, 1) {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := dryRunDelete(); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				} else {
					passed.Add(1)
				}
			}
		})
	}
	for time.Now().Before(end) && ctx.Err() == nil {
		if s, err := cs.CoreV1().Secrets(Namespace).Get(ctx, SecretName, metav1.GetOptions{}); err == nil {
			mu.Lock()
			signers[string(s.Data[rotation.KeySignerCert])] = true
			leaves[string(s.Data[rotation.KeyCert])] = true
			mu.Unlock()
		}
		time.Sleep(250 * time.Millisecond)
	}
	wg.Wait()
	res.Passed, res.Failed, res.CAs, res.Certs, res.Handshakes = passed.Load(), failed.Load(), len(signers), len(leaves), handshakes.Load()
	if v, ok := firstErr.Load().(string); ok {
		res.FirstError = v
	}
	return res, nil
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
