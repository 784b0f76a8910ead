// Package chart tests charts/runner-guard with the pinned Helm 4 (bin/helm, built
// from hack/tools/helm) and Helm 3 (bin/helm3, hack/tools/helm3): lint, golden renders of a values matrix, agreement
// with the kustomize render, values the chart must refuse, and an install on
// the e2e control plane.
package chart

import (
	"testing"

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
