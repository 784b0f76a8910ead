package chart

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/runner-guard/runner-guard/test/render"
)

// The alerts are checked and evaluated by bin/promtool (hack/tools/promtool):
// Prometheus' own rule loader and unit-test runner, in a module of its own
// for the reason promql_test.go gives.

func promtoolBin(t *testing.T) string {
	return render.Tool(t, "PROMTOOL", "bin/promtool", "run make promtool or set PROMTOOL")
}

// rulesTest is the part of a promtool rules test file this test reads.
type rulesTest struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			AlertName string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestPromtoolRules runs `promtool check rules` and `promtool test rules` on
// the PrometheusRule the chart renders, with testdata/promtool's tests, and
// checks that each alert has a test where it fires.
func TestPromtoolRules(t *testing.T) {
	bin := promtoolBin(t)
	objs := render.MustTemplate(t, append(monitoringValues(), "--set", "metrics.prometheusRule.enabled=true")...)
	prs := objs.OfKind("PrometheusRule")
	if len(prs) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(prs))
	}
	rules, err := yaml.Marshal(prs[0].Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	tests := render.ReadFile(t, "test", "chart", "testdata", "promtool", "alerts.test.yaml")
	dir := t.TempDir()
	for name, data := range map[string][]byte{"rules.yaml": rules, "alerts.test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts.test.yaml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}

	var rt rulesTest
	if err := yaml.Unmarshal(tests, &rt); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName] = true
			}
		}
	}
	for name := range alertRules(t, objs) {
		if !fires[name] {
			t.Errorf("alert %s has no promtool test in which it fires (testdata/promtool/alerts.test.yaml)", name)
		}
		delete(fires, name)
	}
	if extra := slices.Sorted(maps.Keys(fires)); len(extra) > 0 {
		t.Errorf("promtool tests name alerts the chart does not render: %v", extra)
	}
}
