package webhook

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/runner-guard/runner-guard/ghclient"
)

// validate checks one binding; specs names the runner pod specs seen so far.
func (b *ScopeBinding) validate(p *field.Path, specs map[string]bool) field.ErrorList {
	var errs field.ErrorList
	if len(b.Namespaces) == 0 {
		errs = append(errs, field.Required(p.Child("namespaces"), "name the namespaces (or glob patterns) this binding covers"))
	}
	for i, ns := range b.Namespaces {
		if _, err := path.Match(ns, ""); err != nil || strings.TrimSpace(ns) == "" {
			errs = append(errs, field.Invalid(p.Child("namespaces").Index(i), ns, "want a namespace name or glob pattern"))
		}
	}
	for i, rp := range b.RunnerPods {
		if !specs[rp] {
			errs = append(errs, field.NotFound(p.Child("runnerPods").Index(i), rp))
		}
	}
	if len(b.Scopes) == 0 {
		errs = append(errs, field.Required(p.Child("scopes"), `name the scopes, e.g. "org:acme" or "repo:acme/*"`))
	}
	for i, s := range b.Scopes {
		if _, err := ghclient.ParseScopePattern(s); err != nil {
			errs = append(errs, field.Invalid(p.Child("scopes").Index(i), s, err.Error()))
		}
	}
	return errs
}

// displayName is how messages name the binding.
func (b *ScopeBinding) displayName(i int) string {
	if b.Name != "" {
		return fmt.Sprintf("scope binding %q", b.Name)
	}
	return fmt.Sprintf("scopeBindings[%d]", i)
}

// appliesTo reports whether the binding covers pods of the namespace and runner pod spec.
func (b *ScopeBinding) appliesTo(namespace, spec string) bool {
	if len(b.RunnerPods) > 0 && !slices.Contains(b.RunnerPods, spec) {
		return false
	}
	for _, ns := range b.Namespaces {
		if ok, _ := path.Match(ns, namespace); ok {
			return true
		}
	}
	return false
}

// scopeBindings is the compiled form of Config.ScopeBindings.
type scopeBindings []compiledBinding

type compiledBinding struct {
	ScopeBinding
	name     string
	patterns []ghclient.ScopePattern
}

// compileBindings parses validated bindings.
func compileBindings(bs []ScopeBinding) scopeBindings {
	var out scopeBindings
	for i, b := range bs {
		cb := compiledBinding{ScopeBinding: b, name: b.displayName(i)}
		for _, s := range b.Scopes {
			if p, err := ghclient.ParseScopePattern(s); err == nil {
				cb.patterns = append(cb.patterns, p)
			}
		}
		out = append(out, cb)
	}
	return out
}

// open reports that no binding is configured: every namespace may name any scope.
func (bs scopeBindings) open() bool { return len(bs) == 0 }

// scopeNotBound says why a pod of namespace and runner pod spec may not name
// scope, naming the binding that decided; "" when it may. The first binding
// that covers the namespace and spec decides, as the first matching runner
// pod spec does, so a catch-all entry can close the list.
func (bs scopeBindings) scopeNotBound(namespace, spec string, scope ghclient.Scope) string {
	if bs.open() {
		return ""
	}
	for _, b := range bs {
		if !b.appliesTo(namespace, spec) {
			continue
		}
		for _, p := range b.patterns {
			if p.Matches(scope) {
				return ""
			}
		}
		return fmt.Sprintf("%s is outside what namespace %q may name: %s allows %s", scope, namespace, b.name, strings.Join(b.Scopes, ", "))
	}
	return fmt.Sprintf("no scopeBindings entry covers namespace %q (runner pod spec %q), so its pods may name no GitHub scope", namespace, spec)
}
