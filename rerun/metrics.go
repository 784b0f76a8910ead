package rerun

import "github.com/prometheus/client_golang/prometheus"

// Metrics count lost jobs by Cause and Outcome, and re-run jobs by Cause.
type Metrics struct {
	lost, rerun *prometheus.CounterVec
}

// NewMetrics makes the re-run counter and counts lost jobs in lost
// (disruption.Metrics.JobsLost, labels cause and outcome, registered with
// the disruption controller's metrics; nil: a counter of its own,
// unregistered), every cause and outcome at 0.
func NewMetrics(lost *prometheus.CounterVec) *Metrics {
	if lost == nil {
		lost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runner_guard_jobs_lost_total"}, []string{"cause", "outcome"})
	}
	m := &Metrics{
		lost: lost,
		rerun: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runner_guard_jobs_rerun_total",
			Help: "Lost jobs GitHub accepted to re-run (--rerun-lost-jobs), by why their runner pod went.",
		}, []string{"cause"}),
	}
	for _, c := range Causes {
		for _, o := range Outcomes {
			m.lost.WithLabelValues(string(c), string(o))
		}
		m.rerun.WithLabelValues(string(c))
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector { return []prometheus.Collector{m.rerun} }

func (m *Metrics) jobLost(c Cause, o Outcome) { m.lost.WithLabelValues(string(c), string(o)).Inc() }
func (m *Metrics) jobRerun(c Cause)           { m.rerun.WithLabelValues(string(c)).Inc() }
