package webhook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestParseConfig(t *testing.T) {
	tests := map[string]struct {
		yaml    string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		"empty document gets defaults": {
			yaml: "",
			check: func(t *testing.T, c Config) {
				if len(c.RunnerPods) != 2 || c.RunnerPods[0].Name != "legacy" || c.RunnerPods[1].Name != "scale-set" {
					t.Errorf("runnerPods = %+v, want legacy and scale-set", c.RunnerPods)
				}
				if c.OnError != OnErrorDeny || c.GitHubTimeout.Duration != 5*time.Second || c.forceAnnotation() != DefaultForceAnnotation {
					t.Errorf("defaults not applied: %+v", c)
				}
				if len(c.Bypass.Users) != 2 {
					t.Errorf("bypass users = %v, want the two kube-system defaults", c.Bypass.Users)
				}
			},
		},
		"custom runner pods and bypass": {
			yaml: `
runnerPods:
- name: mine
  selector: {matchLabels: {app: my-runner}}
  container: agent
  scopeEnv: {organization: GH_ORG}
bypass:
  groups: [ops]
forceDelete: {enabled: false}
onError: allow
githubTimeout: 3s
`,
			check: func(t *testing.T, c Config) {
				if len(c.RunnerPods) != 1 || c.RunnerPods[0].selector == nil {
					t.Fatalf("runnerPods = %+v", c.RunnerPods)
				}
				if c.forceAnnotation() != "" {
					t.Errorf("force annotation enabled, want disabled")
				}
				if c.OnError != OnErrorAllow || c.GitHubTimeout.Duration != 3*time.Second {
					t.Errorf("onError/githubTimeout = %s/%s", c.OnError, c.GitHubTimeout.Duration)
				}
				if len(c.Bypass.Users) != 0 || c.Bypass.Groups[0] != "ops" {
					t.Errorf("an explicit bypass list must replace the defaults: %+v", c.Bypass)
				}
			},
		},
		"unknown field":      {yaml: "runnerPod: []", wantErr: `unknown field "runnerPod"`},
		"not yaml":           {yaml: "runnerPods: [", wantErr: "parse config"},
		"bad on-error":       {yaml: "onError: maybe", wantErr: `onError: Unsupported value: "maybe"`},
		"negative duration":  {yaml: "busyRetryAfter: -1s", wantErr: `busyRetryAfter: Invalid value: "-1s": must not be negative`},
		"timeout too long":   {yaml: "githubTimeout: 20s", wantErr: `githubTimeout: Invalid value: "20s": longer than GitHub's own 10s`},
		"missing container":  {yaml: "runnerPods: [{name: a, selector: {matchLabels: {a: b}}, scopeEnv: {organization: X}}]", wantErr: "runnerPods[0].container"},
		"empty selector":     {yaml: "runnerPods: [{name: a, container: c, scopeEnv: {organization: X}}]", wantErr: "runnerPods[0].selector: Invalid value: \"\": must not be empty"},
		"bad selector":       {yaml: "runnerPods: [{name: a, container: c, scopeEnv: {organization: X}, selector: {matchExpressions: [{key: a, operator: Bogus}]}}]", wantErr: "runnerPods[0].selector"},
		"no scope source":    {yaml: "runnerPods: [{name: a, container: c, selector: {matchLabels: {a: b}}}]", wantErr: "runnerPods[0]: Required value: set scopeEnv or scopeLabels"},
		"empty scope source": {yaml: "runnerPods: [{name: a, container: c, selector: {matchLabels: {a: b}}, scopeLabels: {}}]", wantErr: "runnerPods[0].scopeLabels: Required value: name at least one"},
		"duplicate names": {
			yaml:    "runnerPods: [{name: a, container: c, selector: {matchLabels: {a: b}}, scopeEnv: {organization: X}}, {name: a, container: c, selector: {matchLabels: {a: c}}, scopeEnv: {organization: X}}]",
			wantErr: `runnerPods[1].name: Duplicate value: "a"`,
		},
		"empty force annotation":   {yaml: "forceDelete: {annotation: ' '}", wantErr: "forceDelete.annotation"},
		"namespace share over 1":   {yaml: "githubBudget: {namespaceShare: 1.5}", wantErr: "githubBudget.namespaceShare: Invalid value: 1.5"},
		"negative namespace share": {yaml: "githubBudget: {namespaceShare: -0.2}", wantErr: "githubBudget.namespaceShare: Invalid value: -0.2"},
		"namespace share": {
			yaml: "githubBudget: {namespaceShare: 0.25}",
			check: func(t *testing.T, c Config) {
				if got := c.GitHubBudget.BudgetConfig().NamespaceShare; got != 0.25 {
					t.Errorf("namespaceShare = %g, want 0.25", got)
				}
			},
		},
		"namespace share defaults to half": {
			yaml: "",
			check: func(t *testing.T, c Config) {
				if got := c.GitHubBudget.NamespaceShare; got != 0.5 {
					t.Errorf("namespaceShare = %g, want the default 0.5", got)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.yaml))
			if checkErr(t, err, tc.wantErr) {
				return
			}
			tc.check(t, c)
		})
	}
}

func TestParseOnErrorPolicy(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    OnErrorPolicy
		wantErr bool
	}{
		"deny":        {in: "deny", want: OnErrorDeny},
		"allow upper": {in: "ALLOW", want: OnErrorAllow},
		"empty":       {in: "", wantErr: true},
		"other":       {in: "ignore", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseOnErrorPolicy(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseOnErrorPolicy(%q) = %q, %v", tc.in, got, err)
			}
		})
	}
}

// The config file example in docs/configuration.md shows the defaults: parsed strictly, it
// must give exactly DefaultConfig(), so the two cannot drift apart.
func TestDocumentedConfigExampleIsTheDefault(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	i := strings.Index(section, "### Config file (`--config`)")
	if i < 0 {
		t.Fatal("docs/configuration.md has no config file section")
	}
	section = section[i:]
	start := strings.Index(section, "```yaml\n")
	end := strings.Index(section[start+8:], "```")
	if start < 0 || end < 0 {
		t.Fatal("the documented config file section has no yaml block")
	}
	got, err := ParseConfig([]byte(section[start+8 : start+8+end]))
	if err != nil {
		t.Fatalf("the documented config example does not parse: %v", err)
	}
	want := DefaultConfig()
	// The example spells out what defaulting fills in; compare as YAML.
	gotYAML, _ := yaml.Marshal(got)
	wantYAML, _ := yaml.Marshal(want)
	if string(gotYAML) != string(wantYAML) {
		t.Errorf("the documented config example differs from DefaultConfig():\n--- README\n%s\n--- DefaultConfig\n%s", gotYAML, wantYAML)
	}
}
