package chart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/test/render"
)

// PromQL is parsed by bin/promql (hack/tools/promql): Prometheus' own parser,
// built in a module of its own because github.com/prometheus/prometheus would
// upgrade the product's Prometheus client and pull its dependencies into the
// product's go.mod.

// promSelector is one vector selector: a metric name and the label names its
// matchers use.
type promSelector struct {
	Metric string   `json:"metric"`
	Labels []string `json:"labels"`
}

type promParsed struct {
	Error     string         `json:"error"`
	Selectors []promSelector `json:"selectors"`
}

func promqlBin(t *testing.T) string {
	return render.Tool(t, "PROMQL", "bin/promql", "run make promql or set PROMQL")
}

// grafanaInterval matches Grafana's interval variables, which are durations
// by the time Prometheus sees the query.
var grafanaInterval = regexp.MustCompile(`\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}`)

// parsePromQL parses each expression (Grafana's interval variables replaced
// by a duration) and returns its selectors, or its parse error.
func parsePromQL(t *testing.T, exprs []string) []promParsed {
	t.Helper()
	in := make([]string, len(exprs))
	for i, e := range exprs {
		in[i] = grafanaInterval.ReplaceAllString(e, "5m")
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promqlBin(t))
	cmd.Stdin = bytes.NewReader(b)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("promql: %v: %s", err, stderr.String())
	}
	var parsed []promParsed
	if err := json.Unmarshal(out, &parsed); err != nil {
		t.Fatalf("promql output: %v\n%s", err, out)
	}
	if len(parsed) != len(exprs) {
		t.Fatalf("promql answered %d expressions, want %d", len(parsed), len(exprs))
	}
	return parsed
}

// TestParsePromQL: the parser finds the selectors, the matchers' label names
// and the metric names grouping clauses, comments and strings only resemble,
// and refuses what Prometheus refuses.
func TestParsePromQL(t *testing.T) {
	tests := map[string]struct {
		expr    string
		want    []string // metric{label,label}
		wantErr string
	}{
		"matchers":          {expr: `runner_guard_decisions_total{reason="credentials-unusable", decision!~"a|b"}`, want: []string{"runner_guard_decisions_total{reason,decision}"}},
		"aggregation by":    {expr: `sum by (namespace, reason) (increase(x_total{namespace="ns"}[10m])) > 50`, want: []string{"x_total{namespace}"}},
		"grafana variables": {expr: `histogram_quantile(0.95, sum by (le) (rate(d_bucket{namespace=~"$namespace"}[$__rate_interval])))`, want: []string{"d_bucket{namespace}"}},
		"comment and on":    {expr: "min by (pod) (a) < 500\n# not_a_metric\n  and on (namespace, pod)\nsum by (pod) (b_total) > 0", want: []string{"a", "b_total"}},
		"unbalanced":        {expr: `sum(rate(a[5m])`, wantErr: "parse error"},
		"unknown function":  {expr: `rates(a[5m])`, wantErr: "unknown function"},
	}
	var exprs []string
	var names []string
	for name, tc := range tests {
		names = append(names, name)
		exprs = append(exprs, tc.expr)
	}
	parsed := parsePromQL(t, exprs)
	for i, name := range names {
		tc, p := tests[name], parsed[i]
		t.Run(name, func(t *testing.T) {
			if tc.wantErr != "" {
				if !strings.Contains(p.Error, tc.wantErr) {
					t.Fatalf("error %q, want %q", p.Error, tc.wantErr)
				}
				return
			}
			if p.Error != "" {
				t.Fatal(p.Error)
			}
			got := make([]string, 0, len(p.Selectors))
			for _, s := range p.Selectors {
				g := s.Metric
				if len(s.Labels) > 0 {
					g += "{" + strings.Join(s.Labels, ",") + "}"
				}
				got = append(got, g)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("selectors %q, want %q", got, tc.want)
			}
		})
	}
}
