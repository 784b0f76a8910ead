package disruption

import "github.com/prometheus/client_golang/prometheus"

// Causes of runner_guard_jobs_lost_total: why a job a runner held ended
// with its pod instead of on its own.
const (
	// LostDeleted: the busy runner's pod was deleted anyway (a delete
	// runner-guard allowed: forced, bypassed, a deadline, or runner-guard
	// down with failurePolicy Ignore).
	LostDeleted = "deleted"
	// LostNodeGone: the node went while the job still held it.
	LostNodeGone = "node-gone"
)

// Metrics are the disruption controller's. JobsLost is the one place the
// lost-jobs counter is defined: whatever else learns of a lost job counts
// it there, by cause.
type Metrics struct {
	// DrainHold is how long runner jobs held each drained node.
	DrainHold prometheus.Histogram
	// JobsLost counts jobs lost to a disruption, by cause.
	JobsLost *prometheus.CounterVec
	// JobAnnotationsUnverified counts runner pods whose runner-guard.io/job
	// annotation does not verify.
	JobAnnotationsUnverified prometheus.Gauge
}

// NewMetrics returns the controller's metrics, not yet registered.
func NewMetrics() *Metrics {
	return &Metrics{
		DrainHold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "runner_guard_drain_hold_seconds",
			Help: "How long runner jobs held a draining node, from the drain's start to the end of the last job it waited for (0: none held it); one observation per drain, when the node leaves or is uncordoned.",
			// From a few seconds to a long job's six hours.
			Buckets: []float64{1, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600},
		}),
		JobsLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runner_guard_jobs_lost_total",
			Help: "Jobs whose runner pod went away holding them, by why the pod went and by what became of them (rerun, excluded, ended, unnamed, refused: docs/reruns.md); each loss once.",
		}, []string{"cause", "outcome"}),
		JobAnnotationsUnverified: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runner_guard_job_annotations_unverified",
			Help: "Runner pods whose runner-guard.io/job annotation does not verify under any configured webhook secret (a rotation past its previous value's window, a removed secret, a forgery): each holds no job until its next delivery rewrites it.",
		}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.DrainHold, m.JobsLost, m.JobAnnotationsUnverified}
}

// JobLost counts one lost job; m may be nil.
func (m *Metrics) JobLost(cause, outcome string) {
	if m != nil {
		m.JobsLost.WithLabelValues(cause, outcome).Inc()
	}
}

// unverifiedGauge is JobAnnotationsUnverified; nil when m is.
func (m *Metrics) unverifiedGauge() prometheus.Gauge {
	if m == nil {
		return nil
	}
	return m.JobAnnotationsUnverified
}
