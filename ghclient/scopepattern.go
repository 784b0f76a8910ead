package ghclient

import (
	"fmt"
	"path"
	"strings"
)

// scopeKindNamed reads the prefix of a binding's scope pattern.
func scopeKindNamed(s string) (ScopeKind, bool) {
	switch strings.ToLower(s) {
	case "enterprise":
		return ScopeEnterprise, true
	case "org", "organization":
		return ScopeOrg, true
	case "repo", "repository":
		return ScopeRepo, true
	}
	return "", false
}

// ScopePattern is one parsed "KIND:GLOB": a scope binding's, or a webhook
// secret's scopes.
type ScopePattern struct {
	kind ScopeKind
	glob string // lower case
}

// ParseScopePattern reads "org:acme", "repo:acme/app-*" or "enterprise:big".
func ParseScopePattern(s string) (ScopePattern, error) {
	kind, glob, ok := strings.Cut(strings.TrimSpace(s), ":")
	k, known := scopeKindNamed(kind)
	switch {
	case !ok || !known:
		return ScopePattern{}, fmt.Errorf("want enterprise:SLUG, org:ORG or repo:OWNER/REPO (each part may be a glob)")
	case glob == "":
		return ScopePattern{}, fmt.Errorf("empty %s pattern", kind)
	case strings.ContainsAny(glob, " \t\r\n?#%"):
		return ScopePattern{}, fmt.Errorf("invalid character in %q", glob)
	case k == ScopeRepo && strings.Count(glob, "/") != 1:
		return ScopePattern{}, fmt.Errorf("repo pattern %q: want OWNER/REPO", glob)
	case k != ScopeRepo && strings.Contains(glob, "/"):
		return ScopePattern{}, fmt.Errorf("%s pattern %q must not contain '/'", kind, glob)
	}
	if _, err := path.Match(glob, ""); err != nil {
		return ScopePattern{}, fmt.Errorf("pattern %q: %w", glob, err)
	}
	return ScopePattern{kind: k, glob: strings.ToLower(glob)}, nil
}

// Matches reports whether the pattern covers scope. An organization pattern
// covers that organization's repositories too: the same credentials reach them.
func (p ScopePattern) Matches(s Scope) bool {
	name := strings.ToLower(s.Name)
	if p.kind == s.Kind {
		ok, _ := path.Match(p.glob, name)
		return ok
	}
	if p.kind == ScopeOrg && s.Kind == ScopeRepo {
		owner, _, _ := strings.Cut(name, "/")
		ok, _ := path.Match(p.glob, owner)
		return ok
	}
	return false
}
