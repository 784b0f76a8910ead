package process_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/process"
)

// runOnce runs the binary to completion and returns its exit code and output.
func runOnce(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(withoutGitHubToken(os.Environ()), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit) && ctx.Err() == nil:
		return exit.ExitCode(), out.String()
	default:
		t.Fatalf("run %v: %v\n%s", args, err, out.String())
		return 0, ""
	}
}

func withoutGitHubToken(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GITHUB_TOKEN=") {
			out = append(out, kv)
		}
	}
	return out
}

func TestStartupErrors(t *testing.T) {
	files := newFiles(t)
	dir := t.TempDir()
	write := func(name, content string) string { return fixture.WriteFile(t, dir, name, content) }
	emptyToken := write("empty-token", "  \n")
	badConfig := write("bad-config.yaml", "onError: deny\nrunnerPodz: []\n")
	appKey := write("app.pem", "not a key")
	ports := func() []string {
		// Never reached: every case fails before serving.
		return []string{"--kubeconfig=" + files.Kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--webhook-host=127.0.0.1"}
	}

	tests := map[string]struct {
		args []string
		env  []string
		want []string // the one line must contain each
	}{
		"missing credentials": {
			args: []string{"--cert-dir=" + files.CertDir},
			want: []string{"--github-token-file", "GITHUB_TOKEN", "--github-app-id"},
		},
		"token and app flags": {
			args: []string{"--cert-dir=" + files.CertDir, "--github-token-file=" + files.TokenFile,
				"--github-app-id=1", "--github-app-installation-id=2", "--github-app-private-key-file=" + appKey},
			want: []string{"--github-token-file", "--github-app-", "mutually exclusive"},
		},
		"unparsable app key": {
			// GITHUB_TOKEN is only a fallback: App flags win, and the broken key is named.
			args: []string{"--cert-dir=" + files.CertDir, "--github-app-id=1", "--github-app-installation-id=2", "--github-app-private-key-file=" + appKey},
			env:  []string{"GITHUB_TOKEN=x"},
			want: []string{"--github-app-private-key-file:"},
		},
		"unreadable token file": {
			// A directory: unreadable even for root.
			args: []string{"--cert-dir=" + files.CertDir, "--github-token-file=" + dir},
			want: []string{"--github-token-file", dir},
		},
		"missing token file": {
			args: []string{"--cert-dir=" + files.CertDir, "--github-token-file=" + filepath.Join(dir, "nope")},
			want: []string{"--github-token-file", "no such file"},
		},
		"empty token file": {
			args: []string{"--cert-dir=" + files.CertDir, "--github-token-file=" + emptyToken},
			want: []string{"--github-token-file", "empty"},
		},
		"missing cert dir": {
			args: []string{"--cert-dir=" + filepath.Join(dir, "no-certs"), "--github-token-file=" + files.TokenFile},
			want: []string{"--cert-dir", "tls.crt"},
		},
		"config with unknown field": {
			args: []string{"--cert-dir=" + files.CertDir, "--github-token-file=" + files.TokenFile, "--config=" + badConfig},
			want: []string{"--config", "runnerPodz"},
		},
		"bad on-error": {
			args: []string{"--cert-dir=" + files.CertDir, "--github-token-file=" + files.TokenFile, "--on-error=maybe"},
			want: []string{"--on-error", "maybe"},
		},
		"negative github timeout": {
			args: []string{"--cert-dir=" + files.CertDir, "--github-token-file=" + files.TokenFile, "--github-timeout=-1s"},
			want: []string{"--github-timeout"},
		},
		"bad github url": {
			args: []string{"--cert-dir=" + files.CertDir, "--github-token-file=" + files.TokenFile, "--github-url=ftp://x"},
			want: []string{"--github-url:", "ftp://x"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			code, out := runOnce(t, tc.env, append(ports(), tc.args...)...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero; output:\n%s", out)
			}
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if len(lines) != 1 {
				t.Fatalf("want exactly one line, got %d:\n%s", len(lines), out)
			}
			for _, w := range tc.want {
				if !strings.Contains(lines[0], w) {
					t.Errorf("message %q does not contain %q", lines[0], w)
				}
			}
		})
	}
}

func TestHelp(t *testing.T) {
	code, out := runOnce(t, nil, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d\n%s", code, out)
	}
	for _, flag := range []string{"--webhook-port", "--cert-dir", "--github-url", "--github-token-file", "--on-error", "--config", "--github-timeout"} {
		if !strings.Contains(out, flag) {
			t.Errorf("--help does not list %s:\n%s", flag, out)
		}
	}
}

// TestServeProbesMetricsAndSIGTERM: the binary serves without any API server,
// answers its probes, exposes both metric families after a decision, and exits
// 0 on SIGTERM.
func TestServeProbesMetricsAndSIGTERM(t *testing.T) {
	gh, url := newFake(t)
	files := newFiles(t)
	p, err := process.Start(process.Config{Bin: bin, Files: files, GitHubURL: url}, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()

	for _, probe := range []string{"/healthz", "/readyz"} {
		code, body, err := p.Get(p.HealthURL + probe)
		if err != nil || code != http.StatusOK {
			t.Errorf("GET %s: %d %q %v", probe, code, body, err)
		}
	}

	scope := acme(t)
	id := gh.AddRunner(scope, "probe-runner")
	pod := fixture.MakeLegacyRunnerPod("ci", "probe-runner").Org("acme").RunnerID(id).Running().Obj()
	resp, err := p.Delete(context.Background(), process.Review{Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Allowed {
		t.Fatalf("idle runner denied: %+v", resp.Result)
	}
	if v, ok, err := p.Metric("runner_guard_decisions_total", `operation="delete"`, `decision="allow"`, `reason="unregistered"`); err != nil || !ok || v != 1 {
		t.Errorf("runner_guard_decisions_total{delete,allow,unregistered} = %v (found %v, %v), want 1", v, ok, err)
	}
	if v, ok, err := p.Metric("runner_guard_github_requests_total", `method="DELETE"`, `code="204"`); err != nil || !ok || v != 1 {
		t.Errorf("runner_guard_github_requests_total{DELETE,204} = %v (found %v, %v), want 1", v, ok, err)
	}

	code, err := p.Stop(30 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d, %v, want 0\n%s", code, err, tail(p.Log(), 4000))
	}
	if !strings.Contains(p.Log(), `"stopped"`) {
		t.Errorf("no graceful stop logged:\n%s", tail(p.Log(), 2000))
	}
}
