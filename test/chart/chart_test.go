// Package chart tests charts/runner-guard with the pinned Helm 4 (bin/helm, built
// from hack/tools/helm) and Helm 3 (bin/helm3, hack/tools/helm3): lint, golden renders of a values matrix, agreement
// with the kustomize render, values the chart must refuse, and an install on
// the e2e control plane.
package chart

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/runner-guard/runner-guard/test/render"
)

// The release the static tests render: its names match dist/install.yaml.
const (
	releaseName = render.ReleaseName
	namespace   = render.Namespace
)

func nestedSlice(obj map[string]any, fields ...string) ([]any, bool, error) {
	return unstructured.NestedSlice(obj, fields...)
}

// webhookBin is the runner-guard binary `make build` writes, or $RUNNER_GUARD_BIN.
func webhookBin(t testing.TB) string {
	return render.Tool(t, "RUNNER_GUARD_BIN", "bin/webhook", "run make build or set RUNNER_GUARD_BIN")
}

// metricsRule is a NetworkPolicy's metrics rule with the monitoring values
// the NetworkPolicy tests render: the metrics port, from that namespace only.
const metricsRule = `{"ports":[{"protocol":"TCP","port":8443}],"from":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]}`

// checkPortRules checks a NetworkPolicy of two ingress rules: the first
// opens port (what serves there) to the peers from (JSON), the second is
// metricsRule.
func checkPortRules(t *testing.T, np *networkingv1.NetworkPolicy, what string, port int, from string) {
	t.Helper()
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("ingress %s, want the %s and metrics rules", render.JSON(t, np.Spec.Ingress), what)
	}
	rule := np.Spec.Ingress[0]
	if len(rule.Ports) != 1 || rule.Ports[0].Port.IntValue() != port {
		t.Errorf("first rule ports %s, want the %s port %d", render.JSON(t, rule.Ports), what, port)
	}
	if got := render.JSON(t, rule.From); got != from {
		t.Errorf("%s port from %s\nwant %s", what, got, from)
	}
	if got := render.JSON(t, np.Spec.Ingress[1]); got != metricsRule {
		t.Errorf("metrics rule %s\nwant %s", got, metricsRule)
	}
}
