package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// buildInfo is runner_guard_build_info: always 1, with the version and the Go
// version as labels, so dashboards and alerts can tell which release each
// replica runs (the convention of Prometheus' own *_build_info).
func buildInfo(version string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "runner_guard_build_info",
		Help:        "runner-guard's version and Go version (labels); always 1.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	}, func() float64 { return 1 })
}
