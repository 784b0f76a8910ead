package webhook

import (
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
)

func TestScopeBindings(t *testing.T) {
	repo := func(s string) ghclient.Scope { sc, _ := ghclient.RepoScope(s); return sc }
	ent := func(s string) ghclient.Scope { sc, _ := ghclient.EnterpriseScope(s); return sc }
	bindings := compileBindings([]ScopeBinding{
		{Name: "team-a", Namespaces: []string{"team-a", "team-a-*"}, Scopes: []string{"org:acme", "repo:other/app-*"}},
		{Namespaces: []string{"platform"}, RunnerPods: []string{"legacy"}, Scopes: []string{"enterprise:big"}},
		{Name: "catch-all", Namespaces: []string{"shared-*"}, Scopes: []string{"org:*"}},
		{Name: "shadowed", Namespaces: []string{"shared-x"}, Scopes: []string{"enterprise:*"}},
	})
	tests := map[string]struct {
		namespace, spec string
		scope           ghclient.Scope
		wantSays        []string // "" = bound
	}{
		"org in its namespace":                  {"team-a", "scale-set", fixture.Org("acme"), nil},
		"org letter case is GitHub's":           {"team-a", "scale-set", fixture.Org("ACME"), nil},
		"namespace glob":                        {"team-a-ci", "scale-set", fixture.Org("acme"), nil},
		"org covers its repositories":           {"team-a", "legacy", repo("acme/web"), nil},
		"repository glob":                       {"team-a", "legacy", repo("other/app-1"), nil},
		"another organisation":                  {"team-a", "legacy", fixture.Org("other-org"), []string{`org "other-org" is outside`, `scope binding "team-a" allows org:acme, repo:other/app-*`}},
		"a repository outside the glob":         {"team-a", "legacy", repo("other/web"), []string{"outside"}},
		"a repo binding does not cover its org": {"team-a", "legacy", fixture.Org("other"), []string{"outside"}},
		"an org does not cover the enterprise":  {"team-a", "legacy", ent("acme"), []string{"outside"}},
		"an unbound namespace":                  {"team-b", "legacy", fixture.Org("acme"), []string{`no scopeBindings entry covers namespace "team-b"`}},
		"runner pod spec limits the binding":    {"platform", "scale-set", ent("big"), []string{"no scopeBindings entry"}},
		"runner pod spec of the binding":        {"platform", "legacy", ent("big"), nil},
		"a later binding is a default":          {"shared-y", "legacy", fixture.Org("anything"), nil},
		"the first binding that covers decides": {"shared-x", "legacy", ent("big"), []string{`"catch-all" allows org:*`}},
		"unnamed binding named by its index":    {"platform", "legacy", ent("small"), []string{"scopeBindings[1] allows enterprise:big"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := bindings.scopeNotBound(tc.namespace, tc.spec, tc.scope)
			if (got == "") != (tc.wantSays == nil) {
				t.Fatalf("scopeNotBound = %q, want bound: %v", got, tc.wantSays == nil)
			}
			for _, s := range tc.wantSays {
				if !strings.Contains(got, s) {
					t.Errorf("scopeNotBound = %q, want it to say %q", got, s)
				}
			}
		})
	}
	if compileBindings(nil).scopeNotBound("any", "legacy", fixture.Org("any")) != "" {
		t.Error("no bindings must leave every scope open")
	}
}

func TestScopeBindingValidation(t *testing.T) {
	tests := map[string]struct {
		binding ScopeBinding
		wantErr []string
	}{
		"valid":                   {ScopeBinding{Namespaces: []string{"a"}, Scopes: []string{"org:acme", "repository:acme/x", "enterprise:*"}}, nil},
		"no namespaces":           {ScopeBinding{Scopes: []string{"org:a"}}, []string{"scopeBindings[0].namespaces: Required"}},
		"no scopes":               {ScopeBinding{Namespaces: []string{"a"}}, []string{"scopeBindings[0].scopes: Required"}},
		"unknown kind":            {ScopeBinding{Namespaces: []string{"a"}, Scopes: []string{"team:a"}}, []string{`scopeBindings[0].scopes[0]: Invalid value: "team:a"`}},
		"no kind":                 {ScopeBinding{Namespaces: []string{"a"}, Scopes: []string{"acme"}}, []string{"want enterprise:SLUG"}},
		"repo without owner":      {ScopeBinding{Namespaces: []string{"a"}, Scopes: []string{"repo:app"}}, []string{"want OWNER/REPO"}},
		"org with a slash":        {ScopeBinding{Namespaces: []string{"a"}, Scopes: []string{"org:a/b"}}, []string{"must not contain '/'"}},
		"bad glob":                {ScopeBinding{Namespaces: []string{"a["}, Scopes: []string{"org:[a"}}, []string{"namespaces[0]", "scopes[0]"}},
		"unknown runner pod spec": {ScopeBinding{Namespaces: []string{"a"}, RunnerPods: []string{"nope"}, Scopes: []string{"org:a"}}, []string{`runnerPods[0]: Not found: "nope"`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := Config{ScopeBindings: []ScopeBinding{tc.binding}}
			err := cfg.Complete()
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Complete: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Complete accepted %+v", tc.binding)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}
