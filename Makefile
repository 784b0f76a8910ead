# runner-guard. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

BIN            ?= $(CURDIR)/bin
GO             ?= go
VERSION        ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS        := -s -w -X main.version=$(VERSION)
# The release test/node's upgrade test starts from: its chart and webhook
# image, built from this commit (the project's previous release once there is
# one; until then the last landed submission), are installed and then
# upgraded to the working tree mid-drain (hack/make/node.mk).
UPGRADE_BASELINE ?= 43f761b
# Prerequisites of `make test`'s go test ./...; fragments under hack/make add to it.
TEST_DEPS      := build kustomize
# The stages of `make test`, which share nothing at run time (go test ./...
# on loopback, the Karpenter scenarios and the real node each in a network
# namespace of their own): fragments add theirs, and `make test` runs
# TEST_JOBS of them side by side (TEST_JOBS=1: one after another).
TEST_STAGES    := go-test
TEST_JOBS      ?= 3
# Where the control-plane binaries live; the script prints it after building
# them once (cold: about 12 minutes on 2 cores).
K8S_ASSETS      = $(shell $(CURDIR)/hack/build-k8s.sh)

# Fragments add targets and append to TEST_DEPS; include them before the rules
# that read TEST_DEPS, since make expands prerequisites as it reads a rule.
-include hack/make/*.mk

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the webhook binary into bin/webhook.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/webhook ./cmd/webhook

.PHONY: kubectl-plugin
kubectl-plugin: ## Build the kubectl plugin bin/kubectl-runner_guard (`kubectl runner-guard explain POD` with bin/ on PATH).
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/kubectl-runner_guard ./cmd/kubectl-runner_guard

.PHONY: k8s
k8s: ## Build etcd, kube-apiserver, kube-controller-manager and kubectl into bin/k8s (cached).
	@$(CURDIR)/hack/build-k8s.sh >/dev/null

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet ./...

.PHONY: unit
unit: ## Run the unit tests with -race (no API server).
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /test/e2e)

.PHONY: e2e
e2e: build k8s kustomize ## Run only the e2e suite against a real kube-apiserver, etcd and kube-controller-manager.
	KUBEBUILDER_ASSETS=$(K8S_ASSETS) RUNNER_GUARD_BIN=$(BIN)/webhook $(GO) test -count=1 -timeout 30m -v ./test/e2e/...

.PHONY: test
test: ## The full suite (what CI runs): go vet, golangci-lint, unit tests with -race, the e2e suite, and where the machine allows the Karpenter and real-node scenarios, side by side (TEST_JOBS).
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(TEST_STAGES)
	@echo "make test: every stage passed ($(TEST_STAGES))"

# Each stage's output is printed whole when it ends (--output-sync), so the
# side-by-side runs do not interleave.
.PHONY: go-test
go-test: vet $(TEST_DEPS) k8s ## go test ./... with -race (unit, e2e, chart, process), the stage of `make test` every machine runs.
	@start=$$SECONDS; KUBEBUILDER_ASSETS=$(K8S_ASSETS) RUNNER_GUARD_BIN=$(BIN)/webhook $(GO) test -race -count=1 -timeout 60m ./... \
	  && echo "stage go-test passed in $$((SECONDS-start))s"

.PHONY: demo
demo: build k8s kustomize ## Start a local control plane, fake GitHub and the webhook, and show a busy and an idle runner pod being deleted.
	KUBEBUILDER_ASSETS=$(K8S_ASSETS) RUNNER_GUARD_BIN=$(BIN)/webhook $(GO) run ./test/e2e/cmd/demo

.PHONY: clean
clean: ## Remove build outputs (keeps the cached control-plane binaries in bin/k8s).
	rm -f $(BIN)/webhook $(BIN)/kubectl-runner_guard
