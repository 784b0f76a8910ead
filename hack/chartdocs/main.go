// Command chartdocs writes the Helm chart's README (charts/runner-guard/README.md)
// from README.md.tmpl, Chart.yaml and values.yaml: every value, its type, its
// default and the comment above it (values.schema.json's description when the
// comment is missing). `make chart-docs` runs it; its test fails when the
// README and values.yaml differ.
//
//	go run ./hack/chartdocs -chart charts/runner-guard
package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

//go:embed README.md.tmpl
var readmeTemplate string

func main() {
	chart := flag.String("chart", "charts/runner-guard", "chart directory: reads Chart.yaml, values.yaml and values.schema.json, writes README.md")
	check := flag.Bool("check", false, "write nothing; exit 1 when README.md differs from what would be written")
	flag.Parse()
	if err := run(*chart, *check); err != nil {
		fmt.Fprintf(os.Stderr, "chartdocs: %v\n", err)
		os.Exit(1)
	}
}

func run(chartDir string, check bool) error {
	want, err := renderChart(chartDir)
	if err != nil {
		return err
	}
	path := filepath.Join(chartDir, "README.md")
	if check {
		have, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(have, want) {
			return fmt.Errorf("%s differs from %s/values.yaml: run make chart-docs", path, chartDir)
		}
		return nil
	}
	return os.WriteFile(path, want, 0o644)
}

// chartMeta is what the README shows of Chart.yaml.
type chartMeta struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion"`
	KubeVersion string `json:"kubeVersion"`
}

// renderChart reads the chart directory's files and renders its README.
func renderChart(dir string) ([]byte, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	chartYAML, err := read("Chart.yaml")
	if err != nil {
		return nil, err
	}
	var meta chartMeta
	if err := sigsyaml.Unmarshal(chartYAML, &meta); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "Chart.yaml"), err)
	}
	values, err := read("values.yaml")
	if err != nil {
		return nil, err
	}
	schema, err := read("values.schema.json")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	desc, err := schemaDescriptions(schema)
	if err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	rows, err := valueRows(values, desc)
	if err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	return render(meta, rows)
}

func render(meta chartMeta, rows []row) ([]byte, error) {
	tmpl, err := template.New("README.md.tmpl").Parse(readmeTemplate)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, struct {
		Chart  chartMeta
		Values string
	}{meta, valuesTable(rows)}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// row is one value of the table.
type row struct {
	Key, Type, Default, Description string
}

// valueRows lists every value of a values.yaml: each leaf (scalar, list or
// empty map), and each map that has a comment of its own, in file order.
func valueRows(values []byte, schemaDesc map[string]string) ([]row, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("not a YAML mapping")
	}
	var rows []row
	var walk func(n *yaml.Node, prefix string) error
	walk = func(n *yaml.Node, prefix string) error {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := prefix + k.Value
			desc := comment(k.HeadComment)
			if desc == "" {
				desc = schemaDesc[key]
			}
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
				if desc != "" {
					rows = append(rows, row{Key: key, Type: "object", Description: desc})
				}
				if err := walk(v, key+"."); err != nil {
					return err
				}
				continue
			}
			def, err := defaultOf(v)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			rows = append(rows, row{Key: key, Type: typeOf(v), Default: def, Description: desc})
		}
		return nil
	}
	if err := walk(doc.Content[0], ""); err != nil {
		return nil, err
	}
	return rows, nil
}

func typeOf(v *yaml.Node) string {
	switch v.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "object"
	case yaml.AliasNode:
		return typeOf(v.Alias)
	}
	switch v.ShortTag() {
	case "!!int":
		return "int"
	case "!!float":
		return "float"
	case "!!bool":
		return "bool"
	case "!!null":
		return "null"
	}
	return "string"
}

// defaultOf is the value as compact JSON.
func defaultOf(v *yaml.Node) (string, error) {
	var x any
	if err := v.Decode(&x); err != nil {
		return "", err
	}
	b, err := json.Marshal(x)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// commentMarker is how a line of a values.yaml comment starts; "# --" (the
// helm-docs convention) marks a description too.
var commentMarker = regexp.MustCompile(`^#\s?(--\s)?`)

// comment turns a head comment into one table cell: lines joined with
// spaces; lines indented further (examples) each start a new line in code.
func comment(head string) string {
	if head == "" {
		return ""
	}
	var parts []string
	for _, line := range strings.Split(head, "\n") {
		line = commentMarker.ReplaceAllString(strings.TrimSpace(line), "")
		switch {
		case strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, "  "):
			parts = append(parts, "<br>`"+strings.ReplaceAll(strings.TrimSpace(line), "`", "'")+"`")
		default:
			parts = append(parts, escapeText(line))
		}
	}
	return strings.ReplaceAll(strings.Join(parts, " "), " <br>", "<br>")
}

// escapeText makes prose safe in a table cell: no HTML, no column breaks.
// Code spans keep their text.
func escapeText(s string) string {
	var b strings.Builder
	inCode := false
	for _, r := range s {
		switch {
		case r == '`':
			inCode = !inCode
			b.WriteRune(r)
		case r == '|':
			b.WriteString(`\|`)
		case !inCode && r == '<':
			b.WriteString("&lt;")
		case !inCode && r == '>':
			b.WriteString("&gt;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func valuesTable(rows []row) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n|---|---|---|---|\n")
	for _, r := range rows {
		def := ""
		if r.Default != "" {
			def = "`" + strings.ReplaceAll(r.Default, "|", `\|`) + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Key, r.Type, def, r.Description)
	}
	return b.String()
}

// schemaDescriptions maps dotted value keys to the description
// values.schema.json gives them.
func schemaDescriptions(schema []byte) (map[string]string, error) {
	out := map[string]string{}
	if len(schema) == 0 {
		return out, nil
	}
	type node struct {
		Description string           `json:"description"`
		Properties  map[string]*node `json:"properties"`
	}
	var root node
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, err
	}
	var walk func(n *node, prefix string)
	walk = func(n *node, prefix string) {
		keys := make([]string, 0, len(n.Properties))
		for k := range n.Properties {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			c := n.Properties[k]
			if c == nil {
				continue
			}
			if c.Description != "" {
				out[prefix+k] = escapeText(c.Description)
			}
			walk(c, prefix+k+".")
		}
	}
	walk(&root, "")
	return out, nil
}
