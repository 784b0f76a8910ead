// Package render renders runner-guard's install with the pinned tools `make`
// builds into bin/ (kustomize build of a manifests/ overlay, helm template of
// charts/runner-guard) and parses a render into objects, for the manifests
// and chart tests. A missing tool skips the test, and fails it under CI.
package render

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/runner-guard/runner-guard/test/process"
)

// The release the static chart renders use: its names match dist/install.yaml.
const (
	ReleaseName = "runner-guard"
	Namespace   = "runner-guard-system"
)

// RepoRoot is the directory holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := process.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// ReadFile reads a file of the repository: path elements below its root.
func ReadFile(t testing.TB, elem ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{RepoRoot(t)}, elem...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ChartDir is charts/runner-guard.
func ChartDir(t testing.TB) string { return filepath.Join(RepoRoot(t), "charts", "runner-guard") }

// Tool returns the file the environment variable env names, else def (below
// the repository root when relative): something `make` builds. It skips t
// when the file is missing, and fails it under CI; hint says how to build it.
func Tool(t testing.TB, env, def, hint string) string {
	t.Helper()
	p, err := toolPath(os.Getenv(env), def, RepoRoot(t))
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found (%v): %s", p, err, hint)
		}
		t.Skipf("%s not found (%v): %s", p, err, hint)
	}
	return p
}

// toolPath is the absolute path of a tool: fromEnv (relative to the working
// directory) when set, else def, relative to root unless absolute.
func toolPath(fromEnv, def, root string) (string, error) {
	switch {
	case fromEnv != "":
		return filepath.Abs(fromEnv)
	case filepath.IsAbs(def):
		return def, nil
	default:
		return filepath.Join(root, def), nil
	}
}

// HelmBin is bin/helm (Helm 4, hack/tools/helm), or $HELM.
func HelmBin(t testing.TB) string {
	return Tool(t, "HELM", "bin/helm", "run make helm or set HELM")
}

// Helm3Bin is bin/helm3 (Helm 3, hack/tools/helm3), or $HELM3.
func Helm3Bin(t testing.TB) string {
	return Tool(t, "HELM3", "bin/helm3", "run make helm or set HELM3")
}

// KustomizeBin is bin/kustomize (hack/tools/kustomize), or $KUSTOMIZE.
func KustomizeBin(t testing.TB) string {
	return Tool(t, "KUSTOMIZE", "bin/kustomize", "run make kustomize or set KUSTOMIZE")
}

// Run runs a tool and returns its stdout, or its stderr in the error.
func Run(cmd *exec.Cmd) ([]byte, error) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %q: %w: %s", filepath.Base(cmd.Path), cmd.Args[1:], err, stderr.String())
	}
	return out, nil
}

// Helm runs helm with an isolated configuration (no user repositories or
// registries are read) and returns stdout, or stderr in the error.
func Helm(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	return HelmWith(t, HelmBin(t), args...)
}

// HelmWith is Helm with another helm binary (Helm3Bin).
func HelmWith(t testing.TB, bin string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	return Run(cmd)
}

// Template renders the chart as ReleaseName in Namespace; args add
// --values/--set flags.
func Template(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	base := []string{"template", ReleaseName, ChartDir(t), "--namespace", Namespace}
	return Helm(t, append(base, args...)...)
}

// MustTemplate is Template's objects, failing t on an error.
func MustTemplate(t testing.TB, args ...string) Objects {
	t.Helper()
	out, err := Template(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return MustParse(t, out)
}

// Overlays renders overlays of manifests/ with kustomize, each once: a test
// package keeps one. The zero value is ready to use.
type Overlays struct {
	mu  sync.Mutex
	out map[string][]byte
}

// Kustomize is `kustomize build manifests/<overlay>`.
func Kustomize(t testing.TB, overlay string) []byte {
	t.Helper()
	out, err := Run(exec.Command(KustomizeBin(t), "build", filepath.Join(RepoRoot(t), "manifests", overlay)))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Build is Kustomize, once an overlay.
func (o *Overlays) Build(t testing.TB, overlay string) []byte {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if out, ok := o.out[overlay]; ok {
		return out
	}
	out := Kustomize(t, overlay)
	if o.out == nil {
		o.out = map[string][]byte{}
	}
	o.out[overlay] = out
	return out
}

// Objects builds and parses an overlay.
func (o *Overlays) Objects(t testing.TB, overlay string) Objects {
	t.Helper()
	return MustParse(t, o.Build(t, overlay))
}
