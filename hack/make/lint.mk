# Formatting and linting with golangci-lint (config: .golangci.yml). Included
# by the root Makefile.

GOLANGCI_LINT ?= $(BIN)/golangci-lint
# Extra flags for `golangci-lint run` (e.g. LINT_FLAGS="--new-from-rev=HEAD~1").
LINT_FLAGS    ?=
# Extra flags for `golangci-lint fmt` (FMT_FLAGS=-d shows the diff and writes nothing).
FMT_FLAGS     ?=
# The product's modules: lint and fmt cover these. The tool modules under
# hack/tools and test/*/tools are pins of other projects' code, not ours.
LINT_MODULES  ?= .

# `make test` runs the linter too.
TEST_DEPS += lint

# `lint` waits for another golangci-lint run on this machine (they share a
# lock) instead of failing.

# Rebuilt only when the pinned module changes (cold: a few minutes on 2 cores).
$(GOLANGCI_LINT): hack/tools/golangci-lint/go.mod hack/tools/golangci-lint/go.sum
	cd hack/tools/golangci-lint && $(GO) build -trimpath -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Build the pinned golangci-lint into bin/golangci-lint.

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (.golangci.yml) on the product's Go modules.
	@for m in $(LINT_MODULES); do \
	  echo "== golangci-lint run ($$m)"; \
	  (cd $$m && $(GOLANGCI_LINT) run --allow-serial-runners --config $(CURDIR)/.golangci.yml $(LINT_FLAGS) ./...) || exit 1; \
	done

# golangci-lint fmt descends into nested modules when given ./... or a
# directory, so it gets the .go files of each package of the module instead.
.PHONY: fmt
fmt: $(GOLANGCI_LINT) ## Format the Go code in place (gofmt, goimports with the local prefix; see .golangci.yml).
	@for m in $(LINT_MODULES); do \
	  (cd $$m && $(GOLANGCI_LINT) fmt --config $(CURDIR)/.golangci.yml $(FMT_FLAGS) $$($(GO) list -e -f '{{.Dir}}/*.go' ./...)) || exit 1; \
	done
