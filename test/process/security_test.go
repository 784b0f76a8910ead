package process_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

// startupArgs are the flags a start-up failure test needs besides the one
// under test; the process must fail before it serves on any of them.
func startupArgs(files *process.Files) []string {
	return []string{"--kubeconfig=" + files.Kubeconfig, "--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:0", "--webhook-host=127.0.0.1", "--webhook-port=1",
		"--cert-dir=" + files.CertDir, "--github-token-file=" + files.TokenFile}
}

// failsNaming runs the binary, which must exit non-zero with the one line of
// a start-up error ("runner-guard: ...") that contains every one of want; it
// returns the output.
func failsNaming(t *testing.T, args []string, want ...string) string {
	t.Helper()
	code, out := runOnce(t, nil, args...)
	if code == 0 {
		t.Fatalf("exit 0, want a start-up failure; output:\n%s", out)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "runner-guard: ") {
		t.Fatalf("exit %d; want one line \"runner-guard: ...\", got %d:\n%s", code, len(lines), out)
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("start-up error %q does not contain %q", lines[0], w)
		}
	}
	return out
}

// TestClientCAFile: with --client-ca-file the webhook answers only TLS clients
// whose certificate that CA signed; a CA file it cannot use stops the start.
func TestClientCAFile(t *testing.T) {
	gh, url := newFake(t)
	files := newFiles(t)
	clientCA := newCA(t, "api-server-client-ca")
	otherCA := newCA(t, "someone-else")
	caFile := fixture.WriteFile(t, files.CertDir, "client-ca.crt", string(clientCA.CertPEM()))
	e := startWith(t, gh, url, files, "--client-ca-file="+caFile)

	clientCert := func(ca *certs.CA) []tls.Certificate {
		b, err := ca.IssueClient(certs.ClientOptions{CommonName: "kube-apiserver"})
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(b.CertPEM, b.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	pod := fixture.MakePod("apps", "web").Running().Obj()
	files.API.Add(pod)
	body, err := process.DeleteReviewJSON(process.Review{Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	send := func(presented []tls.Certificate) (*admissionv1.AdmissionResponse, error) {
		cfg := &tls.Config{RootCAs: files.Pool, MinVersion: tls.VersionTLS12}
		if len(presented) > 0 {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &presented[0], nil }
		}
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: cfg}}
		defer c.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		return process.Send(ctx, c, e.proc.WebhookURL, body)
	}

	// refusal dials the webhook presenting a certificate (if any) and reads: a refused client gets a
	// TLS alert, in the handshake (TLS 1.2) or as the first thing it reads
	// once its side of the handshake is done (TLS 1.3). An accepted one reads
	// nothing until its deadline (the server waits for a request).
	refusal := func(presented []tls.Certificate, maxVersion uint16) error {
		cfg := &tls.Config{RootCAs: files.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12, MaxVersion: maxVersion}
		if len(presented) > 0 {
			// Present the certificate whatever CAs the server names as
			// acceptable (crypto/tls would otherwise send none).
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &presented[0], nil }
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", e.proc.WebhookAddr, cfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	for _, v := range []struct {
		name string
		max  uint16
	}{{"TLS 1.2", tls.VersionTLS12}, {"TLS 1.3", tls.VersionTLS13}} {
		t.Run("no client certificate, "+v.name, func(t *testing.T) {
			err := refusal(nil, v.max)
			if err == nil || !strings.Contains(err.Error(), "tls:") {
				t.Errorf("a client without a certificate got %v; want a TLS alert", err)
			}
			t.Logf("refused: %v", err)
		})
		t.Run("certificate of another CA, "+v.name, func(t *testing.T) {
			err := refusal(clientCert(otherCA), v.max)
			if err == nil || !strings.Contains(err.Error(), "tls:") || strings.Contains(err.Error(), "certificate required") {
				t.Errorf("a client whose certificate another CA signed got %v; want a TLS alert refusing the certificate", err)
			}
			t.Logf("refused: %v", err)
		})
	}
	t.Run("no answer without a valid certificate", func(t *testing.T) {
		for name, c := range map[string][]tls.Certificate{"none": nil, "other CA": clientCert(otherCA)} {
			if resp, err := send(c); err == nil {
				t.Errorf("client certificate %s: answered %+v", name, resp)
			}
		}
	})
	t.Run("certificate of the client CA", func(t *testing.T) {
		resp, err := send(clientCert(clientCA))
		if err != nil {
			t.Fatalf("client certificate of --client-ca-file refused: %v\n%s", err, tail(e.proc.Log(), 2000))
		}
		if !resp.Allowed {
			t.Errorf("delete of a pod that is not a runner refused: %+v", resp.Result)
		}
	})

	t.Run("CA file outside --cert-dir", func(t *testing.T) {
		outside := fixture.WriteFile(t, t.TempDir(), "client-ca.crt", string(clientCA.CertPEM()))
		failsNaming(t, append(startupArgs(files), "--client-ca-file="+outside), "--client-ca-file")
	})
	t.Run("CA file without PEM", func(t *testing.T) {
		junk := fixture.WriteFile(t, files.CertDir, "junk-ca.crt", "not a certificate\n")
		failsNaming(t, append(startupArgs(files), "--client-ca-file="+junk), "--client-ca-file")
	})
	t.Run("missing CA file", func(t *testing.T) {
		failsNaming(t, append(startupArgs(files), "--client-ca-file="+filepath.Join(files.CertDir, "nope.crt")), "--client-ca-file")
	})
}

// TestSIGTERMDuringGitHubCall: a SIGTERM (a rollout) that arrives while a
// decision waits on GitHub must not cut the decision short: the review gets
// its real answer and the runner is unregistered.
func TestSIGTERMDuringGitHubCall(t *testing.T) {
	const delay = 2 * time.Second
	gh := ghfake.New()
	gh.SetToken(token)
	gh.SetRateLimit(1_000_000, 1_000_000, time.Time{})
	// Tell the test when the DELETE has reached GitHub.
	deleting := make(chan struct{})
	var once sync.Once
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			once.Do(func() { close(deleting) })
		}
		gh.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	e := startWith(t, gh, srv.URL+"/", newFiles(t))

	scope := acme(t)
	const name = "sigterm-runner"
	id := gh.AddRunner(scope, name)
	gh.InjectFault(ghfake.Fault{Kind: ghfake.FaultHang, Method: http.MethodDelete, Delay: delay, Times: 1})
	pod := fixture.MakeLegacyRunnerPod("ci", name).Org("acme").RunnerID(id).Running().Obj()

	type result struct {
		resp *admissionv1.AdmissionResponse
		err  error
		at   time.Time
	}
	got := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		resp, err := e.proc.Delete(ctx, process.Review{Pod: pod})
		got <- result{resp, err, time.Now()}
	}()

	select {
	case <-deleting:
	case r := <-got:
		t.Fatalf("answered before GitHub saw the DELETE: %+v %v\n%s", r.resp, r.err, tail(e.proc.Log(), 3000))
	case <-time.After(15 * time.Second):
		t.Fatalf("GitHub never saw the DELETE\n%s", tail(e.proc.Log(), 3000))
	}
	termAt := time.Now()
	if err := e.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	var r result
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatalf("no answer 20s after SIGTERM\n%s", tail(e.proc.Log(), 3000))
	}
	if r.err != nil {
		t.Fatalf("review sent before SIGTERM failed: %v\n%s", r.err, tail(e.proc.Log(), 3000))
	}
	if r.resp.Result == nil || !r.resp.Allowed || !strings.Contains(r.resp.Result.Message, "unregistered") {
		t.Errorf("answer after SIGTERM: allowed=%v %+v; want allowed, unregistered\n%s", r.resp.Allowed, r.resp.Result, tail(e.proc.Log(), 3000))
	}
	if wait := r.at.Sub(termAt); wait < delay/2 {
		// The DELETE was still hanging when SIGTERM went out.
		t.Errorf("answer came %s after SIGTERM; GitHub's delay is %s, so SIGTERM did not land during the call", wait, delay)
	}
	if _, ok := gh.Runner(scope, name); ok {
		t.Errorf("runner %s still registered on GitHub", name)
	}
	var deletes []string
	for _, req := range gh.Requests() {
		if req.Method == http.MethodDelete {
			deletes = append(deletes, fmt.Sprintf("%s %d", req.Path, req.Status))
		}
	}
	if want := fmt.Sprintf("/orgs/acme/actions/runners/%d %d", id, http.StatusNoContent); len(deletes) != 1 || deletes[0] != want {
		t.Errorf("GitHub DELETEs %q, want [%q]", deletes, want)
	}

	select {
	case <-e.proc.Done():
		if code := e.proc.ExitCode(); code != 0 {
			t.Errorf("exit %d after SIGTERM, want 0\n%s", code, tail(e.proc.Log(), 3000))
		}
	case <-time.After(30 * time.Second):
		t.Errorf("still running 30s after SIGTERM")
	}
}

