package chart

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/rerun"
	"github.com/runner-guard/runner-guard/test/render"
	"github.com/runner-guard/runner-guard/webhook"
)

// The alerts and their runbook lines in the README (charts/runner-guard and
// the top-level one).
var wantAlerts = []string{
	"RunnerGuardCredentialsUnusable",
	"RunnerGuardDenialSurge",
	"RunnerGuardGitHubBudgetLow",
	"RunnerGuardGitHubErrors",
	"RunnerGuardGitHubRateLimitLow",
	"RunnerGuardNoReadyReplica",
}

// externalMetrics are series other exporters serve that the alerts may read:
// runner-guard cannot report that none of its replicas is ready.
var externalMetrics = map[string]string{
	"kube_deployment_status_replicas_available": "kube-state-metrics",
}

// targetLabels are the labels Prometheus (the Operator's ServiceMonitor) adds
// to every scraped series.
var targetLabels = []string{"namespace", "pod", "job", "instance", "service", "endpoint", "container"}

func monitoringValues() []string {
	return []string{"--values", "testdata/values/certmanager-token.yaml"}
}

// servedFamily is a metric family the binary registers.
type servedFamily struct {
	labels    []string
	histogram bool
}

var descName = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// servedMetrics returns runner-guard's metric families the way cmd/webhook
// registers them (main.go: webhook.NewMetrics().Collectors(),
// ghclient.NewMetrics().Collectors() and the Router's Collectors(), into
// controller-runtime's registry). It reads each collector's descriptors
// rather than a scraped /metrics page: a vector shows in /metrics only once
// it has a series, so a page of a fresh binary would lack, e.g., every
// decisions_total series, while the descriptors name every family and its
// labels.
func servedMetrics(t *testing.T) map[string]servedFamily {
	t.Helper()
	gm := ghclient.NewMetrics()
	router, err := ghclient.NewRouter(ghclient.RouterConfig{Metrics: gm})
	if err != nil {
		t.Fatal(err)
	}
	dm := disruption.NewMetrics()
	collectors := slices.Concat(webhook.NewMetrics().Collectors(), gm.Collectors(), router.Collectors(), dm.Collectors(), rerun.NewMetrics(dm.JobsLost).Collectors())
	reg := prometheus.NewPedanticRegistry()
	families := map[string]servedFamily{}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			t.Fatalf("register %T: %v", c, err)
		}
		_, histogram := c.(*prometheus.HistogramVec)
		if _, ok := c.(prometheus.Histogram); ok {
			histogram = true
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			var labels []string
			for _, l := range strings.Split(m[2], ",") {
				if l = strings.TrimSpace(l); l != "" {
					labels = append(labels, l)
				}
			}
			families[m[1]] = servedFamily{labels: labels, histogram: histogram}
		}
	}
	if len(families) < 10 {
		t.Fatalf("read %d metric families, want every runner_guard_* one: %v", len(families), families)
	}
	return families
}

// promExpr is an expression to check and where it comes from.
type promExpr struct{ where, expr string }

// checkExprs parses every expression with Prometheus' parser and fails for a
// parse error, a selector that names no metric the binary serves (nor an
// external one), or a matcher on a label that metric lacks.
func checkExprs(t *testing.T, exprs []promExpr, served map[string]servedFamily) {
	t.Helper()
	src := make([]string, len(exprs))
	for i, e := range exprs {
		src[i] = e.expr
	}
	for i, p := range parsePromQL(t, src) {
		where := exprs[i].where
		if p.Error != "" {
			t.Errorf("%s: %s\n%s", where, p.Error, exprs[i].expr)
			continue
		}
		if len(p.Selectors) == 0 {
			t.Errorf("%s: %q names no metric", where, exprs[i].expr)
		}
		for _, s := range p.Selectors {
			checkSelector(t, where, s, served)
		}
	}
}

func checkSelector(t *testing.T, where string, s promSelector, served map[string]servedFamily) {
	t.Helper()
	if _, ok := externalMetrics[s.Metric]; ok {
		return
	}
	fam, ok := served[s.Metric]
	if !ok {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, cut := strings.CutSuffix(s.Metric, suffix); cut && served[base].histogram {
				fam, ok = served[base], true
				if suffix == "_bucket" {
					fam.labels = append(slices.Clone(fam.labels), "le")
				}
			}
		}
	}
	if !ok {
		t.Errorf("%s: metric %s is not served by the binary (nor by %v)", where, s.Metric, externalMetrics)
		return
	}
	for _, l := range s.Labels {
		if !slices.Contains(fam.labels, l) && !slices.Contains(targetLabels, l) {
			t.Errorf("%s: %s has no label %q (its labels: %v, target labels: %v)", where, s.Metric, l, fam.labels, targetLabels)
		}
	}
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func alertRules(t *testing.T, objs render.Objects) map[string]alertRule {
	t.Helper()
	rules := objs.OfKind("PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1: %v", len(rules), objs.Names())
	}
	groups, _, err := nestedSlice(rules[0].Object, "spec", "groups")
	if err != nil || len(groups) == 0 {
		t.Fatalf("PrometheusRule spec.groups: %v (%d groups)", err, len(groups))
	}
	out := map[string]alertRule{}
	for _, g := range groups {
		raw, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		var group struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		}
		if err := json.Unmarshal(raw, &group); err != nil {
			t.Fatal(err)
		}
		for _, r := range group.Rules {
			if _, dup := out[r.Alert]; dup {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			out[r.Alert] = r
		}
	}
	return out
}

