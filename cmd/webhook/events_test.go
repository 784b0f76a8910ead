package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEventsSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, empty := write("good", "s3cret\n"), write("empty", "\n")
	cases := map[string]struct {
		flags   eventsFlags
		want    string
		wantErr string
	}{
		"off":                         {},
		"secret without the endpoint": {flags: eventsFlags{secretFile: good}, want: "s3cret"},
		"endpoint with its secret":    {flags: eventsFlags{bindAddress: ":8082", secretFile: good}, want: "s3cret"},
		"endpoint without a secret":   {flags: eventsFlags{bindAddress: ":8082"}, wantErr: "--github-webhook-secret-file: required with --events-bind-address"},
		"empty secret":                {flags: eventsFlags{bindAddress: ":8082", secretFile: empty}, wantErr: "--github-webhook-secret-file: " + empty + " is empty"},
		"missing file":                {flags: eventsFlags{bindAddress: ":8082", secretFile: filepath.Join(dir, "nope")}, wantErr: "--github-webhook-secret-file: open"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := c.flags.secret()
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("secret %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestEventsFlagsParse(t *testing.T) {
	o, err := parseFlags([]string{"--events-bind-address=:8082", "--github-webhook-secret-file=/s"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.events.bindAddress != ":8082" || o.events.secretFile != "/s" {
		t.Fatalf("events flags %+v", o.events)
	}
}
