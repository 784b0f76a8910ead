package chart

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/test/render"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current chart")

// matrix lists the values files of testdata/values, one golden render each.
func matrix(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "values", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 6 {
		t.Fatalf("testdata/values has %d values files, want the whole matrix", len(files))
	}
	return files
}

func caseName(valuesFile string) string {
	return strings.TrimSuffix(filepath.Base(valuesFile), ".yaml")
}

// generatedPEM matches the base64 PEM the chart generates anew at every render
// (certificates.mode generate); a provided caBundle is kept.
var generatedPEM = regexp.MustCompile(`(?m)^(\s*(?:tls\.crt|tls\.key|ca\.crt|caBundle): )LS0tLS1CRUdJTi\S*$`)

func redact(render []byte) []byte {
	return generatedPEM.ReplaceAll(render, []byte("${1}GENERATED"))
}

// TestGolden compares the render of every matrix case with its golden file;
// `go test ./test/chart -run TestGolden -update` (make chart-golden) rewrites them.
func TestGolden(t *testing.T) {
	for _, vf := range matrix(t) {
		t.Run(caseName(vf), func(t *testing.T) {
			out, err := render.Template(t, "--values", vf)
			if err != nil {
				t.Fatal(err)
			}
			got := redact(out)
			golden := filepath.Join("testdata", "golden", caseName(vf)+".yaml")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run make chart-golden)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("render of %s differs from %s (run make chart-golden if the change is deliberate):\n%s", vf, golden, lineDiff(string(want), string(got)))
			}
		})
	}
}

// TestLint runs helm lint --strict for every matrix case.
func TestLint(t *testing.T) {
	for _, vf := range matrix(t) {
		t.Run(caseName(vf), func(t *testing.T) {
			out, err := render.Helm(t, "lint", render.ChartDir(t), "--strict", "--namespace", namespace, "--values", vf)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(string(out), "0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

// lineDiff shows the first lines where two renders part, with context.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  - " + wl + "\n  + " + gl + "\n")
			shown++
		}
	}
	return b.String()
}

// TestPackage packages the chart the way `make chart` does and checks the
// archive renders exactly what the directory renders (nothing the chart needs,
// values.schema.json included, is left out of the package).
func TestPackage(t *testing.T) {
	dir := t.TempDir()
	if _, err := render.Helm(t, "package", render.ChartDir(t), "--destination", dir); err != nil {
		t.Fatal(err)
	}
	archives, _ := filepath.Glob(filepath.Join(dir, "runner-guard-*.tgz"))
	if len(archives) != 1 {
		t.Fatalf("packaged %v, want one runner-guard-<version>.tgz", archives)
	}
	vf := filepath.Join("testdata", "values", "certmanager-token.yaml")
	fromDir, err := render.Template(t, "--values", vf)
	if err != nil {
		t.Fatal(err)
	}
	fromArchive, err := render.Helm(t, "template", releaseName, archives[0], "--namespace", namespace, "--values", vf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fromDir, fromArchive) {
		t.Errorf("the packaged chart renders differently:\n%s", lineDiff(string(fromDir), string(fromArchive)))
	}
	// The schema travels with the package: an unknown key still fails.
	if _, err := render.Helm(t, "template", releaseName, archives[0], "--values", vf, "--set", "replicas=3"); err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("the packaged chart accepts an unknown key: %v", err)
	}
}
