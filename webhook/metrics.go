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
	// FromKnowledge counts decisions on a runner by where their word on it
	// came from: GitHub's DELETE, or knowledge that cost less.
	FromKnowledge *prometheus.CounterVec
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
		FromKnowledge: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runner_guard_decisions_from_knowledge_total",
			Help: "Decisions on a runner that needed its job state, by source: github (an unregister asked GitHub), job-fields (the EphemeralRunner's job), listing (the scope's shared listing), memory (a recent busy answer). Only github lets a pod go.",
		}, []string{"source"}),
		ScopesOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runner_guard_scope_bindings_open",
			Help: "1 when no scopeBindings are configured, so a runner pod in any namespace may name any GitHub scope; 0 when bindings limit them.",
		}),
	}
}

// Collectors lists the metrics for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Decisions, m.Retired, m.ScopesOpen, m.FromKnowledge}
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

// knowledge counts where a decision's word on the runner came from; m may be nil.
func (m *Metrics) knowledge(k knowledge) {
	if m != nil && k != "" {
		m.FromKnowledge.WithLabelValues(string(k)).Inc()
	}
}
