package webhook

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the handler's Prometheus metrics; the caller registers them
// (controller-runtime's metrics.Registry in the binary).
type Metrics struct {
	Decisions *prometheus.CounterVec
	// Retired counts EphemeralRunner deletions after an unregister, by result.
	Retired *prometheus.CounterVec
	// ScopesOpen is 1 when no scope binding limits what runner pods may name.
	ScopesOpen prometheus.Gauge
}

// NewMetrics creates unregistered metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runner_guard_decisions_total",
			Help: "Admission decisions on runner-pod deletes and evictions, by operation, decision (allow|deny) and reason.",
		}, []string{"operation", "decision", "reason"}),
		Retired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runner_guard_ephemeralrunners_retired_total",
			Help: "EphemeralRunners deleted after runner-guard unregistered their runner, by result (ok|error).",
		}, []string{"result"}),
		ScopesOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runner_guard_scope_bindings_open",
			Help: "1 when no scopeBindings are configured, so a runner pod in any namespace may name any GitHub scope; 0 when bindings limit them.",
		}),
	}
}

// Collectors lists the metrics for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Decisions, m.Retired, m.ScopesOpen}
}

func (m *Metrics) observe(op Operation, d Decision) {
	if m == nil {
		return
	}
	decision := "deny"
	if d.Allowed {
		decision = "allow"
	}
	m.Decisions.WithLabelValues(string(op), decision, string(d.Reason)).Inc()
}

// ObserveRetired counts one EphemeralRunner retirement (the disruption
// controller's Retirer deletes them).
func (m *Metrics) ObserveRetired(err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.Retired.WithLabelValues(result).Inc()
}
