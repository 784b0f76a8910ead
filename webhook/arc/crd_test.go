package arc_test

import (
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/runner-guard/runner-guard/webhook/arc"
)

// crdFile is the project's own EphemeralRunner CRD, used by the e2e tests.
const crdFile = "../../test/e2e/testdata/crds/ephemeralrunners.actions.github.com.yaml"

// The e2e CRD must serve what Resolve reads, with ARC's types: a mismatch
// would make e2e tests pass against an API ARC does not have.
func TestCRDDeclaresWhatResolveReads(t *testing.T) {
	raw, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(crd, path...)
		return s
	}
	gvk := arc.GroupVersionKind()
	if got := str("spec", "group"); got != gvk.Group {
		t.Errorf("group %q, want %q", got, gvk.Group)
	}
	if got := str("spec", "names", "kind"); got != gvk.Kind {
		t.Errorf("kind %q, want %q", got, gvk.Kind)
	}
	if got := str("spec", "names", "plural"); got != arc.GroupResource().Resource {
		t.Errorf("plural %q, want %q", got, arc.GroupResource().Resource)
	}
	versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
	if len(versions) != 1 {
		t.Fatalf("%d versions, want 1", len(versions))
	}
	v := versions[0].(map[string]any)
	if v["name"] != gvk.Version || v["served"] != true || v["storage"] != true {
		t.Errorf("version %v served %v storage %v, want %s served and stored", v["name"], v["served"], v["storage"], gvk.Version)
	}
	if _, ok, _ := unstructured.NestedMap(v, "subresources", "status"); !ok {
		t.Error("no status subresource")
	}
	fields := map[string]string{ // path under openAPIV3Schema.properties -> ARC's type
		"spec.githubConfigUrl":    "string",
		"spec.githubConfigSecret": "string",
		"spec.runnerScaleSetId":   "integer",
		"status.runnerId":         "integer",
		"status.runnerName":       "string",
		"status.phase":            "string",
		"status.jobId":            "string",
		"status.jobRequestId":     "integer",
		"status.workflowRunId":    "integer",
	}
	for path, want := range fields {
		parts := strings.Split(path, ".")
		p := []string{"schema", "openAPIV3Schema", "properties", parts[0], "properties", parts[1], "type"}
		if got, _, _ := unstructured.NestedString(v, p...); got != want {
			t.Errorf("%s has type %q, want %q", path, got, want)
		}
	}
}
