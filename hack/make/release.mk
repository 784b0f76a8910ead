# The release: the commit --version reports, the multi-arch image index, the
# chart README (helm-docs), and the checks of the GitHub workflows. Included by the root
# Makefile.

# The commit `webhook --version` prints (the Go toolchain's own record of it is
# absent when GOFLAGS has -buildvcs=false).
COMMIT  ?= $(eval COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown))$(COMMIT)
LDFLAGS += -X main.commit=$(COMMIT)

ACTIONLINT ?= $(BIN)/actionlint
HELM_DOCS  ?= $(BIN)/helm-docs
# How `make chart-docs` runs helm-docs; test/chart/readme_test.go passes the same.
HELM_DOCS_FLAGS := --sort-values-order file --skip-version-footer --log-level warning
# shellcheck for the workflows' run: scripts (e.g. SHELLCHECK=shellcheck);
# empty skips it, so `make test` gives the same answer on every machine.
SHELLCHECK ?=
# Where `make image-push` pushes the OCI index (REGISTRY/OWNER/runner-guard,
# no tag; the release workflow passes its IMAGE_REPOSITORY variable), under
# which tags (the release pushes X.Y.Z, the chart's default image.tag, and
# vX.Y.Z), and the file it writes the pushed index's digest to.
IMAGE_REPOSITORY  ?=
IMAGE_TAGS        ?= $(VERSION)
IMAGE_DIGEST_FILE ?= $(BIN)/image-digest

# `make test` checks the GitHub workflows, and the chart README against helm-docs.
TEST_DEPS += lint-workflows $(HELM_DOCS)

# Rebuilt only when the pinned module changes.
$(ACTIONLINT): hack/tools/actionlint/go.mod hack/tools/actionlint/go.sum
	cd hack/tools/actionlint && $(GO) build -trimpath -o $@ github.com/rhysd/actionlint/cmd/actionlint

.PHONY: actionlint
actionlint: $(ACTIONLINT) ## Build the pinned actionlint into bin/actionlint.

.PHONY: lint-workflows
lint-workflows: $(ACTIONLINT) ## Check .github/workflows with actionlint (SHELLCHECK=shellcheck checks the run: scripts too).
	$(ACTIONLINT) -no-color -shellcheck="$(SHELLCHECK)" -pyflakes= .github/workflows/*.yml

.PHONY: image-push
image-push: $(IMAGE_TOOL) ## Push the OCI index of `make image` to IMAGE_REPOSITORY under IMAGE_TAGS (default VERSION; Docker config credentials); writes its digest to IMAGE_DIGEST_FILE.
	@test -n "$(IMAGE_REPOSITORY)" || { echo "image-push: set IMAGE_REPOSITORY=REGISTRY/OWNER/runner-guard" >&2; exit 2; }
	@test -f $(IMAGE_OCI)/index.json || { echo "image-push: no $(IMAGE_OCI): run make image first" >&2; exit 2; }
	$(IMAGE_TOOL) push -oci-layout $(IMAGE_OCI) $(foreach tag,$(IMAGE_TAGS),-ref $(IMAGE_REPOSITORY):$(tag)) -digest-file $(IMAGE_DIGEST_FILE)

# Rebuilt only when the pinned module changes.
$(HELM_DOCS): hack/tools/helm-docs/go.mod hack/tools/helm-docs/go.sum
	cd hack/tools/helm-docs && $(GO) build -trimpath -o $@ github.com/norwoodj/helm-docs/cmd/helm-docs

.PHONY: helm-docs
helm-docs: $(HELM_DOCS) ## Build the pinned helm-docs into bin/helm-docs.

.PHONY: chart-docs
chart-docs: $(HELM_DOCS) ## Regenerate charts/runner-guard/README.md from Chart.yaml, values.yaml (its `# --` comments) and README.md.gotmpl; a test fails when they differ.
	$(HELM_DOCS) --chart-search-root $(CHART_DIR) $(HELM_DOCS_FLAGS)