// TestTokenRotation: a rotated --github-token-file is picked up without a
// restart, by the periodic re-read rather than after a 401.
func TestTokenRotation(t *testing.T) {
	e := start(t)
	scope := acme(t)
	decide := func(name string) {
		t.Helper()
		id := e.github.AddRunner(scope, name)
		pod := fixture.MakeLegacyRunnerPod("ci", name).Org("acme").RunnerID(id).Running().Obj()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := e.proc.Delete(ctx, process.Review{Pod: pod})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if resp.Result == nil || !resp.Allowed || !strings.Contains(resp.Result.Message, "unregistered") {
			t.Fatalf("%s: allowed=%v %+v; want allowed, unregistered", name, resp.Allowed, resp.Result)
		}
		if _, ok := e.github.Runner(scope, name); ok {
			t.Fatalf("%s still registered on GitHub", name)
		}
	}
	decide("before-rotation")

	// Rotate as a Secret volume does: the new content appears at once (here
	// by rename), and the old token stops working.
	const rotated = "process-test-token-rotated-2"
	tmp := fixture.WriteFile(t, filepath.Dir(e.proc.Files.TokenFile), filepath.Base(e.proc.Files.TokenFile)+".new", rotated+"\n")
	if err := os.Rename(tmp, e.proc.Files.TokenFile); err != nil {
		t.Fatal(err)
	}
	e.github.SetToken(rotated)
	e.github.ResetLog()
	// ghclient re-checks the file every 5s (tokenRecheck).
	time.Sleep(6 * time.Second)

	decide("after-rotation")
	for _, r := range e.github.Requests() {
		if r.Status == http.StatusUnauthorized {
			t.Errorf("%s %s answered 401: the old token was still sent %s after the rotation", r.Method, r.Path, 6*time.Second)
		}
	}
	if strings.Contains(e.proc.Log(), rotated) {
		t.Errorf("the token appears in the log")
	}
}

// TestGitHubURLChecks: a plain http GitHub URL needs --github-allow-http, and
// user info in the URL is refused without ever being echoed.
func TestGitHubURLChecks(t *testing.T) {
	files := newFiles(t)
	args := startupArgs(files)

	t.Run("http without --github-allow-http", func(t *testing.T) {
		failsNaming(t, append(args, "--github-url=http://github.internal.example/api/v3/"), "--github-url", "http://github.internal.example/api/v3/")
	})
	const password = "s3cr3t-pa55word"
	for name, u := range map[string]string{
		"https with user info":                   "https://runner-guard:" + password + "@github.internal.example/api/v3/",
		"http with user info and allow-http":     "http://runner-guard:" + password + "@github.internal.example/api/v3/",
		"user info in a URL that does not parse": "https://runner-guard:" + password + "@github.internal.example:port/",
		"token as user name, no password":        "https://" + password + "@github.internal.example/api/v3/",
	} {
		t.Run(name, func(t *testing.T) {
			out := failsNaming(t, append(args, "--github-allow-http", "--github-url="+u), "--github-url")
			if strings.Contains(out, password) {
				t.Errorf("the output shows the URL's credentials:\n%s", out)
			}
		})
	}
}
