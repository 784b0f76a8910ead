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
	// A later flag wins: this overrides the framework's --metrics-secure=false
	// on each replica's own metrics port.
	restartWebhook(t, "--metrics-secure=true")

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
	get := func(url, token string) (int, string) {
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

	// Every replica serves its own /metrics, each checked alike; the one
	// decision is counted by whichever replica made it.
	var decided bool
	for _, addr := range env.MetricsAddrs() {
		url := "https://" + addr + "/metrics"
		// The secure metrics server comes up after /readyz (it sets up its
		// authentication first): wait for it to accept TLS.
		s.eventually("metrics endpoint serving TLS on "+addr, 30*time.Second, func() error {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr,
				&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a probe against loopback
			if err != nil {
				return err
			}
			return conn.Close()
		})

		if code, body := get(url, ""); code != http.StatusUnauthorized {
			t.Errorf("%s, no token: %d, want 401; body %.300s", addr, code, body)
		}
		if code, body := get(url, "not-a-token"); code != http.StatusUnauthorized || strings.Contains(body, "runner_guard_") {
			t.Errorf("%s, a token the API server does not know: %d, want 401; body %.300s", addr, code, body)
		}
		if code, body := get(url, unbound); code != http.StatusForbidden {
			t.Errorf("%s, token of a ServiceAccount without %s: %d, want 403; body %.300s", addr, metricsReaderRole, code, body)
		}
		// RBAC takes effect in the API server's authorizer cache at once, but
		// allow a few seconds for the binding to be seen.
		var body string
		s.eventually("token of a ServiceAccount bound to "+metricsReaderRole+" answered 200 by "+addr, 20*time.Second, func() error {
			var code int
			if code, body = get(url, bound); code != http.StatusOK {
				return fmt.Errorf("%d, want 200; body %.300s", code, body)
			}
			return nil
		})
		if !strings.Contains(body, "runner_guard_") {
			t.Errorf("%s: metrics lack runner-guard's own:\n%.2000s", addr, body)
		}
		decided = decided || strings.Contains(body, "runner_guard_decisions_total")

		// Plain HTTP on the same port is not served.
		plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		if resp, err := plain.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), "runner_guard_") {
				t.Errorf("%s: metrics served over plain HTTP with --metrics-secure", addr)
			}
		}
		plain.CloseIdleConnections()
	}
	if !decided {
		t.Errorf("no replica's metrics have runner_guard_decisions_total after a decision")
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
