# Karpenter (its KWOK provider), KWOK and kube-scheduler beside the e2e
# control plane (test/karpenter). Included by the root Makefile.

# The scenarios need root (a network namespace of their own) and nsenter.
# `make test` runs them where it can; E2E_NODE=1 makes a machine that cannot
# a failure instead of a skip.
KARPENTER_CAPABLE := $(shell [ "$$(id -u)" = 0 ] && command -v nsenter >/dev/null && echo yes)

.PHONY: karpenter
karpenter: ## Build Karpenter (KWOK provider), KWOK and kube-scheduler into bin/karpenter (cached; Karpenter with GOTOOLCHAIN=go1.27.3).
	@$(CURDIR)/hack/build-karpenter.sh >/dev/null

# RUNNER_GUARD_KARPENTER_SKIP is cleared: make test sets it for its go test
# ./... stage (see below).
.PHONY: e2e-karpenter
e2e-karpenter: build k8s kustomize karpenter ## Run the Karpenter scenarios (root): consolidation and do-not-disrupt, a busy runner holding a chosen node.
	@start=$$SECONDS; RUNNER_GUARD_KARPENTER_SKIP= E2E_NODE=1 KUBEBUILDER_ASSETS=$(K8S_ASSETS) RUNNER_GUARD_BIN=$(BIN)/webhook \
	  KUSTOMIZE=$(KUSTOMIZE) KARPENTER_ASSETS=$$($(CURDIR)/hack/build-karpenter.sh) \
	  $(GO) test -count=1 -timeout 30m -v ./test/karpenter/ \
	  && echo "stage e2e-karpenter passed in $$((SECONDS-start))s"

# `make test` runs the scenarios where it can (or must: E2E_NODE=1) as a
# stage of their own beside `go test ./...`, verbosely, so each scenario's
# name, PASS line and figures are in the output; that `go test ./...` then
# runs only the package's unit tests.
ifneq ($(or $(filter 1,$(E2E_NODE)),$(KARPENTER_CAPABLE)),)
TEST_STAGES += e2e-karpenter
go-test: export RUNNER_GUARD_KARPENTER_SKIP := ran by make e2e-karpenter beside go test ./...
endif
