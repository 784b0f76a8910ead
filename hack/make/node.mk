# The real node (test/node): kubelet, containerd, kube-proxy and the control
# plane in a network namespace, runner-guard deployed as pods. Included by the
# root Makefile.

NODE_IMAGE_PAUSE      ?= $(BIN)/node-pause-image.tar
NODE_IMAGE_FAKERUNNER ?= $(BIN)/fakerunner-image.tar
# What test/node reads (written by node-deps): binaries, images, helm (it
# installs runner-guard from charts/runner-guard).
NODE_ENV_FILE         := $(BIN)/node.env
# The node needs root and network namespaces. `make test` runs it where it
# can; E2E_NODE=1 makes a machine that cannot a failure instead of a skip.
NODE_CAPABLE          := $(shell [ "$$(id -u)" = 0 ] && command -v nsenter >/dev/null && command -v ip >/dev/null && echo yes)

.PHONY: node
node: ## Build kubelet, kube-scheduler, kube-proxy, containerd v2 and the CNI plugins into bin/node (cached).
	@$(CURDIR)/hack/build-node.sh >/dev/null

.PHONY: node-images
node-images: $(IMAGE_TOOL) ## Build the node's pause image and the fake runner image (bin/node-pause-image.tar, bin/fakerunner-image.tar).
	$(call image-build-binary,./test/node/cmd/pause,$(BIN)/linux-$(IMAGE_ARCH)/pause)
	$(IMAGE_TOOL) -binary $(BIN)/linux-$(IMAGE_ARCH)/pause -path /pause -out $(NODE_IMAGE_PAUSE) -ca-bundle= \
	  -tag runner-guard-pause:latest -version $(VERSION) -arch $(IMAGE_ARCH) -title runner-guard-pause \
	  -description "Pod sandbox for runner-guard's node tests"
	$(call image-build-binary,./test/node/cmd/fakerunner,$(BIN)/linux-$(IMAGE_ARCH)/fakerunner)
	$(IMAGE_TOOL) -binary $(BIN)/linux-$(IMAGE_ARCH)/fakerunner -path /fakerunner -out $(NODE_IMAGE_FAKERUNNER) -ca-bundle= \
	  -tag runner-guard-fakerunner:latest -version $(VERSION) -arch $(IMAGE_ARCH) -title runner-guard-fakerunner \
	  -description "A GitHub Actions runner played against the fake GitHub, for runner-guard's node tests"

# The upgrade test's starting point (UPGRADE_BASELINE, root Makefile): the
# chart and the webhook image of that commit, taken with git archive (CI
# clones main with its history) and built as `make image` builds the IMAGE_ARCH
# image, tagged runner-guard:baseline-<commit>. Cached in bin/ by the commit;
# a baseline that does not build fails here (and so make test), never skips.
NODE_BASELINE_DIR     := $(BIN)/upgrade-baseline/$(UPGRADE_BASELINE)
NODE_BASELINE_TAG     := baseline-$(UPGRADE_BASELINE)

.PHONY: node-upgrade-baseline
node-upgrade-baseline: $(NODE_BASELINE_DIR)/image.tar ## Build the upgrade test's baseline chart and webhook image (UPGRADE_BASELINE) into bin/upgrade-baseline/.

$(NODE_BASELINE_DIR)/image.tar: | $(IMAGE_TOOL)
	@[ -n "$(UPGRADE_BASELINE)" ] || { echo "node: UPGRADE_BASELINE is empty" >&2; exit 1; }
	rm -rf $(NODE_BASELINE_DIR).tmp && mkdir -p $(NODE_BASELINE_DIR).tmp/src
	git -C $(CURDIR) archive --format=tar $(UPGRADE_BASELINE) | tar -x -C $(NODE_BASELINE_DIR).tmp/src
	cd $(NODE_BASELINE_DIR).tmp/src && CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath \
	  -ldflags "-s -w -X main.version=$(NODE_BASELINE_TAG)" -o $(NODE_BASELINE_DIR).tmp/webhook ./cmd/webhook
	$(IMAGE_TOOL) -binary $(NODE_BASELINE_DIR).tmp/webhook -path /webhook -out $(NODE_BASELINE_DIR).tmp/image.tar -arch $(IMAGE_ARCH) \
	  -tag runner-guard:$(NODE_BASELINE_TAG) -version $(NODE_BASELINE_TAG) -ca-bundle "$(IMAGE_CA_BUNDLE)" \
	  -title runner-guard -description "runner-guard at $(UPGRADE_BASELINE), the node's upgrade test's baseline"
	mv $(NODE_BASELINE_DIR).tmp/src/charts $(NODE_BASELINE_DIR).tmp/charts
	rm -rf $(NODE_BASELINE_DIR).tmp/src $(NODE_BASELINE_DIR).tmp/webhook $(NODE_BASELINE_DIR)
	mv $(NODE_BASELINE_DIR).tmp $(NODE_BASELINE_DIR)

.PHONY: node-deps
node-deps: k8s node $(HELM) image image-fakegithub node-images node-upgrade-baseline
	@[ "$(NODE_CAPABLE)" = yes ] || { echo "node: cannot run the real node here: it needs root, nsenter and ip (iproute2)" >&2; exit 1; }
	@{ echo "KUBEBUILDER_ASSETS=$(K8S_ASSETS)"; \
	   echo "RUNNER_GUARD_NODE_ASSETS=$$($(CURDIR)/hack/build-node.sh)"; \
	   echo "RUNNER_GUARD_NODE_IMAGES=$(NODE_IMAGE_PAUSE) $(IMAGE_TAR) $(FAKEGITHUB_TAR) $(NODE_IMAGE_FAKERUNNER)"; \
	   echo "RUNNER_GUARD_NODE_BASELINE=$(UPGRADE_BASELINE) $(NODE_BASELINE_TAG) $(NODE_BASELINE_DIR)/image.tar $(NODE_BASELINE_DIR)/charts/runner-guard"; \
	   echo "HELM=$(HELM)"; } > $(NODE_ENV_FILE)

# RUNNER_GUARD_NODE_SKIP is cleared: make test sets it for its go test ./...
# stage (see below).
.PHONY: e2e-node
e2e-node: node-deps ## Run the real-node scenarios (root): runner-guard installed with helm, busy/idle runners, drain, rollout, the e2e suite, dist/install.yaml.
	@start=$$SECONDS; RUNNER_GUARD_NODE_SKIP= E2E_NODE=1 RUNNER_GUARD_NODE_ENV=$(NODE_ENV_FILE) $(GO) test -count=1 -timeout 45m -v ./test/node/ \
	  && echo "stage e2e-node passed in $$((SECONDS-start))s"

# `make test` runs the node where it can (or must: E2E_NODE=1), as a stage
# of its own beside `go test ./...` and verbosely, so each scenario's name and
# PASS line are in the output; that `go test ./...` then skips the package
# instead of running the node a second time.
ifneq ($(or $(filter 1,$(E2E_NODE)),$(NODE_CAPABLE)),)
TEST_STAGES += e2e-node
go-test: export RUNNER_GUARD_NODE_SKIP := ran by make e2e-node beside go test ./...
endif
