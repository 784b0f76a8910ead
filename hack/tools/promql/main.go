// Command promql parses PromQL expressions with Prometheus' own parser and
// prints the vector selectors each names, for the chart's tests (test/chart:
// every metric an alert or a dashboard panel names must be one runner-guard
// serves). It lives in a module of its own so Prometheus' dependencies stay
// out of the product's go.mod.
//
// Input on stdin: a JSON array of expressions. Output on stdout: a JSON array
// with, per expression, its parse error or its selectors (metric name and the
// label names of its matchers, in order).
//
//	echo '["sum by (a) (rate(x_total{b=\"c\"}[5m]))"]' | promql
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/prometheus/promql/parser"
)

type selector struct {
	Metric string   `json:"metric"`
	Labels []string `json:"labels,omitempty"`
}

type result struct {
	Error     string     `json:"error,omitempty"`
	Selectors []selector `json:"selectors,omitempty"`
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintf(os.Stderr, "promql: stdin: want a JSON array of expressions: %v\n", err)
		os.Exit(2)
	}
	out := make([]result, 0, len(exprs))
	p := parser.NewParser(parser.Options{})
	for _, e := range exprs {
		out = append(out, parse(p, e))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "promql: %v\n", err)
		os.Exit(1)
	}
}

func parse(p parser.Parser, expr string) result {
	ast, err := p.ParseExpr(expr)
	if err != nil {
		return result{Error: err.Error()}
	}
	var r result
	parser.Inspect(ast, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		s := selector{Metric: vs.Name}
		for _, m := range vs.LabelMatchers {
			switch {
			case m.Name == "__name__" && s.Metric == "":
				// {__name__="x"}: the parser keeps the name as a matcher only.
				s.Metric = "{__name__" + m.Type.String() + m.Value + "}"
			case m.Name != "__name__":
				s.Labels = append(s.Labels, m.Name)
			}
		}
		r.Selectors = append(r.Selectors, s)
		return nil
	})
	return r
}
