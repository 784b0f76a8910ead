package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/test/fixture"
)

// TestEventsOnlyNeedsItsFlags: --events-only fails at start, in one line
// naming the flag, without the endpoint's address or a webhook secret; it
// needs no GitHub credentials and no serving certificate to get there.
func TestEventsOnlyNeedsItsFlags(t *testing.T) {
	dir := t.TempDir()
	secret := fixture.WriteFile(t, dir, "secret", "s3cret\n")
	cases := map[string]struct {
		args []string
		want string
	}{
		"no address":        {[]string{"--github-webhook-secret-file=" + secret}, "--events-bind-address: required with --events-only"},
		"no secret":         {[]string{"--events-bind-address=127.0.0.1:0"}, "--github-webhook-secrets (or --github-webhook-secret-file): required"},
		"unreadable secret": {[]string{"--events-bind-address=127.0.0.1:0", "--github-webhook-secret-file=" + filepath.Join(dir, "nope")}, "--github-webhook-secret-file:"},
		"unreadable config": {[]string{"--events-bind-address=127.0.0.1:0", "--github-webhook-secret-file=" + secret, "--config=" + filepath.Join(dir, "nope")}, "--config:"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(context.Background(), append([]string{"--events-only", "--cert-dir=" + dir}, c.args...), io.Discard, &stderr, func(string) string { return "" })
			out := stderr.String()
			if code != 1 || !strings.Contains(out, c.want) || strings.Count(out, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want 1 and one line containing %q", code, out, c.want)
			}
		})
	}
}

// TestListening: the events readiness check passes once the address
// accepts connections, whatever interface it is bound to.
func TestListening(t *testing.T) {
	srv := httptest.NewServer(nil)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	req := httptest.NewRequest("GET", "/readyz", nil)
	for _, addr := range []string{srv.Listener.Addr().String(), ":" + port, "0.0.0.0:" + port} {
		if err := listening(addr)(req); err != nil {
			t.Errorf("listening(%q): %v", addr, err)
		}
	}
	srv.Close()
	if err := listening(":" + port)(req); err == nil {
		t.Error("listening on a closed port passed")
	}
	if err := listening("no-port")(req); err == nil {
		t.Error("a malformed address passed")
	}
}
