package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
)

// Fake is the in-process fake GitHub, nil when the fake runs in the cluster:
// its webhook deliveries (DeliverEvents) need a URL this process reaches.
func (e *Env) Fake() *ghfake.Fake { return e.fake }

// Metric reads one sample of the webhook's plain-HTTP /metrics: the value
// of the line that starts with series (name{labels...} as Prometheus
// prints it), and false when there is none.
func (e *Env) Metric(ctx context.Context, series string) (float64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", e.metricsPort), nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil, err
		}
	}
	return 0, false, nil
}
