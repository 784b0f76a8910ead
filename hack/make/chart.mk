# The Helm chart (charts/runner-guard): packaging and its tests. Included by
# the root Makefile.

HELM          ?= $(BIN)/helm
# Helm 3 still installs and upgrades the chart, tested for one more release
# (its security fixes end in February 2027).
HELM3         ?= $(BIN)/helm3
CHART_DIR     := charts/runner-guard
# The chart's version and appVersion (SemVer); default: those in Chart.yaml.
CHART_VERSION ?= $(eval CHART_VERSION := $(shell sed -n 's/^version: *//p' $(CHART_DIR)/Chart.yaml))$(CHART_VERSION)
CHART_APP_VERSION ?=

# `make test` runs the chart tests (lint, golden renders, kustomize agreement,
# bad values, and the install on the e2e control plane) with Helm 4, and an
# install and upgrade with Helm 3: they need both.
TEST_DEPS += $(HELM) $(HELM3)

# Each is rebuilt only when its pinned module changes. Helm 4 takes the
# Kubernetes version `helm template` and `helm lint` assume from its
# client-go's module version at run time, so only its own version is stamped
# (helm.sh/helm/v4/internal/version, as its Makefile does for a tag). Helm 3
# needs both stamped: the default Kubernetes version, 1.20, fails the chart's
# kubeVersion.
$(HELM): hack/tools/helm/go.mod hack/tools/helm/go.sum
	cd hack/tools/helm && \
	  version=$$($(GO) list -m -f '{{.Version}}' helm.sh/helm/v4) && \
	  $(GO) build -trimpath -o $@ -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$$version \
	    -X helm.sh/helm/v4/internal/version.metadata=" helm.sh/helm/v4/cmd/helm

HELM3_PKG := helm.sh/helm/v3
$(HELM3): hack/tools/helm3/go.mod hack/tools/helm3/go.sum
	cd hack/tools/helm3 && \
	  version=$$($(GO) list -m -f '{{.Version}}' $(HELM3_PKG)) && \
	  kminor=$$($(GO) list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2) && \
	  $(GO) build -trimpath -o $@ -ldflags "-s -w -X $(HELM3_PKG)/internal/version.version=$$version \
	    -X $(HELM3_PKG)/pkg/chartutil.k8sVersionMajor=1 -X $(HELM3_PKG)/pkg/chartutil.k8sVersionMinor=$$kminor \
	    -X $(HELM3_PKG)/pkg/lint/rules.k8sVersionMajor=1 -X $(HELM3_PKG)/pkg/lint/rules.k8sVersionMinor=$$kminor" \
	  $(HELM3_PKG)/cmd/helm

.PHONY: helm
helm: $(HELM) $(HELM3) ## Build the pinned Helm 4 into bin/helm and Helm 3 into bin/helm3.

.PHONY: chart
chart: $(HELM) ## Lint and package the Helm chart into bin/runner-guard-<version>.tgz.
	$(HELM) lint $(CHART_DIR) --strict --set github.credentials.existingSecret=runner-guard-github \
	  --set 'policy.scopeBindings[0].namespaces={arc-runners}' --set 'policy.scopeBindings[0].scopes={org:acme}'
	$(HELM) package $(CHART_DIR) --destination $(BIN) --version $(CHART_VERSION) \
	  $(if $(CHART_APP_VERSION),--app-version $(CHART_APP_VERSION))

.PHONY: test-chart
test-chart: $(HELM) $(HELM3) build k8s ## Run the chart tests (with the real API server for the install test).
	KUBEBUILDER_ASSETS=$(K8S_ASSETS) RUNNER_GUARD_BIN=$(BIN)/webhook HELM=$(HELM) HELM3=$(HELM3) \
	  $(GO) test -count=1 -timeout 20m ./test/chart/...

.PHONY: chart-golden
chart-golden: $(HELM) ## Regenerate the chart's golden renders (test/chart/testdata) after a deliberate change.
	HELM=$(HELM) $(GO) test -count=1 ./test/chart/ -run TestGolden -update
