package explain

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMainUsage covers what Main answers before it reaches a cluster.
func TestMainUsage(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		"help":                 {args: []string{"--help"}, wantCode: 0, wantErr: "Usage: rg " + Usage},
		"no pod":               {args: []string{"-n", "ns"}, wantCode: 2, wantErr: "name one pod"},
		"two pods":             {args: []string{"a", "b"}, wantCode: 2, wantErr: "name one pod"},
		"unknown output":       {args: []string{"pod", "-o", "yaml"}, wantCode: 2, wantErr: `--output "yaml": want text or json`},
		"unknown flag":         {args: []string{"pod", "--bogus"}, wantCode: 2, wantErr: "unknown flag: --bogus"},
		"missing config file":  {args: []string{"pod", "--config", "/nonexistent/config.yaml"}, wantCode: 2, wantErr: "--config:"},
		"kubeconfig no server": {args: []string{"pod", "--kubeconfig", kubeconfig}, wantCode: 2, wantErr: "kubeconfig:"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(context.Background(), "rg", tc.args, &out, &errb)
			if code != tc.wantCode || !strings.Contains(errb.String(), tc.wantErr) {
				t.Errorf("Main(%v) = %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.wantCode, tc.wantErr)
			}
		})
	}
}
