# The chart's monitoring extras (PrometheusRule, Grafana dashboard): the
# PromQL parser their tests use. Included by the root Makefile.

PROMQL ?= $(BIN)/promql
PROMTOOL ?= $(BIN)/promtool

# `make test` runs test/chart, which parses every alert and dashboard
# expression with Prometheus' parser.
TEST_DEPS += $(PROMQL) $(PROMTOOL)

# Rebuilt only when the pinned module or the command changes.
$(PROMQL): hack/tools/promql/go.mod hack/tools/promql/go.sum hack/tools/promql/main.go
	cd hack/tools/promql && $(GO) build -trimpath -o $@ .

.PHONY: promql
promql: $(PROMQL) ## Build bin/promql (Prometheus' PromQL parser, hack/tools/promql) for the chart's monitoring tests.

# promtool checks and unit-tests the rendered alerts (test/chart/promtool_test.go);
# same Prometheus version as hack/tools/promql. Built without Prometheus'
# service discoveries (its remove_all_sd tag): rule checks and rule tests use
# none, and they are most of its build (a cold build: 1.6 min, not 4).
$(PROMTOOL): hack/tools/promtool/go.mod hack/tools/promtool/go.sum
	cd hack/tools/promtool && $(GO) build -tags remove_all_sd -trimpath -o $@ github.com/prometheus/prometheus/cmd/promtool

.PHONY: promtool
promtool: $(PROMTOOL) ## Build bin/promtool (hack/tools/promtool) for `promtool check rules` and `promtool test rules` on the chart's alerts.

# The chart tests need them too when run alone.
test-chart: $(PROMQL) $(PROMTOOL)
