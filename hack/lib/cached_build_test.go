// Package lib tests the shell helpers hack/build-*.sh source.
package lib

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cachedBuild runs cached_build for bin/fake/1 of the clone root with the
// stamp want and a build that writes a tool and counts its runs in builds.
func cachedBuild(t *testing.T, root, cache, want string) (dir, stderr string) {
	t.Helper()
	script := `set -euo pipefail
source ./cached-build.sh
fake_build() { echo run >> "$BUILDS"; mkdir -p "$1/sub"; echo bin > "$1/tool"; echo y > "$1/sub/y"; chmod 755 "$1/tool"; }
cached_build fake fake/1 "$WANT" fake_build`
	cmd := exec.Command("bash", "-c", "root=\"$ROOT\"\n"+script)
	cmd.Env = append(os.Environ(), "ROOT="+root, "RUNNER_GUARD_CACHE="+cache, "WANT="+want,
		"BUILDS="+filepath.Join(filepath.Dir(cache), "builds"))
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cached_build: %v\n%s", err, errb.String())
	}
	return strings.TrimSpace(string(out)), errb.String()
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func builds(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "builds"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run")
}

// TestCachedBuild: a first clone builds and fills the cache; a second run
// reuses its stamped directory; a second clone copies from the cache without
// building; a version change builds again and restamps both.
func TestCachedBuild(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	tmp := t.TempDir()
	cache := filepath.Join(tmp, "cache")
	first, second := filepath.Join(tmp, "clone1"), filepath.Join(tmp, "clone2")

	dir, _ := cachedBuild(t, first, cache, "v=1")
	if want := filepath.Join(first, "bin", "fake", "1"); dir != want {
		t.Fatalf("printed %q, want %q", dir, want)
	}
	if n := builds(t, tmp); n != 1 {
		t.Fatalf("%d builds, want 1", n)
	}
	if got := read(t, filepath.Join(cache, "fake", "1", ".versions")); got != "v=1" {
		t.Errorf("cache stamp %q, want v=1", got)
	}
	if got := read(t, filepath.Join(cache, "fake", "1", "sub", "y")); got != "y" {
		t.Errorf("cache lacks the build's subdirectory: %q", got)
	}

	cachedBuild(t, first, cache, "v=1")
	if n := builds(t, tmp); n != 1 {
		t.Errorf("%d builds after a rerun, want the stamped directory reused", n)
	}

	dir, stderr := cachedBuild(t, second, cache, "v=1")
	if n := builds(t, tmp); n != 1 || !strings.Contains(stderr, "copied from "+filepath.Join(cache, "fake", "1")) {
		t.Errorf("second clone: %d builds, stderr %q; want a copy from the cache", n, stderr)
	}
	if fi, err := os.Stat(filepath.Join(dir, "tool")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("copied tool: %v %v, want mode 0755", fi, err)
	}
	if got := read(t, filepath.Join(dir, ".versions")); got != "v=1" {
		t.Errorf("copied stamp %q, want v=1", got)
	}

	cachedBuild(t, second, cache, "v=2")
	if n := builds(t, tmp); n != 2 {
		t.Errorf("%d builds after a version change, want 2", n)
	}
	for _, stamp := range []string{filepath.Join(second, "bin", "fake", "1", ".versions"), filepath.Join(cache, "fake", "1", ".versions")} {
		if got := read(t, stamp); got != "v=2" {
			t.Errorf("%s = %q, want v=2", stamp, got)
		}
	}
}

// TestK8sLdflags: the version stamp names the minor version and both version packages.
func TestK8sLdflags(t *testing.T) {
	out, err := exec.Command("bash", "-c", `source ./cached-build.sh && k8s_ldflags v1.37.2`).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"k8s.io/component-base/version.gitVersion=v1.37.2", "k8s.io/component-base/version.gitMinor=37 ",
		"k8s.io/client-go/pkg/version.gitVersion=v1.37.2", "k8s.io/client-go/pkg/version.gitMinor=37",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("k8s_ldflags lacks %q: %s", want, out)
		}
	}
}
