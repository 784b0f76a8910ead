# Measurement: fuzzing and the benchmark program. Included by the root Makefile.

# How long `make fuzz` runs each target (a go test -fuzztime value: 60s, 10000x).
FUZZTIME    ?= 60s
# Time spent minimizing each new interesting input (go's default, 60s, can eat
# a whole FUZZTIME on the admission target, whose inputs are large).
FUZZMINIMIZETIME ?= 2s
# Fuzz workers per target (go test -parallel); default GOMAXPROCS.
FUZZ_PARALLEL ?=
# package:FuzzTarget pairs `make fuzz` runs, one after another.
FUZZ_TARGETS ?= ./webhook:FuzzAdmissionHTTP ./webhook:FuzzRunnerRecognition ./ghclient:FuzzResponses
# Extra flags for the benchmark program (e.g. BENCH_FLAGS="-duration 3s").
BENCH_FLAGS ?=

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 60s) one after another; seed corpora in testdata/fuzz.
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  echo "== $$name ($$pkg, $(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $(if $(FUZZ_PARALLEL),-parallel $(FUZZ_PARALLEL)) $$pkg || exit 1; \
	done

.PHONY: bench
bench: build k8s kustomize $(HELM) ## Run the benchmark program (GitHub calls per decision, throughput, latency, RSS, the disruption controller's hint lag and drain); see docs/PERFORMANCE.md.
	KUBEBUILDER_ASSETS=$(K8S_ASSETS) KUSTOMIZE=$(KUSTOMIZE) HELM=$(HELM) RUNNER_GUARD_BIN=$(BIN)/webhook $(GO) run ./test/bench $(BENCH_FLAGS)

.PHONY: bench-compare
bench-compare: k8s kustomize $(HELM) ## Run the benchmark program at BASE=<git ref> and at the working tree, one after the other, and print every figure of both with head/base.
	KUBEBUILDER_ASSETS=$(K8S_ASSETS) KUSTOMIZE=$(KUSTOMIZE) HELM=$(HELM) BENCH_FLAGS='$(BENCH_FLAGS)' $(CURDIR)/hack/bench-compare.sh '$(BASE)'
