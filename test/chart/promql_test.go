package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A small PromQL reader: the vector selectors an expression names. The
// Prometheus parser (github.com/prometheus/prometheus/promql/parser) would do
// it too, but its module would pull Prometheus' whole dependency graph into
// the product's go.mod; the chart's expressions only need their metric names
// and the label names their matchers use.

// promSelector is one vector selector: a metric name and the label names its
// matchers use.
type promSelector struct {
	metric string
	labels []string
}

// promKeywords are identifiers that are never metric names: binary and set
// operators, modifiers, grouping clauses and aggregation operators (which may
// be followed by a grouping clause instead of their parenthesis).
var promKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "start": true, "end": true,
	"atan2": true, "inf": true, "nan": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// promGrouping are the keywords followed by a parenthesised list of label
// names, not expressions.
var promGrouping = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

// promSelectors returns the vector selectors of a PromQL expression, in
// order. Grafana variables ($name, ${name}, $__rate_interval) are skipped.
func promSelectors(expr string) ([]promSelector, error) {
	var out []promSelector
	i, n := 0, len(expr)
	skipSpace := func() {
		for i < n && strings.ContainsRune(" \t\r\n", rune(expr[i])) {
			i++
		}
	}
	skipString := func() error {
		q := expr[i]
		for i++; i < n; i++ {
			switch {
			case expr[i] == '\\' && q != '`':
				i++
			case expr[i] == q:
				i++
				return nil
			}
		}
		return fmt.Errorf("unterminated string in %q", expr)
	}
	ident := func() string {
		start := i
		for i < n && isIdentChar(expr[i]) {
			i++
		}
		return expr[start:i]
	}
	// matchers reads {...} after a metric name, returning its label names.
	matchers := func() ([]string, error) {
		var labels []string
		for i++; i < n; {
			skipSpace()
			switch c := expr[i]; {
			case c == '}':
				i++
				return labels, nil
			case c == ',':
				i++
			case c == '"' || c == '\'' || c == '`':
				if err := skipString(); err != nil {
					return nil, err
				}
			case isIdentStart(c):
				name := ident()
				if name == "__name__" {
					return nil, fmt.Errorf("%q: a __name__ matcher is not supported here; name the metric", expr)
				}
				labels = append(labels, name)
			case strings.ContainsRune("=!~", rune(c)):
				i++
			default:
				return nil, fmt.Errorf("unexpected %q in the matchers of %q", c, expr)
			}
		}
		return nil, fmt.Errorf("unterminated {} in %q", expr)
	}
	for i < n {
		skipSpace()
		if i >= n {
			break
		}
		switch c := expr[i]; {
		case c == '#': // a comment, to the end of the line
			for i < n && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(); err != nil {
				return nil, err
			}
		case c == '[': // a range or subquery: durations and Grafana variables
			end := strings.IndexByte(expr[i:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unterminated [] in %q", expr)
			}
			i += end + 1
		case c == '$': // a Grafana variable
			i++
			if i < n && expr[i] == '{' {
				end := strings.IndexByte(expr[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("unterminated ${} in %q", expr)
				}
				i += end + 1
			} else {
				ident()
			}
		case c == '{':
			return nil, fmt.Errorf("%q: a selector without a metric name is not supported here", expr)
		case c >= '0' && c <= '9' || c == '.': // a number or a duration
			for i < n && (isIdentChar(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			name := ident()
			skipSpace()
			next := byte(0)
			if i < n {
				next = expr[i]
			}
			switch {
			case promGrouping[name] && next == '(':
				end := strings.IndexByte(expr[i:], ')')
				if end < 0 {
					return nil, fmt.Errorf("unterminated %s (...) in %q", name, expr)
				}
				i += end + 1
			case promKeywords[name], next == '(': // a keyword or a function call
			default:
				sel := promSelector{metric: name}
				if next == '{' {
					labels, err := matchers()
					if err != nil {
						return nil, err
					}
					sel.labels = labels
				}
				out = append(out, sel)
			}
		default: // operators and punctuation
			i++
		}
	}
	return out, nil
}

func TestPromSelectors(t *testing.T) {
	tests := map[string]struct {
		expr    string
		want    []string // metric{label,label}
		wantErr string
	}{
		"plain":                 {expr: `up`, want: []string{"up"}},
		"matchers":              {expr: `runner_guard_decisions_total{reason="credentials-unusable", decision!~"a|b"}`, want: []string{"runner_guard_decisions_total{reason,decision}"}},
		"aggregation by before": {expr: `sum by (namespace, reason) (increase(x_total{namespace="ns"}[10m])) > 50`, want: []string{"x_total{namespace}"}},
		"aggregation by after":  {expr: `sum(rate(x_total[5m])) without (pod)`, want: []string{"x_total"}},
		"histogram quantile": {expr: `histogram_quantile(0.95, sum by (le, method) (rate(d_seconds_bucket{namespace=~"$namespace"}[$__rate_interval])))`,
			want: []string{"d_seconds_bucket{namespace}"}},
		"binary with on and comment": {expr: "min by (pod) (a) < 500\n# a comment naming not_a_metric\n  and on (namespace, pod)\nsum by (pod) (b_total) > 0",
			want: []string{"a", "b_total"}},
		"set operators and offset": {expr: `a / (b + c) or d offset 1h unless e @ start()`, want: []string{"a", "b", "c", "d", "e"}},
		"string with braces":       {expr: `label_replace(a, "dst", "$1", "src", "(.*){}")`, want: []string{"a"}},
		"grafana braces variable":  {expr: `rate(a{pod="${pod}"}[${__interval}])`, want: []string{"a{pod}"}},
		"bare matchers refused":    {expr: `{__name__="a"}`, wantErr: "without a metric name"},
		"__name__ refused":         {expr: `a{__name__="b"}`, wantErr: "__name__"},
		"unterminated string":      {expr: `a{b="c}`, wantErr: "unterminated"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sels, err := promSelectors(tc.expr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range sels {
				g := s.metric
				if len(s.labels) > 0 {
					g += "{" + strings.Join(s.labels, ",") + "}"
				}
				got = append(got, g)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("promSelectors(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}
