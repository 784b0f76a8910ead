package events

import "github.com/prometheus/client_golang/prometheus"

// Outcomes of a delivery, the outcome label of runner_guard_events_total.
const (
	OutcomeApplied      = "applied"
	OutcomeNoPod        = "no-runner-pod"
	OutcomeDuplicate    = "duplicate"
	OutcomeStale        = "stale"
	OutcomeIgnored      = "ignored"
	OutcomePing         = "ping"
	OutcomeUnauthorized = "unauthorized"
	OutcomeMalformed    = "malformed"
	OutcomeTooLarge     = "too-large"
	OutcomeFailed       = "failed"
	OutcomeWrongScope   = "wrong-scope"
	OutcomeBusy         = "busy"
)

// Metrics are the endpoint's metrics.
type Metrics struct {
	Events *prometheus.CounterVec
}

// NewMetrics builds the metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{Events: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runner_guard_events_total",
		Help: "GitHub webhook deliveries received on /github/events, by event (workflow_job, ping, other) and outcome.",
	}, []string{"event", "outcome"})}
}

// Collectors lists the metrics for registration.
func (m *Metrics) Collectors() []prometheus.Collector { return []prometheus.Collector{m.Events} }

// eventLabel keeps the label's values few: the header is the sender's to choose.
func eventLabel(event string) string {
	switch event {
	case "workflow_job", "ping":
		return event
	}
	return "other"
}

func (m *Metrics) count(event, outcome string) {
	if m != nil {
		m.Events.WithLabelValues(eventLabel(event), outcome).Inc()
	}
}
