package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/certs"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook"
)

// mustParseFlags is parseFlags for a case whose flags parse.
func mustParseFlags(t *testing.T, args []string) *options {
	t.Helper()
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestGitHubConfig(t *testing.T) {
	dir := t.TempDir()
	token := fixture.WriteFile(t, dir, "token", "  ghp_abc\n")
	empty := fixture.WriteFile(t, dir, "empty", "\n")
	key := fixture.WriteFile(t, dir, "key.pem", "-----BEGIN RSA PRIVATE KEY-----\n")
	tests := map[string]struct {
		args    []string
		env     map[string]string
		wantErr string
		check   func(t *testing.T, tok string, app bool)
	}{
		"token file": {args: []string{"--github-token-file", token}, check: func(t *testing.T, tok string, app bool) {
			if tok != "ghp_abc" || app {
				t.Errorf("token %q app %v", tok, app)
			}
		}},
		"GITHUB_TOKEN": {env: map[string]string{"GITHUB_TOKEN": "ghp_env"}, check: func(t *testing.T, tok string, app bool) {
			if tok != "ghp_env" {
				t.Errorf("token %q", tok)
			}
		}},
		"token file beats GITHUB_TOKEN": {args: []string{"--github-token-file", token}, env: map[string]string{"GITHUB_TOKEN": "ghp_env"}, check: func(t *testing.T, tok string, app bool) {
			if tok != "ghp_abc" {
				t.Errorf("token %q", tok)
			}
		}},
		"app": {args: []string{"--github-app-id=1", "--github-app-installation-id=2", "--github-app-private-key-file", key}, check: func(t *testing.T, tok string, app bool) {
			if tok != "" || !app {
				t.Errorf("token %q app %v", tok, app)
			}
		}},
		"no credentials": {wantErr: "no GitHub credentials"},
		"token and app":  {args: []string{"--github-token-file", token, "--github-app-id=1"}, wantErr: "mutually exclusive"},
		"app without install: found per owner": {args: []string{"--github-app-id=1", "--github-app-private-key-file", key}, check: func(t *testing.T, tok string, app bool) {
			if !app {
				t.Error("App credentials without an installation ID were not kept")
			}
		}},
		"app without key":       {args: []string{"--github-app-id=1", "--github-app-installation-id=2"}, wantErr: "--github-app-private-key-file"},
		"app without id":        {args: []string{"--github-app-installation-id=2", "--github-app-private-key-file", key}, wantErr: "--github-app-id"},
		"unreadable key":        {args: []string{"--github-app-id=1", "--github-app-installation-id=2", "--github-app-private-key-file", filepath.Join(dir, "nope")}, wantErr: "--github-app-private-key-file: open"},
		"unreadable token file": {args: []string{"--github-token-file", filepath.Join(dir, "nope")}, wantErr: "--github-token-file: open"},
		"empty token file":      {args: []string{"--github-token-file", empty}, wantErr: "is empty"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := mustParseFlags(t, tc.args)
			cfg, err := o.githubConfig(func(k string) string { return tc.env[k] }, false)
			if fixture.CheckErr(t, err, tc.wantErr) {
				return
			}
			tok := cfg.Token
			if cfg.TokenFile != "" {
				b, err := os.ReadFile(cfg.TokenFile)
				if err != nil {
					t.Fatal(err)
				}
				tok = strings.TrimSpace(string(b))
			}
			tc.check(t, tok, cfg.App != nil)
		})
	}
}

