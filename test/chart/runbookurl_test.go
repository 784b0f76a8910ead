package chart

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/test/render"
)

// runbookBase is where every alert's runbook_url points, plus the alert's anchor.
const runbookBase = "https://github.com/runner-guard/runner-guard/blob/main/docs/runbook.md#"

// runbookHeading is one alert's section of docs/runbook.md.
var runbookHeading = regexp.MustCompile(`(?m)^### (RunnerGuard[A-Za-z]+)$`)

// githubAnchor is the anchor GitHub gives a heading: lower case, spaces as
// dashes, punctuation other than dashes and underscores dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestRunbookURLs: every alert the chart renders has a runbook_url pointing
// at its own section of docs/runbook.md, and the runbook has a section for
// no other alert.
func TestRunbookURLs(t *testing.T) {
	anchors := map[string]string{}
	for _, m := range runbookHeading.FindAllStringSubmatch(string(render.ReadFile(t, "docs", "runbook.md")), -1) {
		anchors[githubAnchor(m[1])] = m[1]
	}
	rules := alertRules(t, render.MustTemplate(t, append(monitoringValues(), "--set", "metrics.prometheusRule.enabled=true")...))
	for name, r := range rules {
		url := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, runbookBase)
		switch {
		case !ok:
			t.Errorf("alert %s: runbook_url %q, want %s<anchor>", name, url, runbookBase)
		case anchors[anchor] != name:
			t.Errorf("alert %s: runbook_url anchor #%s is not its section of docs/runbook.md (sections: %v)", name, anchor, slices.Sorted(maps.Keys(anchors)))
		}
	}
	for _, heading := range anchors {
		if _, ok := rules[heading]; !ok {
			t.Errorf("docs/runbook.md has a section for %s, which the chart does not render", heading)
		}
	}
}
