package arc_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// The project's own CRDs, used by the e2e tests.
const (
	crdFile       = "../../test/e2e/testdata/crds/ephemeralrunners.actions.github.com.yaml"
	legacyCRDFile = "../../test/e2e/testdata/crds/runners.actions.summerwind.dev.yaml"
)

// testCRD is one CustomResourceDefinition file, read for its single version.
type testCRD struct {
	crd     map[string]any
	version map[string]any
}

// readCRD reads a CRD file and checks that it serves exactly gvk, under the
// resource gr, namespaced, with a status subresource.
func readCRD(t *testing.T, file string, gvk schema.GroupVersionKind, gr schema.GroupResource) testCRD {
	t.Helper()
	raw, err := os.ReadFile(file)
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
	if got := str("spec", "group"); got != gvk.Group || got != gr.Group {
		t.Errorf("group %q, want %q", got, gvk.Group)
	}
	if got := str("spec", "names", "kind"); got != gvk.Kind {
		t.Errorf("kind %q, want %q", got, gvk.Kind)
	}
	if got := str("spec", "names", "plural"); got != gr.Resource {
		t.Errorf("plural %q, want %q", got, gr.Resource)
	}
	if got, want := str("metadata", "name"), gr.Resource+"."+gr.Group; got != want {
		t.Errorf("metadata.name %q, want %q (the API server requires plural.group)", got, want)
	}
	if got := str("spec", "scope"); got != "Namespaced" {
		t.Errorf("scope %q, want Namespaced (ARC's objects live beside their pods)", got)
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
	return testCRD{crd: crd, version: v}
}

// requireTypes checks the schema types of fields (spec.x or status.x -> type).
func (c testCRD) requireTypes(t *testing.T, fields map[string]string) {
	t.Helper()
	for path, want := range fields {
		parts := strings.Split(path, ".")
		p := []string{"schema", "openAPIV3Schema", "properties", parts[0], "properties", parts[1], "type"}
		if got, _, _ := unstructured.NestedString(c.version, p...); got != want {
			t.Errorf("%s has type %q, want %q", path, got, want)
		}
	}
}

// preservesUnknown reports whether the schema keeps unknown fields under
// properties.<top> (ARC's pod template and status fields this CRD leaves out).
func (c testCRD) preservesUnknown(top string) bool {
	ok, _, _ := unstructured.NestedBool(c.version, "schema", "openAPIV3Schema", "properties", top, "x-kubernetes-preserve-unknown-fields")
	return ok
}

// The e2e CRD must serve what Resolve reads, with ARC's types: a mismatch
// would make e2e tests pass against an API ARC does not have.
func TestCRDDeclaresWhatResolveReads(t *testing.T) {
	c := readCRD(t, crdFile, arc.GroupVersionKind(), arc.GroupResource())
	c.requireTypes(t, map[string]string{ // path under openAPIV3Schema.properties -> ARC's type
		"spec.githubConfigUrl":    "string",
		"spec.githubConfigSecret": "string",
		"spec.runnerScaleSetId":   "integer",
		"status.runnerId":         "integer",
		"status.runnerName":       "string",
		"status.phase":            "string",
		"status.jobId":            "string",
		"status.jobRequestId":     "integer",
		"status.workflowRunId":    "integer",
	})
}

// The legacy Runner CRD of the e2e tests serves ARC's legacy GVK and declares,
// as strings, the scope fields legacyScope reads; the rest of ARC's spec and
// its status survive unvalidated. Each declared scope field, set alone on a
// Runner, is the scope Resolve returns, so the CRD and the resolver name the
// same fields.
func TestLegacyCRDDeclaresWhatResolveReads(t *testing.T) {
	c := readCRD(t, legacyCRDFile, arc.LegacyGroupVersionKind(), arc.LegacyGroupResource())
	scopeFields := map[string]struct {
		value string
		want  ghclient.Scope
	}{
		"spec.repository":   {"acme/app", mustScope(ghclient.RepoScope("acme/app"))},
		"spec.organization": {"acme", mustScope(ghclient.OrgScope("acme"))},
		"spec.enterprise":   {"big", mustScope(ghclient.EnterpriseScope("big"))},
	}
	types := map[string]string{}
	for f := range scopeFields {
		types[f] = "string"
	}
	c.requireTypes(t, types)
	for _, top := range []string{"spec", "status"} {
		if !c.preservesUnknown(top) {
			t.Errorf("%s does not preserve unknown fields: ARC's other Runner fields would be pruned", top)
		}
	}
	declared, _, _ := unstructured.NestedMap(c.version, "schema", "openAPIV3Schema", "properties", "spec", "properties")
	if len(declared) != len(scopeFields) {
		t.Errorf("spec declares %d fields, want only the %d scope fields runner-guard reads", len(declared), len(scopeFields))
	}

	for field, tc := range scopeFields {
		t.Run(field, func(t *testing.T) {
			name := "r-" + strings.TrimPrefix(field, "spec.")
			w := fixture.MakeLegacyRunner(ns, name)
			obj := w.Obj()
			if err := unstructured.SetNestedField(obj.Object, tc.value, strings.Split(field, ".")...); err != nil {
				t.Fatal(err)
			}
			pod := fixture.MakeLegacyRunnerPod(ns, name).OwnedByLegacyRunner(w).Running().Obj()
			run, err := arc.NewResolver(arc.Options{Reader: newFakeClient(nil, obj)}).Resolve(context.Background(), pod)
			if err != nil || run == nil {
				t.Fatalf("Resolve of a Runner with only %s set = %+v, %v; want its scope", field, run, err)
			}
			if run.Scope != tc.want || run.Kind != arc.LegacyKind {
				t.Errorf("Resolve with only %s=%q: scope %s kind %s, want %s kind %s", field, tc.value, run.Scope, run.Kind, tc.want, arc.LegacyKind)
			}
		})
	}
}
