# The chart's monitoring extras (PrometheusRule, Grafana dashboard): the
# PromQL parser their tests use. Included by the root Makefile.

PROMQL ?= $(BIN)/promql

# `make test` runs test/chart, which parses every alert and dashboard
# expression with Prometheus' parser.
TEST_DEPS += $(PROMQL)

# Rebuilt only when the pinned module or the command changes.
$(PROMQL): hack/tools/promql/go.mod hack/tools/promql/go.sum hack/tools/promql/main.go
	cd hack/tools/promql && $(GO) build -trimpath -o $@ .

.PHONY: promql
promql: $(PROMQL) ## Build bin/promql (Prometheus' PromQL parser, hack/tools/promql) for the chart's monitoring tests.

# The chart tests need it too when run alone.
test-chart: $(PROMQL)
