package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/runner-guard/runner-guard/test/render"
)

// TestREADMEUpToDate: charts/runner-guard/README.md is what bin/helm-docs
// (hack/tools/helm-docs) makes of Chart.yaml, values.yaml's `# --` comments
// and README.md.gotmpl, with the flags of `make chart-docs` (hack/make/release.mk).
func TestREADMEUpToDate(t *testing.T) {
	helmDocs := render.Tool(t, "HELM_DOCS", "bin/helm-docs", "run make helm-docs or set HELM_DOCS")
	dir := render.ChartDir(t)
	cmd := exec.Command(helmDocs, "--chart-search-root", dir, "--dry-run",
		"--sort-values-order", "file", "--skip-version-footer", "--log-level", "warning")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", helmDocs, err, stderr.Bytes())
	}
	have, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("charts/runner-guard/README.md differs from what helm-docs makes of values.yaml and README.md.gotmpl: run make chart-docs")
	}
}

// TestValuesDocumented: the values a user sets most have a row of their own
// with a description, so a `# --` comment lost in values.yaml shows here.
func TestValuesDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(render.ChartDir(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"image.tag", "policy.scopeBindings", "github.credentials.existingSecret",
		"metrics.prometheusRule.enabled", "metrics.grafanaDashboard.label", "networkPolicy.webhookSources", "extraArgs"} {
		row := []byte("| `" + key + "` |")
		i := bytes.Index(readme, row)
		if i < 0 {
			t.Errorf("README.md has no row for %s", key)
			continue
		}
		line, _, _ := bytes.Cut(readme[i:], []byte("\n"))
		if bytes.HasSuffix(line, []byte("|  |")) {
			t.Errorf("README.md's row for %s has no description: %s", key, line)
		}
	}
}
