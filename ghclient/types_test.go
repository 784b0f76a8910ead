package ghclient

import (
	"strings"
	"testing"
)

func TestScopeConstructors(t *testing.T) {
	tests := map[string]struct {
		build   func(string) (Scope, error)
		in      string
		want    Scope
		wantErr string
	}{
		"org":                     {build: OrgScope, in: "acme", want: Scope{Kind: ScopeOrg, Name: "acme"}},
		"org trimmed":             {build: OrgScope, in: " acme\n", want: Scope{Kind: ScopeOrg, Name: "acme"}},
		"org empty":               {build: OrgScope, in: "  ", wantErr: "empty org name"},
		"org with slash":          {build: OrgScope, in: "acme/app", wantErr: "must not contain '/'"},
		"org with query chars":    {build: OrgScope, in: "acme?x", wantErr: "invalid org name"},
		"enterprise":              {build: EnterpriseScope, in: "bigcorp", want: Scope{Kind: ScopeEnterprise, Name: "bigcorp"}},
		"enterprise with slash":   {build: EnterpriseScope, in: "a/b", wantErr: "must not contain '/'"},
		"repo":                    {build: RepoScope, in: "acme/app", want: Scope{Kind: ScopeRepo, Name: "acme/app"}},
		"repo without owner":      {build: RepoScope, in: "app", wantErr: "want owner/repo"},
		"repo with leading slash": {build: RepoScope, in: "/app", wantErr: "want owner/repo"},
		"repo with two slashes":   {build: RepoScope, in: "a/b/c", wantErr: "want owner/repo"},
		"repo with space":         {build: RepoScope, in: "acme/my app", wantErr: "invalid repo name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.build(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestScopeAndOutcomeStrings(t *testing.T) {
	if got := (Scope{Kind: ScopeRepo, Name: "acme/app"}).String(); got != `repo "acme/app"` {
		t.Errorf("Scope.String() = %s", got)
	}
	for o, want := range map[Outcome]string{Removed: "removed", NotFound: "not-found", Busy: "busy", 0: "outcome(0)"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), got, want)
		}
	}
}