func TestHandlerConfig(t *testing.T) {
	dir := t.TempDir()
	good := fixture.WriteFile(t, dir, "good.yaml", "onError: allow\ngithubTimeout: 3s\n")
	bad := fixture.WriteFile(t, dir, "bad.yaml", "runnerPod: []\n")
	tests := map[string]struct {
		args        []string
		env         map[string]string
		wantErr     string
		wantOnError webhook.OnErrorPolicy
		wantTimeout time.Duration
		wantExempt  []string
	}{
		"own namespace exempt": {env: map[string]string{"POD_NAMESPACE": "runner-guard-system"}, wantOnError: webhook.OnErrorDeny,
			wantTimeout: 5 * time.Second, wantExempt: []string{"kube-system", "runner-guard-system"}},
		"defaults":             {wantOnError: webhook.OnErrorDeny, wantTimeout: 5 * time.Second},
		"config file":          {args: []string{"--config", good}, wantOnError: webhook.OnErrorAllow, wantTimeout: 3 * time.Second},
		"flags override file":  {args: []string{"--config", good, "--on-error=deny", "--github-timeout=2s"}, wantOnError: webhook.OnErrorDeny, wantTimeout: 2 * time.Second},
		"bad on-error":         {args: []string{"--on-error=ignore"}, wantErr: "--on-error: invalid on-error policy"},
		"negative timeout":     {args: []string{"--github-timeout=-1s"}, wantErr: "--github-timeout"},
		"timeout over 10s":     {args: []string{"--github-timeout=30s"}, wantErr: "--github-timeout: Invalid value: \"30s\""},
		"unknown config field": {args: []string{"--config", bad}, wantErr: `unknown field "runnerPod"`},
		"missing config file":  {args: []string{"--config", filepath.Join(dir, "nope.yaml")}, wantErr: "--config: open"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := mustParseFlags(t, tc.args)
			cfg, err := o.handlerConfig(func(k string) string { return tc.env[k] })
			if fixture.CheckErr(t, err, tc.wantErr) {
				return
			}
			if tc.wantExempt == nil {
				tc.wantExempt = []string{"kube-system"}
			}
			if got := slices.Sorted(slices.Values(cfg.ExemptNamespaces)); !slices.Equal(got, tc.wantExempt) {
				t.Errorf("exempt namespaces %v, want %v", cfg.ExemptNamespaces, tc.wantExempt)
			}
			if cfg.OnError != tc.wantOnError || cfg.GitHubTimeout.Duration != tc.wantTimeout {
				t.Errorf("onError %s timeout %s, want %s %s", cfg.OnError, cfg.GitHubTimeout.Duration, tc.wantOnError, tc.wantTimeout)
			}
		})
	}
}

func TestParseFlagsErrors(t *testing.T) {
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"unknown flag":   {args: []string{"--nope"}, wantErr: "flag provided but not defined: -nope"},
		"bad port value": {args: []string{"--webhook-port=x"}, wantErr: "webhook-port"},
		"stray argument": {args: []string{"extra"}, wantErr: "unexpected arguments: extra"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(tc.args, io.Discard)
			fixture.CheckErr(t, err, tc.wantErr)
		})
	}
}

func TestCheckServing(t *testing.T) {
	tests := map[string]struct {
		port    int
		certDir string
		wantErr string
	}{
		"port out of range": {port: 70000, certDir: t.TempDir(), wantErr: "--webhook-port: 70000"},
		"no certificates":   {port: 9443, certDir: t.TempDir(), wantErr: "--cert-dir: cannot load"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := &options{webhookPort: tc.port, certDir: tc.certDir}
			fixture.CheckErr(t, o.checkServing(), tc.wantErr)
		})
	}
}

func TestGitHubConfigErrorNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	badKey := fixture.WriteFile(t, dir, "key.pem", "not a key")
	tests := map[string]struct {
		args     []string
		wantFlag string
	}{
		"bad URL":     {args: []string{"--github-url=ftp://example", "--github-token-file", fixture.WriteFile(t, dir, "t", "x")}, wantFlag: "--github-url: "},
		"bad app key": {args: []string{"--github-app-id=1", "--github-app-installation-id=2", "--github-app-private-key-file", badKey}, wantFlag: "--github-app-private-key-file: "},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := mustParseFlags(t, tc.args)
			cfg, err := o.githubConfig(func(string) string { return "" }, false)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ghclient.New(cfg)
			if err == nil {
				t.Fatal("ghclient.New accepted the config")
			}
			if got := githubConfigError(err).Error(); !strings.HasPrefix(got, tc.wantFlag) {
				t.Errorf("error %q does not start with %q", got, tc.wantFlag)
			}
		})
	}
}

func TestCABundle(t *testing.T) {
	dir := t.TempDir()
	ca, err := certs.NewCA(certs.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		file    string
		wantErr string // "" for success
	}{
		"none":           {},
		"a CA":           {file: fixture.WriteFile(t, dir, "ca.pem", string(ca.CertPEM()))},
		"missing file":   {file: filepath.Join(dir, "nope.pem"), wantErr: "--github-ca-bundle: open"},
		"no certificate": {file: fixture.WriteFile(t, dir, "bad.pem", "-----BEGIN NOTHING-----\n"), wantErr: "--github-ca-bundle: " + filepath.Join(dir, "bad.pem") + " holds no PEM certificate"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := &options{githubCABundle: tc.file}
			b, err := o.caBundle()
			if !fixture.CheckErr(t, err, tc.wantErr) && (len(b) > 0) != (tc.file != "") {
				t.Fatalf("bundle of %d bytes for file %q", len(b), tc.file)
			}
		})
	}
}
