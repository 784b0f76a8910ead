package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// module is the product's import path.
const module = "github.com/runner-guard/runner-guard/"

// floorRow matches a row of docs/development.md's Layers table.
var floorRow = regexp.MustCompile(`^\| (\d+) \| (.+) \|$`)

// floors reads the Layers table: package (relative to the module) to floor.
func floors(t *testing.T, root string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Layers\n")
	if !ok {
		t.Fatal("docs/development.md has no Layers section")
	}
	out := map[string]int{}
	for _, line := range strings.Split(section, "\n") {
		m := floorRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		floor, _ := strconv.Atoi(m[1])
		for _, p := range strings.Split(m[2], ",") {
			out[strings.Trim(strings.TrimSpace(p), "`")] = floor
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/development.md's Layers table places no package")
	}
	return out
}

// outsideFloors are the packages the table leaves out on purpose.
func outsideFloors(pkg string) bool {
	return strings.HasPrefix(pkg, "test/") || strings.HasPrefix(pkg, "hack/") || pkg == "ghclient/ghfake" || pkg == "manifests"
}

// Every product import points to a lower floor, as docs/development.md says.
func TestImportsPointDown(t *testing.T) {
	root := repoRoot(t)
	floor := floors(t, root)
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if outsideFloors(pkg) {
			continue
		}
		f, placed := floor[pkg]
		if !placed {
			t.Errorf("package %s is on no floor of docs/development.md's Layers table", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			if df, ok := floor[dep]; !ok || df >= f {
				t.Errorf("%s (floor %d) imports %s (floor %d, or none): an import must point to a lower floor", pkg, f, dep, df)
			}
		}
	}
}
