package process_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/process"
)

// bin is the webhook binary under test: $RUNNER_GUARD_BIN or a fresh build.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runner-guard-process-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if bin, err = process.Binary(dir); err != nil {
		fmt.Fprintln(os.Stderr, "process tests:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	// Every test must leave no goroutine behind: servers closed, clients'
	// idle connections closed, child processes waited for.
	goleak.VerifyTestMain(m,
		goleak.Cleanup(func(int) { os.RemoveAll(dir) }),
		// klog (pulled in by client-go) runs a flush daemon for the whole process.
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

const token = "process-test-token"

// env is one running webhook with its fake GitHub.
type env struct {
	github *ghfake.Fake
	ghURL  string
	proc   *process.Proc
}

// newFiles writes certificates, kubeconfig and token file into a temp dir.
func newFiles(t *testing.T) *process.Files {
	t.Helper()
	f, err := process.NewFiles(t.TempDir(), token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// newCA makes a CA named commonName, for certificates the test issues itself.
func newCA(t *testing.T, commonName string) *certs.CA {
	t.Helper()
	ca, err := certs.NewCA(certs.CAOptions{CommonName: commonName})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// newFake serves a fake GitHub (token auth on, rate limit out of the way) until the test ends.
func newFake(t *testing.T) (*ghfake.Fake, string) {
	t.Helper()
	gh := ghfake.New()
	gh.SetToken(token)
	gh.SetRateLimit(1_000_000, 1_000_000, time.Time{})
	srv := newHTTPServer(gh)
	t.Cleanup(srv.Close)
	return gh, srv.URL + "/"
}

// start runs the binary against a new fake GitHub with extra flags; it is
// stopped (SIGTERM, exit 0 expected) when the test ends.
func start(t *testing.T, args ...string) *env {
	t.Helper()
	gh, url := newFake(t)
	return startWith(t, gh, url, newFiles(t), args...)
}

func startWith(t *testing.T, gh *ghfake.Fake, url string, files *process.Files, args ...string) *env {
	t.Helper()
	p, err := process.Start(process.Config{Bin: bin, Files: files, GitHubURL: url, Args: args}, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		code, err := p.Stop(30 * time.Second)
		if err != nil || code != 0 {
			t.Errorf("webhook stop: exit %d, %v\n%s", code, err, tail(p.Log(), 4000))
		}
	})
	return &env{github: gh, ghURL: url, proc: p}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
