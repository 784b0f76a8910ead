package rerun

import (
	"testing"

	"github.com/runner-guard/runner-guard/test/fixture"
)

func TestExclusions(t *testing.T) {
	x, err := ParseExclusions([]string{"acme/legacy-*", " .github/workflows/release-*.yml", "Big/app:.github/workflows/nightly.yml", ""})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		repo, path string
		want       string
	}{
		"a repository glob":                   {repo: "acme/legacy-api", want: "acme/legacy-*"},
		"repositories match in any case":      {repo: "ACME/Legacy-api", want: "acme/legacy-*"},
		"a workflow in any repository":        {repo: "other/app", path: ".github/workflows/release-1.yml", want: ".github/workflows/release-*.yml"},
		"a workflow of one repository":        {repo: "big/app", path: ".github/workflows/nightly.yml", want: "big/app:.github/workflows/nightly.yml"},
		"that workflow in another repository": {repo: "big/other", path: ".github/workflows/nightly.yml"},
		"paths match exactly":                 {repo: "other/app", path: ".github/workflows/Release-1.yml"},
		"nothing matches":                     {repo: "acme/app", path: ".github/workflows/ci.yml"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := x.excludedRepository(tc.repo)
			if got == "" {
				got = x.excludedWorkflow(tc.repo, tc.path)
			}
			if got != tc.want {
				t.Errorf("excluded by %q, want %q", got, tc.want)
			}
		})
	}
	for name, bad := range map[string]string{
		"no repository":    ":.github/workflows/a.yml",
		"no path":          "acme/app:",
		"a bare name":      "acme",
		"a bad glob":       "acme/[",
		"too many slashes": "acme/app/x:.github/workflows/a.yml",
	} {
		if _, err := ParseExclusions([]string{bad}); err == nil {
			t.Errorf("%s: %q parsed", name, bad)
		}
	}
}

func TestOptedOut(t *testing.T) {
	for value, want := range map[string]bool{"false": true, "False": true, "0": true, "true": false, "": false, "no": false} {
		pod := fixture.MakeScaleSetRunnerPod("ci", "r").Annotation(AnnotationRerun, value).Obj()
		if got := optedOut(pod); got != want {
			t.Errorf("%s: %q opted out = %v, want %v", AnnotationRerun, value, got, want)
		}
	}
	if optedOut(fixture.MakeScaleSetRunnerPod("ci", "r").Obj()) {
		t.Error("a pod without the annotation opted out")
	}
}
