package ghclient

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the GitHub client's Prometheus collectors. The caller registers
// Collectors() (e.g. in controller-runtime's metrics.Registry); nothing here is
// registered globally.
type Metrics struct {
	requests           *prometheus.CounterVec
	duration           *prometheus.HistogramVec
	rateLimitRemaining prometheus.Gauge
}

// NewMetrics creates unregistered collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runner_guard_github_requests_total",
			Help: "HTTP requests sent to the GitHub API, by method and status code (\"error\" when no response arrived).",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "runner_guard_github_request_duration_seconds",
			Help: "Time until the GitHub API answered a request (headers received), by method.",
			// Admission deadlines are a few seconds; resolve that range finely.
			Buckets: []float64{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10},
		}, []string{"method"}),
		rateLimitRemaining: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runner_guard_github_rate_limit_remaining",
			Help: "x-ratelimit-remaining from the most recent GitHub API response.",
		}),
	}
}

// Collectors returns the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.rateLimitRemaining}
}

// instrumentedTransport records every request that reaches the network; it sits
// under authentication so token exchanges are counted too, and requests that
// go-github refuses client-side (remembered rate limit) are not.
type instrumentedTransport struct {
	next    http.RoundTripper
	metrics *Metrics
}

func (t *instrumentedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	t.metrics.duration.WithLabelValues(req.Method).Observe(time.Since(start).Seconds())
	if err != nil {
		t.metrics.requests.WithLabelValues(req.Method, "error").Inc()
		return resp, err
	}
	t.metrics.requests.WithLabelValues(req.Method, strconv.Itoa(resp.StatusCode)).Inc()
	if v, perr := strconv.Atoi(resp.Header.Get("X-RateLimit-Remaining")); perr == nil {
		t.metrics.rateLimitRemaining.Set(float64(v))
	}
	return resp, nil
}
