package chart

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/runner-guard/runner-guard/test/render"
)

// TestRerunExclude: rerun.exclude becomes one comma-separated
// --rerun-exclude, none when empty; an entry with a comma or a space is
// refused.
func TestRerunExclude(t *testing.T) {
	args := func(extra ...string) []string {
		objs := render.MustTemplate(t, append(slices.Clone(valid), extra...)...)
		d := render.Get[appsv1.Deployment](t, objs, "Deployment", "runner-guard-webhook")
		return d.Spec.Template.Spec.Containers[0].Args
	}
	if a := args(); hasFlag(a, "--rerun-exclude") {
		t.Errorf("args %q pass --rerun-exclude without rerun.exclude", a)
	}
	want := "--rerun-exclude=acme/legacy-*,.github/workflows/nightly.yml"
	if a := args("--set", "rerun.exclude={acme/legacy-*,.github/workflows/nightly.yml}"); !slices.Contains(a, want) {
		t.Errorf("args %q lack %s", a, want)
	}
	out, err := render.Template(t, append(slices.Clone(valid), "--set-json", `rerun.exclude=["acme/a,acme/b"]`)...)
	if err == nil || !strings.Contains(err.Error()+string(out), "exclude") {
		t.Errorf("an entry with a comma rendered: %v", err)
	}
}
