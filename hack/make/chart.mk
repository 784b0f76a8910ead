# The Helm chart (charts/runner-guard): packaging and its tests. Included by
# the root Makefile.

HELM          ?= $(BIN)/helm
CHART_DIR     := charts/runner-guard
# The chart's version and appVersion (SemVer); default: those in Chart.yaml.
CHART_VERSION ?= $(eval CHART_VERSION := $(shell sed -n 's/^version: *//p' $(CHART_DIR)/Chart.yaml))$(CHART_VERSION)
CHART_APP_VERSION ?=

# `make test` runs the chart tests (lint, golden renders, kustomize agreement,
# bad values, and the install on the e2e control plane): they need bin/helm.
TEST_DEPS += $(HELM)

# Rebuilt only when the pinned module changes. The ldflags are those of Helm's
# own Makefile: its version, and the Kubernetes version `helm template` and
# `helm lint` assume (that of its client-go; the default, 1.20, fails the
# chart's kubeVersion).
HELM_PKG := helm.sh/helm/v3
$(HELM): hack/tools/helm/go.mod hack/tools/helm/go.sum
	cd hack/tools/helm && \
	  version=$$($(GO) list -m -f '{{.Version}}' $(HELM_PKG)) && \
	  kminor=$$($(GO) list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2) && \
	  $(GO) build -trimpath -o $@ -ldflags "-s -w -X $(HELM_PKG)/internal/version.version=$$version \
	    -X $(HELM_PKG)/pkg/chartutil.k8sVersionMajor=1 -X $(HELM_PKG)/pkg/chartutil.k8sVersionMinor=$$kminor \
	    -X $(HELM_PKG)/pkg/lint/rules.k8sVersionMajor=1 -X $(HELM_PKG)/pkg/lint/rules.k8sVersionMinor=$$kminor" \
	  $(HELM_PKG)/cmd/helm

.PHONY: helm
helm: $(HELM) ## Build the pinned Helm into bin/helm.

.PHONY: chart
chart: $(HELM) ## Lint and package the Helm chart into bin/runner-guard-<version>.tgz.
	$(HELM) lint $(CHART_DIR) --strict --set github.credentials.existingSecret=runner-guard-github \
	  --set 'policy.scopeBindings[0].namespaces={arc-runners}' --set 'policy.scopeBindings[0].scopes={org:acme}'
	$(HELM) package $(CHART_DIR) --destination $(BIN) --version $(CHART_VERSION) \
	  $(if $(CHART_APP_VERSION),--app-version $(CHART_APP_VERSION))

.PHONY: test-chart
test-chart: $(HELM) build k8s ## Run the chart tests (with the real API server for the install test).
	KUBEBUILDER_ASSETS=$(K8S_ASSETS) RUNNER_GUARD_BIN=$(BIN)/webhook HELM=$(HELM) \
	  $(GO) test -count=1 -timeout 20m ./test/chart/...

.PHONY: chart-golden
chart-golden: $(HELM) ## Regenerate the chart's golden renders (test/chart/testdata) after a deliberate change.
	HELM=$(HELM) $(GO) test -count=1 ./test/chart/ -run TestGolden -update
