package framework

import "testing"

func TestMetricSample(t *testing.T) {
	const exposition = `# HELP runner_guard_github_clients GitHub clients held.
# TYPE runner_guard_github_clients gauge
runner_guard_github_clients 3
runner_guard_decisions_total{decision="allow",operation="delete",reason="idle"} 2
runner_guard_decisions_total{decision="deny",operation="delete",reason="busy"} 1
broken_metric x
`
	tests := map[string]struct {
		series    string
		want      float64
		wantFound bool
		wantErr   bool
	}{
		"unlabelled": {series: "runner_guard_github_clients", want: 3, wantFound: true},
		"labelled":   {series: `runner_guard_decisions_total{decision="deny",operation="delete",reason="busy"}`, want: 1, wantFound: true},
		"a name alone matches no labelled series": {series: "runner_guard_decisions_total"},
		"absent":       {series: "runner_guard_absent"},
		"not a number": {series: "broken_metric", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, found, err := metricSample(exposition, tc.series)
			if (err != nil) != tc.wantErr || got != tc.want || found != tc.wantFound {
				t.Errorf("metricSample(%s) = %v, %v, %v; want %v, %v, error %v", tc.series, got, found, err, tc.want, tc.wantFound, tc.wantErr)
			}
		})
	}
}
