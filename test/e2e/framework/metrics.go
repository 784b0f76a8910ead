package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Sample is one replica's value of a series on its /metrics.
type Sample struct {
	// Replica is the replica's POD_NAME.
	Replica string
	Value   float64
	// Found is false when the replica's /metrics has no such line.
	Found bool
}

// ReplicaMetrics reads series (name{labels...} as Prometheus prints it)
// from each replica's plain-HTTP /metrics, in replica order. A gauge each
// replica keeps for itself is read here; Metric sums a counter over them.
func (e *Env) ReplicaMetrics(ctx context.Context, series string) ([]Sample, error) {
	var out []Sample
	for _, r := range e.replicas {
		body, err := getBody(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", r.metricsPort))
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", r.name, err)
		}
		v, found, err := metricSample(body, series)
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", r.name, err)
		}
		out = append(out, Sample{Replica: r.name, Value: v, Found: found})
	}
	return out, nil
}

// Metric is series summed over every replica's /metrics (counters add up;
// read a gauge per replica with ReplicaMetrics), and false when no replica
// has it.
func (e *Env) Metric(ctx context.Context, series string) (float64, bool, error) {
	samples, err := e.ReplicaMetrics(ctx, series)
	if err != nil {
		return 0, false, err
	}
	sum, found := 0.0, false
	for _, s := range samples {
		if s.Found {
			sum, found = sum+s.Value, true
		}
	}
	return sum, found, nil
}

// WebhookMetric is Metric, an error when no replica has the series.
func (e *Env) WebhookMetric(ctx context.Context, name string) (float64, error) {
	v, found, err := e.Metric(ctx, name)
	if err == nil && !found {
		err = fmt.Errorf("metric %s not in the webhook's /metrics", name)
	}
	return v, err
}

// metricSample is the value of the line of a Prometheus text exposition
// that starts with series, and false when there is none.
func metricSample(exposition, series string) (float64, bool, error) {
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				return 0, false, fmt.Errorf("%s: %w", series, err)
			}
			return v, true, nil
		}
	}
	return 0, false, nil
}

func getBody(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
