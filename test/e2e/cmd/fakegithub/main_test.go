package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// The command the kind e2e deploys: it must serve the GitHub API behind the
// token and the /_fake/ controls beside it, and stop on SIGTERM.
func TestFakeGitHubCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fakegithub")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("ghp_kind\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--listen="+addr, "--token-file="+tokenFile)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/_fake/requests")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fakegithub not serving: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	control := &framework.RemoteGitHub{BaseURL: base, Fail: func(err error) { t.Fatal(err) }}
	org := fixture.Org("acme")
	id := control.AddRunner(org, "r1")
	client, err := ghclient.New(ghclient.Config{BaseURL: base + "/", AllowHTTP: true, Token: "ghp_kind"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := client.Unregister(context.Background(), org, "r1", ghclient.IDHint{ID: id, Trusted: true}); err != nil || out != ghclient.Removed {
		t.Fatalf("Unregister with the right token = %v, %v; want removed", out, err)
	}
	wrong, _ := ghclient.New(ghclient.Config{BaseURL: base + "/", AllowHTTP: true, Token: "ghp_wrong"})
	if _, err := wrong.Unregister(context.Background(), org, "r2", ghclient.IDHint{}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("Unregister with a wrong token: %v, want a 401", err)
	}
	if got := control.Requests(); len(got) != 2 || got[0].Status != 204 || got[1].Status != 401 {
		t.Errorf("requests = %+v, want a 204 DELETE and a 401", got)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fakegithub did not stop on SIGTERM")
	}
}

func TestFakeGitHubCommandRejectsEmptyTokenFile(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "run", ".", "--token-file="+empty).CombinedOutput()
	if err == nil || !strings.Contains(string(out), fmt.Sprintf("--token-file: %s is empty", empty)) {
		t.Fatalf("err %v, output %q; want a failure naming --token-file", err, out)
	}
}
