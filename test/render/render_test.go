package render

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/test/fixture"
)

func TestParse(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []string // Kind/name, sorted
		wantErr string
	}{
		"documents, empty ones and comments": {
			in:   "---\n# a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n---\n\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: a\n",
			want: []string{"ConfigMap/b", "Secret/a"},
		},
		"a JSON stream": {
			in:   `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"}}` + "\n" + `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}`,
			want: []string{"Pod/p", "Service/s"},
		},
		"nothing":     {in: "", want: []string{}},
		"not a map":   {in: "- a\n- b\n", wantErr: "decode manifests"},
		"broken YAML": {in: "kind: [\n", wantErr: "decode manifests"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objs, err := Parse([]byte(tc.in))
			if fixture.CheckErr(t, err, tc.wantErr) {
				return
			}
			if got := objs.Names(); !slices.Equal(got, tc.want) {
				t.Errorf("objects %v, want %v", got, tc.want)
			}
		})
	}
}

const threeObjects = `
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: ns-a}
data: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: ns-b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cfg}
`

func TestObjects(t *testing.T) {
	objs := MustParse(t, []byte(threeObjects))
	if got := objs.OfKind("ConfigMap").Names(); !slices.Equal(got, []string{"ConfigMap/cfg", "ConfigMap/cfg"}) {
		t.Errorf("OfKind(ConfigMap) = %v", got)
	}
	if got := objs.InNamespace("").Names(); !slices.Equal(got, []string{"ClusterRole/cfg"}) {
		t.Errorf("InNamespace(\"\") = %v, want the cluster-scoped object", got)
	}
	if got := objs.InNamespace("ns-b"); len(got) != 1 || got[0].GetNamespace() != "ns-b" {
		t.Errorf("InNamespace(ns-b) = %v", got.Names())
	}
	// Find returns the first of that kind and name.
	if o := objs.Find("ConfigMap", "cfg"); o == nil || o.GetNamespace() != "ns-a" {
		t.Errorf("Find(ConfigMap, cfg) = %v, want the one in ns-a", o)
	}
	if o := objs.Find("Secret", "cfg"); o != nil {
		t.Errorf("Find(Secret, cfg) = %v, want nil", o)
	}
	cm := Get[corev1.ConfigMap](t, objs.InNamespace("ns-a"), "ConfigMap", "cfg")
	if cm.Data["k"] != "v" {
		t.Errorf("Get ConfigMap data %v", cm.Data)
	}
}

func TestTypedRejectsUnknownFields(t *testing.T) {
	objs := MustParse(t, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {k: v}\nspec: {replicas: 2}\n"))
	if _, err := Typed[corev1.ConfigMap](objs[0]); err == nil || !strings.Contains(err.Error(), "spec") {
		t.Errorf("error %v, want one naming the unknown field spec", err)
	}
}

func TestToolPath(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct{ env, def, want string }{
		"default below the root":      {"", "bin/helm", "/repo/bin/helm"},
		"absolute default":            {"", "/opt/x/index.json", "/opt/x/index.json"},
		"env wins":                    {"/usr/bin/helm", "bin/helm", "/usr/bin/helm"},
		"relative env: working dir's": {"tools/helm", "bin/helm", filepath.Join(wd, "tools/helm")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := toolPath(tc.env, tc.def, "/repo")
			if err != nil || got != tc.want {
				t.Errorf("toolPath(%q, %q) = %q, %v; want %q", tc.env, tc.def, got, err, tc.want)
			}
		})
	}
}

// recorder is a testing.TB whose Fatal and Skip end only the goroutine that
// calls them, as the testing package's do, recording what they said.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = format
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skip = format
	runtime.Goexit()
}

func callTool(t *testing.T, env, def string) (path string, r *recorder) {
	r = &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		path = Tool(r, env, def, "run make it")
	}()
	<-done
	return path, r
}

// TestTool: a present file is returned; a missing one skips, and fails under CI.
func TestTool(t *testing.T) {
	present := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(present, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	tests := map[string]struct {
		ci, env, def string
		want         string
		fatal, skip  bool
	}{
		"present default":            {def: present, want: present},
		"present through the env":    {env: present, def: missing, want: present},
		"missing: skip":              {def: missing, skip: true},
		"missing under CI: fail":     {ci: "true", def: missing, fatal: true},
		"env names a missing file":   {env: missing, def: present, skip: true},
		"present under CI: returned": {ci: "true", def: present, want: present},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv("RENDER_TEST_TOOL", tc.env)
			got, r := callTool(t, "RENDER_TEST_TOOL", tc.def)
			if (r.fatal != "") != tc.fatal || (r.skip != "") != tc.skip {
				t.Fatalf("fatal %q skip %q, want fatal %v skip %v", r.fatal, r.skip, tc.fatal, tc.skip)
			}
			if !tc.fatal && !tc.skip && got != tc.want {
				t.Errorf("Tool = %q, want %q", got, tc.want)
			}
		})
	}
}
