package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

// An App installation without actions: write stops start-up with re-runs
// on, naming the flag; with re-runs off, or a token whose rights cannot be
// read, start-up goes on.
func TestRerunRightAtStart(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	tests := map[string]struct {
		actions string // "": a token
		scopes  []string
		enabled bool
		wantErr string
	}{
		"classic token without repo": {scopes: []string{"admin:org"}, enabled: true, wantErr: "--rerun-lost-jobs: the classic token's scopes"},
		"classic token with repo":    {scopes: []string{"repo"}, enabled: true},
		"app without actions write":  {actions: "read", enabled: true, wantErr: "--rerun-lost-jobs: the GitHub App installation"},
		"app with actions write":     {actions: "write", enabled: true},
		"re-runs off":                {actions: "read"},
		"fine-grained token":         {enabled: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := ghfake.New()
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			cfg := ghclient.Config{BaseURL: srv.URL, AllowHTTP: true, Token: "tok"}
			if tc.actions != "" {
				f.AddApp(42, &key.PublicKey)
				inst := f.AddInstallation(42, "acme")
				f.SetInstallationPermissions(inst, map[string]string{"actions": tc.actions})
				cfg.Token, cfg.App = "", &ghclient.AppCredentials{AppID: 42, InstallationID: inst, PrivateKeyPEM: keyPEM}
			} else {
				f.SetToken("tok")
				f.SetTokenRights(ghfake.TokenRights{Scopes: tc.scopes})
			}
			c, err := ghclient.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			flags := rerunFlags{enabled: tc.enabled, maxPerRun: 3}
			err = flags.checkRight(context.Background(), c, logr.Discard())
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("start-up error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("start-up error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestRerunFlags(t *testing.T) {
	o, err := parseFlags([]string{"--rerun-lost-jobs", "--rerun-max-per-run=0"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if !o.rerun.enabled {
		t.Error("--rerun-lost-jobs not parsed")
	}
	if err := o.rerun.check(); err == nil || !strings.Contains(err.Error(), "--rerun-max-per-run") {
		t.Errorf("check = %v, want an error naming --rerun-max-per-run", err)
	}
	if o, _ = parseFlags(nil, &strings.Builder{}); o.rerun.enabled || o.rerun.maxPerRun != 3 || o.rerun.check() != nil {
		t.Errorf("defaults: %+v", o.rerun)
	}
}

func TestRerunExcludeFlag(t *testing.T) {
	tests := map[string]struct {
		value   string
		entries int
		wantErr string
	}{
		"none":                       {},
		"repositories and workflows": {value: "acme/legacy-*, .github/workflows/nightly.yml,acme/app:.github/workflows/release.yml", entries: 3},
		"a bare name":                {value: "acme", wantErr: "--rerun-exclude"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := parseFlags([]string{"--rerun-exclude=" + tc.value}, &strings.Builder{})
			if err != nil {
				t.Fatal(err)
			}
			err = o.rerun.check()
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("check = %v, want an error naming %s", err, tc.wantErr)
			case tc.wantErr == "" && (err != nil || len(o.rerun.excluded) != tc.entries):
				t.Errorf("check = %v, %d entries; want %d", err, len(o.rerun.excluded), tc.entries)
			}
		})
	}
}
