package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

const chartDir = "../../charts/runner-guard"

// TestREADMEUpToDate fails when charts/runner-guard/README.md is not what
// values.yaml, Chart.yaml and the template give (what -check reports): run
// make chart-docs.
func TestREADMEUpToDate(t *testing.T) {
	if err := run(chartDir, true); err != nil {
		t.Fatal(err)
	}
}

// TestEveryValueDocumented: each leaf of values.yaml has a row, and a
// comment or a schema description says what it does (or its parent's row does).
func TestEveryValueDocumented(t *testing.T) {
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := valueRows(values, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]row{}
	for _, r := range rows {
		keys[r.Key] = r
	}
	for _, want := range []string{"image.repository", "policy.scopeBindings", "metrics.prometheusRule.enabled", "metrics.grafanaDashboard.label", "networkPolicy.webhookSources"} {
		if _, ok := keys[want]; !ok {
			t.Errorf("no row for %s", want)
		}
	}
}

func TestValueRows(t *testing.T) {
	tests := map[string]struct {
		values string
		schema map[string]string
		want   []row
	}{
		"leaves, types and defaults": {
			values: "# -- How many.\nreplicas: 2\nname: \"\"\nratio: 0.5\non: true\nlist: [a, b]\nempty: {}\n",
			want: []row{
				{Key: "replicas", Type: "int", Default: "2", Description: "How many."},
				{Key: "name", Type: "string", Default: `""`},
				{Key: "ratio", Type: "float", Default: "0.5"},
				{Key: "on", Type: "bool", Default: "true"},
				{Key: "list", Type: "list", Default: `["a","b"]`},
				{Key: "empty", Type: "object", Default: "{}"},
			},
		},
		"nested: a commented map gets a row, its leaves their own": {
			values: "# The webhook.\nwebhook:\n  # Its port.\n  port: 9443\n  url: \"\"\n",
			want: []row{
				{Key: "webhook", Type: "object", Description: "The webhook."},
				{Key: "webhook.port", Type: "int", Default: "9443", Description: "Its port."},
				{Key: "webhook.url", Type: "string", Default: `""`},
			},
		},
		"uncommented map: leaves only": {
			values: "a:\n  b: x\n",
			want:   []row{{Key: "a.b", Type: "string", Default: `"x"`}},
		},
		"schema description when no comment": {
			values: "a:\n  b: x\n  # Own words.\n  c: y\n",
			schema: map[string]string{"a.b": "From the schema.", "a.c": "Not used."},
			want:   []row{{Key: "a.b", Type: "string", Default: `"x"`, Description: "From the schema."}, {Key: "a.c", Type: "string", Default: `"y"`, Description: "Own words."}},
		},
		"examples, HTML and pipes": {
			values: "# Names <fullname>, a|b, e.g.\n#   kubectl label ns x a=b\n# and `<kept>`.\nx: 1\n",
			want:   []row{{Key: "x", Type: "int", Default: "1", Description: "Names &lt;fullname&gt;, a\\|b, e.g.<br>`kubectl label ns x a=b` and `<kept>`."}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := valueRows([]byte(tc.values), tc.schema)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("valueRows() =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestSchemaDescriptions(t *testing.T) {
	got, err := schemaDescriptions([]byte(`{"properties":{"a":{"description":"A <b>.","properties":{"b":{"description":"B."}}},"c":{"type":"string"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a"] != "A &lt;b&gt;." || got["a.b"] != "B." {
		t.Errorf("schemaDescriptions() = %q", got)
	}
	if _, err := schemaDescriptions([]byte(`{`)); err == nil {
		t.Error("a broken schema gave no error")
	}
}
