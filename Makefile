# runner-guard. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

BIN            ?= $(CURDIR)/bin
GO             ?= go
VERSION        ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS        := -s -w -X main.version=$(VERSION)
# Prerequisites of `make test`; fragments under hack/make add to it.
TEST_DEPS      := build kustomize
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
test: vet $(TEST_DEPS) k8s ## The full suite: go vet, golangci-lint, unit tests with -race, and the e2e suite (what CI runs).
	KUBEBUILDER_ASSETS=$(K8S_ASSETS) RUNNER_GUARD_BIN=$(BIN)/webhook $(GO) test -race -count=1 -timeout 60m ./...

.PHONY: demo
demo: build k8s kustomize ## Start a local control plane, fake GitHub and the webhook, and show a busy and an idle runner pod being deleted.
	KUBEBUILDER_ASSETS=$(K8S_ASSETS) RUNNER_GUARD_BIN=$(BIN)/webhook $(GO) run ./test/e2e/cmd/demo

.PHONY: clean
clean: ## Remove build outputs (keeps the cached control-plane binaries in bin/k8s).
	rm -f $(BIN)/webhook $(BIN)/kubectl-runner_guard
