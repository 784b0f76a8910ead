package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/runner-guard/runner-guard/test/fixture"
)

func TestEventsSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string { return fixture.WriteFile(t, dir, name, content) }
	good, empty, other := write("good", "s3cret\n"), write("empty", "\n"), write("other", "0ther")
	config := func(name, body string) string { return write(name, "secrets:\n"+body) }
	entry := func(name, file, scopes string) string {
		return fmt.Sprintf("- name: %s\n  secretFile: %s\n  scopes: [%s]\n", name, file, scopes)
	}
	two := config("two.yaml", entry("org-a", good, `"org:org-a"`)+entry("org-b", other, `"org:org-b", "repo:x/app-*"`))
	rotated := config("rotated.yaml", entry("org-a", other, `"org:org-a"`)+"  previousSecretFile: "+good+"\n  previousUntil: \"2027-01-01T00:00:00Z\"\n")
	asDir := filepath.Join(dir, "conf.d")
	if err := os.Mkdir(asDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, e := range []string{entry("org-a", good, `"org:org-a"`), entry("org-b", other, `"org:org-b"`)} {
		fixture.WriteFile(t, asDir, fmt.Sprintf("%d.yaml", i), "secrets:\n"+e)
	}
	cases := map[string]struct {
		flags   eventsFlags
		want    []string // names=values
		wantErr string
	}{
		"off":                         {},
		"secret without the endpoint": {flags: eventsFlags{secretFile: good}, want: []string{"=s3cret"}},
		"endpoint with its secret":    {flags: eventsFlags{bindAddress: ":8082", secretFile: good}, want: []string{"=s3cret"}},
		"one secret per organization": {flags: eventsFlags{bindAddress: ":8082", secretsFile: two}, want: []string{"org-a=s3cret", "org-b=0ther"}},
		"a directory of them":         {flags: eventsFlags{secretsFile: asDir}, want: []string{"org-a=s3cret", "org-b=0ther"}},
		"a rotated secret":            {flags: eventsFlags{secretsFile: rotated}, want: []string{"org-a=0ther"}},
		"endpoint without a secret":   {flags: eventsFlags{bindAddress: ":8082"}, wantErr: "--github-webhook-secrets (or --github-webhook-secret-file): required with --events-bind-address"},
		"both flags":                  {flags: eventsFlags{secretFile: good, secretsFile: two}, wantErr: "not both"},
		"empty secret":                {flags: eventsFlags{bindAddress: ":8082", secretFile: empty}, wantErr: "--github-webhook-secret-file: " + empty + " is empty"},
		"missing file":                {flags: eventsFlags{bindAddress: ":8082", secretFile: filepath.Join(dir, "nope")}, wantErr: "--github-webhook-secret-file: open"},
		"missing secrets file":        {flags: eventsFlags{secretsFile: filepath.Join(dir, "nope")}, wantErr: "--github-webhook-secrets: stat"},
		"an empty secret of many":     {flags: eventsFlags{secretsFile: config("e.yaml", entry("org-a", empty, `"org:org-a"`))}, wantErr: "secrets[0].secretFile"},
		"no scopes":                   {flags: eventsFlags{secretsFile: config("n.yaml", entry("org-a", good, ""))}, wantErr: "secrets[0].scopes: Required"},
		"a bad scope":                 {flags: eventsFlags{secretsFile: config("b.yaml", entry("org-a", good, `"team:x"`))}, wantErr: "secrets[0].scopes[0]"},
		"a name twice":                {flags: eventsFlags{secretsFile: config("d.yaml", entry("a", good, `"org:a"`)+entry("a", other, `"org:b"`))}, wantErr: "secrets[1].name: Duplicate"},
		"a bad name":                  {flags: eventsFlags{secretsFile: config("u.yaml", entry("Org_A", good, `"org:a"`))}, wantErr: "secrets[0].name: Invalid"},
		"previousUntil alone":         {flags: eventsFlags{secretsFile: config("p.yaml", entry("a", good, `"org:a"`)+"  previousUntil: \"2027-01-01T00:00:00Z\"\n")}, wantErr: "secrets[0].previousSecretFile: Required"},
		"previousUntil not a time":    {flags: eventsFlags{secretsFile: config("q.yaml", entry("a", good, `"org:a"`)+"  previousSecretFile: "+other+"\n  previousUntil: tomorrow\n")}, wantErr: "secrets[0].previousUntil: Invalid"},
		"an unknown field":            {flags: eventsFlags{secretsFile: config("f.yaml", entry("a", good, `"org:a"`)+"  secret: inline\n")}, wantErr: "unknown field"},
		"no secrets":                  {flags: eventsFlags{secretsFile: write("none.yaml", "secrets: []\n")}, wantErr: "names no secret"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := c.flags.load()
			if fixture.CheckErr(t, err, c.wantErr) {
				return
			}
			var names []string
			for _, s := range got.secrets {
				names = append(names, s.Name+"="+string(s.Value))
			}
			if !slices.Equal(names, c.want) || got.keys.Configured() != (len(c.want) > 0) {
				t.Fatalf("secrets %v (keys %v), want %v", names, got.keys.Configured(), c.want)
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