type dashboard struct {
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func dashboardOf(t *testing.T, cm *unstructured.Unstructured) dashboard {
	t.Helper()
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if len(data) != 1 {
		t.Fatalf("dashboard ConfigMap data has keys %v, want one JSON file", data)
	}
	var d dashboard
	for k, v := range data {
		if !strings.HasSuffix(k, ".json") {
			t.Errorf("dashboard key %q: want a .json file name", k)
		}
		if err := json.Unmarshal([]byte(v), &d); err != nil {
			t.Fatalf("dashboard %s: %v", k, err)
		}
	}
	return d
}

// labelValuesQuery is the metric of a Grafana label_values(metric, label) query.
var labelValuesQuery = regexp.MustCompile(`^label_values\(\s*([^,]+?)\s*,\s*[a-zA-Z_]+\s*\)$`)

// TestMonitoringMetricsExist: every metric an alert or a dashboard panel
// names is one the binary serves (or kube-state-metrics', for the replica
// alert), and every label it matches on is one that metric has.
func TestMonitoringMetricsExist(t *testing.T) {
	served := servedMetrics(t)
	objs := render.MustTemplate(t, append(monitoringValues(),
		"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.grafanaDashboard.enabled=true")...)

	var exprs []promExpr
	rules := alertRules(t, objs)
	for name, r := range rules {
		exprs = append(exprs, promExpr{"alert " + name, r.Expr})
	}

	cm := objs.Find("ConfigMap", releaseName+"-dashboard")
	if cm == nil {
		t.Fatalf("no dashboard ConfigMap among %v", objs.Names())
	}
	d := dashboardOf(t, cm)
	for _, p := range d.Panels {
		for i, target := range p.Targets {
			exprs = append(exprs, promExpr{fmt.Sprintf("panel %q target %d", p.Title, i), target.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s query: %v", v.Name, err)
		}
		m := labelValuesQuery.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
			continue
		}
		exprs = append(exprs, promExpr{"variable " + v.Name, m[1]})
	}
	checkExprs(t, exprs, served)

	// The credentials alert counts the reason the decision table uses.
	if !strings.Contains(rules["RunnerGuardCredentialsUnusable"].Expr, fmt.Sprintf("reason=%q", webhook.ReasonCredentials)) {
		t.Errorf("RunnerGuardCredentialsUnusable does not match reason %q: %s", webhook.ReasonCredentials, rules["RunnerGuardCredentialsUnusable"].Expr)
	}
}

// TestMonitoringRenders renders with the rule and the dashboard on and off.
func TestMonitoringRenders(t *testing.T) {
	tests := map[string]struct {
		set        []string
		wantAlerts []string // nil: no PrometheusRule
		dashboard  string   // namespace of the dashboard ConfigMap; "": none
		check      func(t *testing.T, objs render.Objects)
	}{
		"defaults: neither": {},
		"rule only": {
			set:        []string{"metrics.prometheusRule.enabled=true"},
			wantAlerts: wantAlerts,
		},
		"dashboard only": {
			set:       []string{"metrics.grafanaDashboard.enabled=true"},
			dashboard: namespace,
		},
		"both, with labels, a selector and the dashboard elsewhere": {
			set: []string{"metrics.prometheusRule.enabled=true", "metrics.prometheusRule.labels.release=prom",
				"metrics.prometheusRule.additionalAlertLabels.team=ci", "metrics.prometheusRule.selector=job=\"rg\"",
				"metrics.grafanaDashboard.enabled=true", "metrics.grafanaDashboard.namespace=monitoring",
				"metrics.grafanaDashboard.label=dash", "metrics.grafanaDashboard.labelValue=yes",
				"metrics.grafanaDashboard.annotations.grafana_folder=CI"},
			wantAlerts: wantAlerts,
			dashboard:  "monitoring",
			check: func(t *testing.T, objs render.Objects) {
				pr := objs.OfKind("PrometheusRule")[0]
				if pr.GetLabels()["release"] != "prom" {
					t.Errorf("PrometheusRule labels %v, want release=prom", pr.GetLabels())
				}
				for name, r := range alertRules(t, objs) {
					if r.Labels["team"] != "ci" {
						t.Errorf("alert %s labels %v, want team=ci", name, r.Labels)
					}
					if name != "RunnerGuardNoReadyReplica" && (!strings.Contains(r.Expr, `job="rg"`) || strings.Contains(r.Expr, `namespace="`+namespace+`"`)) {
						t.Errorf("alert %s does not use the selector job=\"rg\" alone: %s", name, r.Expr)
					}
				}
				cm := objs.Find("ConfigMap", releaseName+"-dashboard")
				if cm.GetLabels()["dash"] != "yes" || cm.GetAnnotations()["grafana_folder"] != "CI" {
					t.Errorf("dashboard labels %v annotations %v, want dash=yes and grafana_folder=CI", cm.GetLabels(), cm.GetAnnotations())
				}
			},
		},
		"no Deployment: no replica alert": {
			set: []string{"metrics.prometheusRule.enabled=true", "deployment.enabled=false",
				"webhook.url=https://runner-guard.example:9443", "certificates.mode=generate"},
			wantAlerts: slices.DeleteFunc(slices.Clone(wantAlerts), func(a string) bool { return a == "RunnerGuardNoReadyReplica" }),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := monitoringValues()
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			objs := render.MustTemplate(t, args...)
			if tc.wantAlerts == nil {
				if n := len(objs.OfKind("PrometheusRule")); n != 0 {
					t.Errorf("%d PrometheusRules, want none", n)
				}
			} else {
				rules := alertRules(t, objs)
				var got []string
				for a, r := range rules {
					got = append(got, a)
					if r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
						t.Errorf("alert %s lacks an expr, a severity, a summary or a description: %+v", a, r)
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, tc.wantAlerts) {
					t.Errorf("alerts %v, want %v", got, tc.wantAlerts)
				}
				if r, ok := rules["RunnerGuardNoReadyReplica"]; ok && !strings.Contains(r.Expr, `deployment="`+releaseName+`-webhook"`) {
					t.Errorf("RunnerGuardNoReadyReplica does not watch Deployment %s-webhook: %s", releaseName, r.Expr)
				}
			}
			cm := objs.Find("ConfigMap", releaseName+"-dashboard")
			switch {
			case tc.dashboard == "" && cm != nil:
				t.Errorf("a dashboard ConfigMap, want none")
			case tc.dashboard != "" && cm == nil:
				t.Fatalf("no dashboard ConfigMap among %v", objs.Names())
			case tc.dashboard != "":
				if cm.GetNamespace() != tc.dashboard {
					t.Errorf("dashboard in namespace %q, want %q", cm.GetNamespace(), tc.dashboard)
				}
				if !slices.Contains(tc.set, "metrics.grafanaDashboard.label=dash") && cm.GetLabels()["grafana_dashboard"] != "1" {
					t.Errorf("dashboard labels %v, want the sidecar's grafana_dashboard=1", cm.GetLabels())
				}
				d := dashboardOf(t, cm)
				var titles []string
				for _, p := range d.Panels {
					if p.Type != "row" {
						titles = append(titles, p.Title)
					}
				}
				for _, want := range []string{"Decisions by reason", "GitHub requests", "GitHub latency", "GitHub budget (points per minute)"} {
					if !slices.Contains(titles, want) {
						t.Errorf("dashboard panels %q lack %q", titles, want)
					}
				}
			}
			if tc.check != nil {
				tc.check(t, objs)
			}
		})
	}
}

// TestMonitoringNeedsMetrics: alerts and a dashboard without the metrics they
// read are refused, naming the value.
func TestMonitoringNeedsMetrics(t *testing.T) {
	for _, v := range []string{"metrics.prometheusRule.enabled", "metrics.grafanaDashboard.enabled"} {
		t.Run(v, func(t *testing.T) {
			_, err := render.Template(t, append(monitoringValues(), "--set", v+"=true", "--set", "metrics.enabled=false")...)
			if err == nil || !strings.Contains(err.Error(), v+": ") {
				t.Errorf("error %v, want one naming %s", err, v)
			}
		})
	}
}

// TestRunbook: every alert the chart renders has its section in
// docs/runbook.md with the rule's severity, and the runbook names no other.
func TestRunbook(t *testing.T) {
	runbook := string(render.ReadFile(t, "docs/runbook.md"))
	rules := alertRules(t, render.MustTemplate(t, append(monitoringValues(), "--set", "metrics.prometheusRule.enabled=true")...))
	var documented []string
	for _, m := range runbookLine.FindAllStringSubmatch(runbook, -1) {
		documented = append(documented, m[1])
		if r, ok := rules[m[1]]; ok && r.Labels["severity"] != m[2] {
			t.Errorf("docs/runbook.md says %s is %s; the rule says %s", m[1], m[2], r.Labels["severity"])
		}
	}
	slices.Sort(documented)
	var rendered []string
	for name := range rules {
		rendered = append(rendered, name)
	}
	slices.Sort(rendered)
	if !slices.Equal(documented, rendered) {
		t.Errorf("docs/runbook.md sections %v, want one per alert the chart renders %v", documented, rendered)
	}
}

var runbookLine = regexp.MustCompile(`(?m)^### (RunnerGuard[A-Za-z]+)\n\nSeverity (warning|critical)\.`)
