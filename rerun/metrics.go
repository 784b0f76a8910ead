package rerun

import "github.com/prometheus/client_golang/prometheus"

// Metrics count lost and re-run jobs by Cause.
type Metrics struct {
	lost, rerun *prometheus.CounterVec
}

// NewMetrics makes the counters, every cause at 0.
func NewMetrics() *Metrics {
	m := &Metrics{
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runner_guard_jobs_lost_total",
			Help: "Jobs that did not succeed after their runner pod went away holding them (GitHub's word, once the run completed), by why the pod went.",
		}, []string{"cause"}),
		rerun: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runner_guard_jobs_rerun_total",
			Help: "Lost jobs GitHub accepted to re-run (--rerun-lost-jobs), by why their runner pod went.",
		}, []string{"cause"}),
	}
	for _, c := range Causes {
		m.lost.WithLabelValues(string(c))
		m.rerun.WithLabelValues(string(c))
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector { return []prometheus.Collector{m.lost, m.rerun} }

func (m *Metrics) jobLost(c Cause)  { m.lost.WithLabelValues(string(c)).Inc() }
func (m *Metrics) jobRerun(c Cause) { m.rerun.WithLabelValues(string(c)).Inc() }
