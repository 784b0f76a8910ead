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
	rateLimitRemaining *prometheus.GaugeVec
	hintsRejected      *prometheus.CounterVec
	budgetUsed         *prometheus.GaugeVec
	budgetLeft         *prometheus.GaugeVec
	budgetDeferredN    *prometheus.CounterVec
}

// Reasons an untrusted runner ID hint was not used (hintsRejected's label).
const (
	// hintOtherRunner: GitHub's record for the ID names another runner, as a
	// copied or forged ID would.
	hintOtherRunner = "other_runner"
	// hintNotFound: GitHub knows no runner with that ID in the scope.
	hintNotFound = "not_found"
)

// NewMetrics creates unregistered collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
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
		rateLimitRemaining: credentialGauge("runner_guard_github_rate_limit_remaining",
			"x-ratelimit-remaining from the most recent GitHub API response, per credential."),
		hintsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runner_guard_github_id_hints_rejected_total",
			Help: "Untrusted runner ID hints not used because GitHub's record for the ID names another runner (\"other_runner\") or does not exist (\"not_found\"); the runner was looked up by name instead.",
		}, []string{"reason"}),
		budgetUsed: credentialGauge("runner_guard_github_budget_points_used",
			"GitHub secondary-limit points (GET 1, other methods 5) this replica spent in the last minute, per credential."),
		budgetLeft: credentialGauge("runner_guard_github_budget_points_left",
			"Points this replica may still spend in the rolling minute, per credential (its share of the Deployment's budget)."),
		budgetDeferredN: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runner_guard_github_budget_deferred_total",
			Help: "GitHub requests the budget held back, per credential, priority (release, recheck) and result (waited: sent later; refused: never sent, the decision answered from what it knew).",
		}, []string{"credential", "priority", "result"}),
	}
	for _, reason := range []string{hintOtherRunner, hintNotFound} {
		m.hintsRejected.WithLabelValues(reason)
	}
	return m
}

// credentialGauge is a gauge of one credential's budget, labelled by the
// credential's name.
func credentialGauge(name, help string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"credential"})
}

// Collectors returns the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.rateLimitRemaining, m.hintsRejected, m.budgetUsed, m.budgetLeft, m.budgetDeferredN}
}

// hintRejected counts an untrusted ID hint that was not used; m may be nil.
func (m *Metrics) hintRejected(reason string) {
	if m != nil {
		m.hintsRejected.WithLabelValues(reason).Inc()
	}
}

// budget reports a credential's budget; m may be nil.
func (m *Metrics) budget(credential string, used, limit int) {
	if m != nil {
		m.budgetUsed.WithLabelValues(credential).Set(float64(used))
		m.budgetLeft.WithLabelValues(credential).Set(float64(max(limit-used, 0)))
	}
}

// rateLimitLeft reports a credential's x-ratelimit-remaining; m may be nil.
func (m *Metrics) rateLimitLeft(credential string, remaining int) {
	if m != nil {
		m.rateLimitRemaining.WithLabelValues(credential).Set(float64(remaining))
	}
}

// forgetCredential deletes every series of a credential whose budget is
// gone; m may be nil.
func (m *Metrics) forgetCredential(credential string) {
	if m == nil {
		return
	}
	for _, g := range []*prometheus.GaugeVec{m.budgetUsed, m.budgetLeft, m.rateLimitRemaining} {
		g.DeleteLabelValues(credential)
	}
	m.budgetDeferredN.DeletePartialMatch(prometheus.Labels{"credential": credential})
}

// budgetDeferred counts a request the budget held back; m may be nil.
func (m *Metrics) budgetDeferred(credential string, p Priority, result string) {
	if m != nil {
		m.budgetDeferredN.WithLabelValues(credential, p.String(), result).Inc()
	}
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
	return resp, nil
}
