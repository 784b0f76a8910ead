package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/process"
)

// Scenario: mutual TLS between the API server and the webhook. A second
// environment of its own runs the webhook with --client-ca-file and the API
// server with an admission configuration presenting a client certificate
// that CA signed. Deletes through the API server are decided as usual; a
// caller without a certificate is refused in the TLS handshake and reaches
// neither the webhook's handler nor GitHub.
func TestMTLS(t *testing.T) {
	startMTLSEnv(t)

	t.Run("idle runner unregistered", func(t *testing.T) {
		s := newScenario(t, "mtls-idle")
		s.runnerPod("runner-idle", false, true)
		if _, stderr, err := s.kubectl("delete", "pod", "runner-idle", "--wait=false"); err != nil {
			t.Fatalf("kubectl delete through mutual TLS failed: %v: %s", err, stderr)
		}
		s.requireDeleting("runner-idle")
		if s.registered("runner-idle") {
			t.Error("runner still registered on GitHub")
		}
		if err := onlyTheUnregister(s.github()); err != nil {
			t.Error(err)
		}
	})

	t.Run("busy runner refused", func(t *testing.T) {
		s := newScenario(t, "mtls-busy")
		s.runnerPod("runner-busy", true, true)
		_, stderr, err := s.kubectl("delete", "pod", "runner-busy", "--wait=false")
		if err == nil {
			t.Fatal("kubectl delete of a busy runner's pod succeeded")
		}
		if !strings.Contains(stderr, "runner busy") {
			t.Errorf("kubectl stderr %q lacks %q", stderr, "runner busy")
		}
		s.requireAlive("runner-busy")
		if !s.registered("runner-busy") {
			t.Error("busy runner was unregistered on GitHub")
		}
	})

	t.Run("no client certificate refused", func(t *testing.T) {
		s := newScenario(t, "mtls-direct")
		// Idle: a review the webhook admitted would unregister the runner.
		pod := s.runnerPod("runner-direct", false, true)
		body, err := process.DeleteReviewJSON(process.Review{Pod: pod})
		if err != nil {
			t.Fatal(err)
		}
		ca, err := env.WebhookCA()
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(ca) {
			t.Fatal("webhook CA: no certificate")
		}
		// postWithout posts the review over a TLS connection of its own, without
		// a client certificate. Its error is what the client read: the server's
		// alert. An http.Client would often report its own side instead (a write
		// to, or a close of, the connection the alert ended).
		postWithout := func(addr string, maxVersion uint16) error {
			cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, MaxVersion: maxVersion}
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
			if err != nil {
				return err // TLS 1.2: the server's alert ends the handshake
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second)) // a bound on a hang, not a timing assertion
			req, err := http.NewRequest(http.MethodPost, env.WebhookURL(), bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Close = true
			// TLS 1.3: the client's handshake is done before the server has
			// looked at the (missing) certificate, so the request may be written,
			// or fail to be, before the alert arrives; the alert is read either way.
			werr := req.Write(conn)
			resp, rerr := http.ReadResponse(bufio.NewReader(conn), req)
			if rerr != nil {
				if werr != nil {
					return fmt.Errorf("%w (writing the request: %v)", rerr, werr)
				}
				return rerr
			}
			resp.Body.Close()
			return fmt.Errorf("answered %s, want no answer", resp.Status)
		}

		env.GitHub.ResetLog()
		// TLS 1.3 (what the API server speaks) has an alert that names the
		// missing certificate; with TLS 1.2 the server's alert is a generic one.
		// Each replica is asked itself, not only through the address the API
		// server calls (the harness's proxy checks certificates too).
		for _, addr := range append([]string{env.WebhookAddr()}, env.ReplicaAddrs()...) {
			for _, v := range []struct {
				name string
				max  uint16
				want string
			}{
				{"TLS 1.3", tls.VersionTLS13, "remote error: tls: certificate required"},
				{"TLS 1.2", tls.VersionTLS12, "remote error: tls: "},
			} {
				err := postWithout(addr, v.max)
				if err == nil || !strings.Contains(err.Error(), v.want) {
					t.Errorf("%s POST to %s without a client certificate: %v; want a TLS refusal %q", v.name, addr, err, v.want)
				} else {
					t.Logf("%s refused by %s: %v", v.name, addr, err)
				}
			}
		}
		if got := env.GitHub.Requests(); len(got) != 0 {
			t.Errorf("GitHub saw %+v after reviews without a client certificate, want nothing", got)
		}
		s.requireAlive("runner-direct")
		if !s.registered("runner-direct") {
			t.Error("runner unregistered by a review without a client certificate")
		}

		// Control: the same review with the API server's certificate is
		// answered and acted on, so the refusal above was the certificate's.
		cert, err := env.APIServerClientCertificate()
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}},
		}}
		defer c.CloseIdleConnections()
		resp, err := process.Send(s.ctx, c, env.WebhookURL(), body)
		if err != nil {
			t.Fatalf("POST with the API server's client certificate: %v", err)
		}
		if !resp.Allowed {
			t.Errorf("review of an idle runner's delete with the client certificate: denied (%v), want allowed", resp.Result)
		}
		if s.registered("runner-direct") {
			t.Error("the review with the client certificate did not unregister the idle runner")
		}
		if err := onlyTheUnregister(s.github()); err != nil {
			t.Errorf("after the review with the client certificate: %v", err)
		}
	})
}

// onlyTheUnregister fails unless GitHub changed one thing: one DELETE,
// answered 204. Look-ups (GET) before it are the webhook's business.
func onlyTheUnregister(reqs []ghfake.Request) error {
	var deletes []ghfake.Request
	for _, r := range reqs {
		switch r.Method {
		case http.MethodGet:
		case http.MethodDelete:
			deletes = append(deletes, r)
		default:
			return fmt.Errorf("GitHub saw %s %s; want only the unregister and look-ups", r.Method, r.Path)
		}
	}
	if len(deletes) != 1 || deletes[0].Status != http.StatusNoContent {
		return fmt.Errorf("GitHub saw DELETEs %+v; want exactly one (the unregister) answered 204", deletes)
	}
	return nil
}

// startMTLSEnv starts an environment with framework.Options.ClientCertAuth
// (its own etcd, API server, controller manager, webhook and fake GitHub) and
// makes it the env the scenario helpers use until t ends; the shared
// environment is left as it was. t must not be parallel: while it runs, env is
// this environment for every test.
func startMTLSEnv(t *testing.T) {
	t.Helper()
	if !env.Local() {
		t.Skip("needs an API server started with an admission configuration; E2E_CLUSTER=external uses an existing cluster")
	}
	opts, err := framework.FromEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	opts.ClientCertAuth = true
	opts.Replicas = webhookReplicas
	opts.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	e, err := framework.Start(ctx, opts)
	if err != nil {
		t.Fatalf("mutual-TLS environment: %v", err)
	}
	t.Logf("mutual-TLS environment up in %s (logs in %s)", time.Since(start).Round(time.Millisecond), e.Dir)
	shared := env
	env = e
	t.Cleanup(func() {
		env = shared
		e.Stop()
		if t.Failed() || os.Getenv("E2E_KEEP_LOGS") != "" {
			t.Logf("mutual-TLS environment logs kept in %s", e.Dir)
			return
		}
		os.RemoveAll(e.Dir)
	})
}
