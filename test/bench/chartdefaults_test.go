package main

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

func TestLocalArgs(t *testing.T) {
	cases := map[string]struct {
		chart []string
		want  []string
	}{
		"the chart's defaults": {
			chart: []string{"--self-managed-cert-secret=rg-cert", "--github-token-file=/etc/runner-guard/github/github_token",
				"--metrics-bind-address=:8443", "--health-probe-bind-address=:8081", "--hint-from-listing",
				"--webhook-configuration-name=runner-guard", "--config=/etc/runner-guard/config/config.yaml"},
			want: []string{"--config=/tmp/c.yaml", "--hint-from-listing", "--webhook-configuration-name=runner-guard"},
		},
		"behaviour flags kept, in order": {
			chart: []string{"--disruption-budgets=false", "--webhook-port=9444", "--rerun-lost-jobs", "--zap-log-level=debug"},
			want:  []string{"--config=/tmp/c.yaml", "--disruption-budgets=false", "--rerun-lost-jobs", "--zap-log-level=debug"},
		},
		"GitHub App and a CA bundle are the harness's": {
			chart: []string{"--github-app-id=$(GITHUB_APP_ID)", "--github-app-private-key-file=/k", "--github-ca-bundle=/ca", "--github-url=https://ghe/", "--github-allow-http"},
			want:  []string{"--config=/tmp/c.yaml"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := localArgs(tc.chart, "/tmp/c.yaml"); !slices.Equal(got, tc.want) {
				t.Errorf("localArgs(%q) = %q, want %q", tc.chart, got, tc.want)
			}
		})
	}
}

func TestEntryPolicy(t *testing.T) {
	ignore := admissionregistrationv1.Ignore
	deletes := admissionregistrationv1.ValidatingWebhook{Name: "legacy-runner-pods.runner-guard.io", FailurePolicy: &ignore,
		Rules: []admissionregistrationv1.RuleWithOperations{{Rule: admissionregistrationv1.Rule{Resources: []string{"pods"}}}}}
	evictions := admissionregistrationv1.ValidatingWebhook{Name: "evictions.runner-guard.io", FailurePolicy: &ignore,
		Rules: []admissionregistrationv1.RuleWithOperations{{Rule: admissionregistrationv1.Rule{Resources: []string{"pods/eviction"}}}}}
	annotated := map[string]string{"runner-guard.io/deletes-failure-policy": "Fail", "runner-guard.io/evictions-failure-policy": "Ignore"}
	cases := map[string]struct {
		annotations map[string]string
		entry       admissionregistrationv1.ValidatingWebhook
		want        admissionregistrationv1.FailurePolicyType
	}{
		"deletes entry takes its annotation":   {annotations: annotated, entry: deletes, want: admissionregistrationv1.Fail},
		"evictions entry takes its annotation": {annotations: annotated, entry: evictions, want: admissionregistrationv1.Ignore},
		"no annotation: as installed":          {entry: evictions, want: admissionregistrationv1.Ignore},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := entryPolicy(tc.annotations, &tc.entry); got != tc.want {
				t.Errorf("entryPolicy = %s, want %s", got, tc.want)
			}
		})
	}
}
