package ghclient_test

import (
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/ghclient"
)

func TestAPIBaseForConfigURL(t *testing.T) {
	tests := map[string]struct {
		url       string
		wantBase  string
		wantScope ghclient.Scope
		wantErr   string
	}{
		"github.com org":         {url: "https://github.com/acme", wantBase: "https://api.github.com/", wantScope: org},
		"github.com repo":        {url: "https://github.com/acme/app/", wantBase: "https://api.github.com/", wantScope: repo},
		"www.github.com":         {url: "https://www.github.com/acme", wantBase: "https://api.github.com/", wantScope: org},
		"github.com enterprise":  {url: "https://github.com/enterprises/bigcorp", wantBase: "https://api.github.com/", wantScope: ent},
		"GHE.com":                {url: "https://octo.ghe.com/acme", wantBase: "https://api.octo.ghe.com/", wantScope: org},
		"GHES host":              {url: "https://ghe.example.com/acme/app", wantBase: "https://ghe.example.com/api/v3/", wantScope: repo},
		"GHES with port":         {url: "https://ghe.example.com:8443/enterprises/bigcorp", wantBase: "https://ghe.example.com:8443/api/v3/", wantScope: ent},
		"GHES keeps http":        {url: "http://ghe.internal/acme", wantBase: "http://ghe.internal/api/v3/", wantScope: org},
		"upper-case host":        {url: "https://GitHub.com/acme", wantBase: "https://api.github.com/", wantScope: org},
		"no path":                {url: "https://github.com/", wantErr: "no organization"},
		"enterprises alone":      {url: "https://github.com/enterprises", wantErr: "no enterprise"},
		"too deep":               {url: "https://github.com/acme/app/tree", wantErr: "3 segments"},
		"empty segment":          {url: "https://github.com/acme//app", wantErr: "3 segments"},
		"no scheme":              {url: "github.com/acme", wantErr: "want https://HOST/ORG"},
		"ftp":                    {url: "ftp://github.com/acme", wantErr: "want https://HOST/ORG"},
		"query":                  {url: "https://github.com/acme?x=1", wantErr: "query"},
		"user info, redacted":    {url: "https://bob:hunter2@github.com/acme", wantErr: `"https://github.com/acme" must not carry user info`},
		"unparsable, redacted":   {url: "https://bob:hunter2@[::1/acme", wantErr: `"https://[::1/acme" is not a URL`},
		"empty":                  {url: "", wantErr: "want https://HOST/ORG"},
		"invalid org characters": {url: "https://github.com/a%20b", wantErr: "invalid org"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			base, scope, err := ghclient.APIBaseForConfigURL(tc.url)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("error %q echoes the password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if base != tc.wantBase || scope != tc.wantScope {
				t.Errorf("= %q, %v; want %q, %v", base, scope, tc.wantBase, tc.wantScope)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	tests := map[string]string{
		"https://bob:pw@ghe.example.com/api/v3": "https://ghe.example.com/api/v3",
		"https://tok@ghe.example.com/":          "https://ghe.example.com/",
		"https://bob:pw@[::1/x":                 "https://[::1/x",
		"https://ghe.example.com/a@b":           "https://ghe.example.com/a@b",
		"not a url":                             "not a url",
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			if got := ghclient.RedactURL(in); got != want {
				t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
			}
		})
	}
}
