package chart

import (
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/runner-guard/runner-guard/test/render"
)

// TestArtifactHubAnnotations: Chart.yaml's Artifact Hub annotations are what
// Artifact Hub accepts (its changes kinds, a category it knows), and the
// license they name is the repository's LICENSE.
func TestArtifactHubAnnotations(t *testing.T) {
	b := render.ReadFile(t, "charts", "runner-guard", "Chart.yaml")
	var chart struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	a := chart.Annotations
	license := render.ReadFile(t, "LICENSE")
	if a["artifacthub.io/license"] != "Apache-2.0" || !strings.Contains(string(license), "Apache License\n                           Version 2.0") {
		t.Errorf("artifacthub.io/license %q, want Apache-2.0 matching LICENSE", a["artifacthub.io/license"])
	}
	categories := []string{"ai-machine-learning", "database", "integration-delivery", "monitoring-logging", "networking", "security", "storage", "streaming-messaging"}
	if !slices.Contains(categories, a["artifacthub.io/category"]) {
		t.Errorf("artifacthub.io/category %q, want one of %v", a["artifacthub.io/category"], categories)
	}
	for _, k := range []string{"artifacthub.io/operator", "artifacthub.io/prerelease", "artifacthub.io/containsSecurityUpdates"} {
		if v := a[k]; v != "true" && v != "false" {
			t.Errorf("%s %q, want \"true\" or \"false\"", k, v)
		}
	}
	var changes []struct {
		Kind        string `json:"kind"`
		Description string `json:"description"`
	}
	if err := yaml.UnmarshalStrict([]byte(a["artifacthub.io/changes"]), &changes); err != nil {
		t.Fatalf("artifacthub.io/changes: %v", err)
	}
	if len(changes) == 0 {
		t.Error("artifacthub.io/changes lists nothing for this version")
	}
	kinds := []string{"added", "changed", "deprecated", "removed", "fixed", "security"}
	for i, c := range changes {
		if !slices.Contains(kinds, c.Kind) || strings.TrimSpace(c.Description) == "" {
			t.Errorf("artifacthub.io/changes[%d] = %+v, want a kind of %v and a description", i, c, kinds)
		}
	}
}
