// Package workflows tests what of .github/workflows can run here: the release
// workflow's own checks of the tag, Chart.yaml and the CHANGELOG, its release
// notes, and that every make target the workflows call exists. actionlint
// (make lint-workflows) checks the rest.
package workflows

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const root = "../.."

type step struct {
	Name string            `json:"name"`
	Uses string            `json:"uses"`
	Run  string            `json:"run"`
	Env  map[string]string `json:"env"`
}

type workflow struct {
	Jobs map[string]struct {
		Steps []step `json:"steps"`
	} `json:"jobs"`
}

func load(t *testing.T, name string) workflow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".github", "workflows", name))
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	if err := yaml.Unmarshal(b, &w); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return w
}

// stepNamed is the run: script of the release job's step whose name starts
// with prefix.
func stepNamed(t *testing.T, w workflow, prefix string) step {
	t.Helper()
	for _, j := range w.Jobs {
		for _, s := range j.Steps {
			if strings.HasPrefix(s.Name, prefix) {
				return s
			}
		}
	}
	t.Fatalf("no step named %q...", prefix)
	return step{}
}

// bash runs a step's script as GitHub runs run: steps (bash -e), in dir,
// with env added.
func bash(t *testing.T, dir, script string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func chartVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "charts", "runner-guard", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.Version != c.AppVersion {
		t.Fatalf("Chart.yaml version %s and appVersion %s differ: one tag releases both", c.Version, c.AppVersion)
	}
	return c.Version
}

// TestReleaseChecksTheTag runs the release's first step against this
// checkout: a tag of Chart.yaml's version passes (so the CHANGELOG has its
// section), anything else is refused before anything is built.
func TestReleaseChecksTheTag(t *testing.T) {
	script := stepNamed(t, load(t, "release.yml"), "Check the tag").Run
	version := chartVersion(t)
	repos := []string{"IMAGE_REPOSITORY=REGISTRY/OWNER/runner-guard", "CHART_REPOSITORY=oci://CHARTS/OWNER/charts"}
	tests := map[string]struct {
		tag     string
		env     []string
		wantErr string
		want    []string // lines of GITHUB_OUTPUT
	}{
		"the chart's version": {tag: "v" + version, env: repos,
			want: []string{"version=" + version, "image-registry=REGISTRY", "chart-registry=CHARTS"}},
		"another version":       {tag: "v99.0.0", env: repos, wantErr: "Chart.yaml has version " + version},
		"not semver":            {tag: "v1.2", env: repos, wantErr: "is not vMAJOR.MINOR.PATCH"},
		"leading zero":          {tag: "v01.2.3", env: repos, wantErr: "is not vMAJOR.MINOR.PATCH"},
		"no image repository":   {tag: "v" + version, env: repos[1:], wantErr: "set the repository variable IMAGE_REPOSITORY"},
		"chart repository form": {tag: "v" + version, env: []string{repos[0], "CHART_REPOSITORY=CHARTS/OWNER/charts"}, wantErr: "must start with oci://"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			output := filepath.Join(t.TempDir(), "output")
			env := append([]string{"GITHUB_REF_NAME=" + tc.tag, "GITHUB_OUTPUT=" + output, "IMAGE_REPOSITORY=", "CHART_REPOSITORY="}, tc.env...)
			out, err := bash(t, root, script, env...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(out, tc.wantErr) {
					t.Fatalf("err %v, output %q; want a failure saying %q", err, out, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			b, err := os.ReadFile(output)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(string(b)); !slices.Equal(got, tc.want) {
				t.Errorf("GITHUB_OUTPUT %q, want %q", got, tc.want)
			}
		})
	}
}

// TestReleaseNotes runs the release step's extraction of the CHANGELOG
// section: the notes of Chart.yaml's version are that section alone.
func TestReleaseNotes(t *testing.T) {
	script := stepNamed(t, load(t, "release.yml"), "GitHub release").Run
	awk, _, ok := strings.Cut(script, "\n")
	if !ok || !strings.HasPrefix(awk, "awk ") {
		t.Fatalf("the GitHub release step does not start with the awk that writes the notes:\n%s", script)
	}
	dir := t.TempDir()
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), changelog, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	version := chartVersion(t)
	if out, err := bash(t, dir, awk, "VERSION="+version); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	notes, err := os.ReadFile(filepath.Join(dir, "bin", "release-notes.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(changelog), "## ["+version+"]")
	section, _, _ = strings.Cut(section, "\n## [")
	_, section, _ = strings.Cut(section, "\n")
	if strings.TrimSpace(string(notes)) == "" || strings.TrimSpace(string(notes)) != strings.TrimSpace(section) {
		t.Errorf("release notes:\n%s\nwant the CHANGELOG section of %s:\n%s", notes, version, section)
	}
}

// makeCall is a make command in a run: script; its targets are the words
// that are neither VAR=value nor flags.
var makeCall = regexp.MustCompile(`(?m)^\s*make\s+([^\n]*)`)

// expression is a GitHub Actions expression, ${{ ... }}.
var expression = regexp.MustCompile(`\$\{\{[^}]*\}\}`)

// TestWorkflowMakeTargets: every make target the workflows call exists
// (make -n knows how to build it).
func TestWorkflowMakeTargets(t *testing.T) {
	var targets []string
	for _, name := range []string{"ci.yml", "release.yml"} {
		for _, j := range load(t, name).Jobs {
			for _, s := range j.Steps {
				for _, m := range makeCall.FindAllStringSubmatch(s.Run, -1) {
					for _, w := range strings.Fields(expression.ReplaceAllString(m[1], "X")) {
						if w == "\\" || strings.Contains(w, "=") || strings.HasPrefix(w, "-") || strings.ContainsAny(w, `$"'`) {
							continue
						}
						if !slices.Contains(targets, w) {
							targets = append(targets, w)
						}
					}
				}
			}
		}
	}
	for _, want := range []string{"image", "image-push", "chart"} {
		if !slices.Contains(targets, want) {
			t.Errorf("the workflows never run make %s (they call %v)", want, targets)
		}
	}
	for _, target := range targets {
		cmd := exec.Command("make", "-n", target, "IMAGE_REPOSITORY=REGISTRY/OWNER/runner-guard")
		t.Logf("make -n %s", target)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("make -n %s: %v\n%s", target, err, out)
		}
	}
}

// TestCIRunsTheSuite: the ci workflow runs .ci/run, what a clean clone runs.
func TestCIRunsTheSuite(t *testing.T) {
	for _, j := range load(t, "ci.yml").Jobs {
		for _, s := range j.Steps {
			if strings.Contains(s.Run, "bash .ci/run") {
				return
			}
		}
	}
	t.Error("no step of ci.yml runs bash .ci/run")
}
