// Package chart tests charts/runner-guard with the pinned Helm (bin/helm, built
// from hack/tools/helm): lint, golden renders of a values matrix, agreement
// with the kustomize render, values the chart must refuse, and an install on
// the e2e control plane.
package chart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// The release the static tests render: its names match dist/install.yaml.
const (
	releaseName = "runner-guard"
	namespace   = "runner-guard-system"
)

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// repoRoot is the directory holding go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		for err == nil {
			if _, serr := os.Stat(filepath.Join(dir, "go.mod")); serr == nil {
				rootDir = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				err = errors.New("go.mod not found above the working directory")
			}
			dir = parent
		}
		rootErr = err
	})
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return rootDir
}

func chartDir(t *testing.T) string { return filepath.Join(repoRoot(t), "charts", "runner-guard") }

// tool returns an env-named or default binary, or skips (fails under CI) when
// it is missing.
func tool(t *testing.T, env, def, hint string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join(repoRoot(t), def)
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (%s): %v; %s", env, p, err, hint)
		}
		t.Skipf("%s not found (%v): %s", p, err, hint)
	}
	return p
}

func helmBin(t *testing.T) string {
	return tool(t, "HELM", "bin/helm", "run make helm or set HELM")
}

func kustomizeBin(t *testing.T) string {
	return tool(t, "KUSTOMIZE", "bin/kustomize", "run make kustomize or set KUSTOMIZE")
}

// runHelm runs helm with an isolated configuration (no user repositories or
// registries are read) and returns stdout, or stderr in the error.
func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %v: %w: %s", args, err, stderr.String())
	}
	return out, nil
}

// template renders the chart as the release the static tests use; args add
// --values/--set flags.
func template(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	base := []string{"template", releaseName, chartDir(t), "--namespace", namespace}
	return runHelm(t, append(base, args...)...)
}

func mustTemplate(t *testing.T, args ...string) objects {
	t.Helper()
	out, err := template(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, out)
}

var (
	kustomizeMu    sync.Mutex
	kustomizeCache = map[string][]byte{}
)

// kustomize renders an overlay of manifests/.
func kustomize(t *testing.T, overlay string) objects {
	t.Helper()
	kustomizeMu.Lock()
	defer kustomizeMu.Unlock()
	out, ok := kustomizeCache[overlay]
	if !ok {
		cmd := exec.Command(kustomizeBin(t), "build", filepath.Join(repoRoot(t), "manifests", overlay))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		var err error
		if out, err = cmd.Output(); err != nil {
			t.Fatalf("kustomize build %s: %v: %s", overlay, err, stderr.String())
		}
		kustomizeCache[overlay] = out
	}
	return parse(t, out)
}

type objects []*unstructured.Unstructured

func parse(t *testing.T, data []byte) objects {
	t.Helper()
	objs, err := parseObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func parseObjects(data []byte) (objects, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs objects
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode manifests: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, &u)
		}
	}
}

func (objs objects) find(kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func (objs objects) ofKind(kind string) objects {
	var out objects
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (objs objects) names() []string {
	var ns []string
	for _, o := range objs {
		ns = append(ns, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(ns)
	return ns
}

// get converts the named object into a typed one, rejecting unknown fields.
func get[T any](t *testing.T, objs objects, kind, name string) *T {
	t.Helper()
	u := objs.find(kind, name)
	if u == nil {
		t.Fatalf("no %s %q among %v", kind, name, objs.names())
	}
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
	return &out
}

// equalJSON compares two values by their JSON form.
func equalJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func nestedSlice(obj map[string]any, fields ...string) ([]any, bool, error) {
	return unstructured.NestedSlice(obj, fields...)
}
