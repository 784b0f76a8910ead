package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/test/process"
)

// metricsReaderRole is the ClusterRole manifests/base ships for scrapers.
const metricsReaderRole = "runner-guard-metrics-reader"

// TestMetricsSecure: with --metrics-secure (the default) /metrics is HTTPS and
// answers only requesters the real API server authenticates (TokenReview) and
// authorizes for GET /metrics (SubjectAccessReview), using the webhook's own
// ServiceAccount and the RBAC of manifests/base.
func TestMetricsSecure(t *testing.T) {
	if !env.Local() {
		t.Skip("existing cluster: the metrics endpoint is not reachable from here")
	}
	s := newScenario(t, "metrics")
	port, err := process.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// Later flags win: these override the framework's --metrics-secure=false
	// and metrics address.
	if err := env.RestartWebhook(s.ctx, "--metrics-secure=true", fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := env.RestartWebhook(ctx); err != nil {
			t.Errorf("restore webhook: %v", err)
		}
	})
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", port)

	// One decision, so runner_guard_decisions_total has a sample.
	pod := s.runnerPod("metrics-runner", false, true)
	if err := env.Client.CoreV1().Pods(s.ns).Delete(s.ctx, pod.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("dry-run delete of an idle runner: %v", err)
	}

	unbound := serviceAccountToken(t, s, "scraper-unbound")
	bound := serviceAccountToken(t, s, "scraper-bound")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsReaderRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper-bound", Namespace: s.ns}},
	}
	if _, err := env.Client.RbacV1().ClusterRoles().Get(s.ctx, metricsReaderRole, metav1.GetOptions{}); err != nil {
		t.Fatalf("ClusterRole %s from manifests/base: %v", metricsReaderRole, err)
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(s.ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := env.Client.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete ClusterRoleBinding: %v", err)
		}
	})

	// The endpoint serves a self-signed certificate (no metrics cert dir).
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // a test against loopback
	}}
	defer c.CloseIdleConnections()
	get := func(token string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(s.ctx, 15*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}

	// The secure metrics server comes up after /readyz (it sets up its
	// authentication first): wait for it to accept TLS.
	s.eventually("metrics endpoint serving TLS", 30*time.Second, func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", port),
			&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a probe against loopback
		if err != nil {
			return err
		}
		return conn.Close()
	})

	if code, body := get(""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401; body %.300s", code, body)
	}
	if code, body := get("not-a-token"); code != http.StatusUnauthorized || strings.Contains(body, "runner_guard_") {
		t.Errorf("a token the API server does not know: %d, want 401; body %.300s", code, body)
	}
	if code, body := get(unbound); code != http.StatusForbidden {
		t.Errorf("token of a ServiceAccount without %s: %d, want 403; body %.300s", metricsReaderRole, code, body)
	}
	// RBAC takes effect in the API server's authorizer cache at once, but
	// allow a few seconds for the binding to be seen.
	var body string
	s.eventually("token of a ServiceAccount bound to "+metricsReaderRole+" answered 200", 20*time.Second, func() error {
		var code int
		if code, body = get(bound); code != http.StatusOK {
			return fmt.Errorf("%d, want 200; body %.300s", code, body)
		}
		return nil
	})
	if !strings.Contains(body, "runner_guard_decisions_total") {
		t.Errorf("metrics lack runner_guard_decisions_total:\n%.2000s", body)
	}

	// Plain HTTP on the same port is not served.
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer plain.CloseIdleConnections()
	if resp, err := plain.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(b), "runner_guard_") {
			t.Errorf("metrics served over plain HTTP with --metrics-secure")
		}
	}
}

// serviceAccountToken creates a ServiceAccount in the scenario's namespace and
// returns a token for it.
func serviceAccountToken(t *testing.T, s *scenario, name string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}}
	if _, err := env.Client.CoreV1().ServiceAccounts(s.ns).Create(s.ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	exp := int64(3600)
	tok, err := env.Client.CoreV1().ServiceAccounts(s.ns).CreateToken(s.ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for ServiceAccount %s: %v", name, err)
	}
	return tok.Status.Token
}
