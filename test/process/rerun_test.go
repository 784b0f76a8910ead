package process_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

// With --rerun-lost-jobs, a GitHub App installation that may not write
// actions stops start-up with one line naming the flag and what to grant.
func TestRerunNeedsActionsWriteAtStartup(t *testing.T) {
	files := newFiles(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "app.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	f := ghfake.New()
	f.AddApp(42, &key.PublicKey)
	inst := f.AddInstallation(42, "acme")
	f.SetInstallationPermissions(inst, map[string]string{"actions": "read", "administration": "write"})
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)

	code, out := runOnce(t, nil, "--kubeconfig="+files.Kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0",
		"--webhook-host=127.0.0.1", "--cert-dir="+files.CertDir, "--github-url="+srv.URL+"/", "--github-allow-http",
		"--github-app-id=42", "--github-app-installation-id="+strconv.FormatInt(inst, 10), "--github-app-private-key-file="+keyFile,
		"--rerun-lost-jobs")
	if code == 0 {
		t.Fatalf("exit 0, want non-zero; output:\n%s", out)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	for _, w := range []string{"--rerun-lost-jobs", "actions: write", strconv.FormatInt(inst, 10)} {
		if !strings.Contains(last, w) {
			t.Errorf("message %q does not contain %q", last, w)
		}
	}
	if n := f.CountMatching(ghfake.RequestMatch{Op: ghfake.OpGetInstallation}); n != 1 {
		t.Errorf("%d installation reads, want 1", n)
	}
}
