package karpenter

import "testing"

func TestMetricSum(t *testing.T) {
	const text = `# HELP karpenter_pods_eviction_requests_total The total number of pod eviction requests
# TYPE karpenter_pods_eviction_requests_total counter
karpenter_pods_eviction_requests_total{code="200"} 3
karpenter_pods_eviction_requests_total{code="429"} 7
karpenter_pods_eviction_requests_total{code="429",reason="a \"quoted\", spaced value"} 2 1700000000
karpenter_nodes_total 4
karpenter_nodes_total_other{code="429"} 100
`
	cases := map[string]struct {
		name      string
		labels    map[string]string
		want      float64
		wantFound bool
	}{
		"one label, two series":     {name: "karpenter_pods_eviction_requests_total", labels: map[string]string{"code": "429"}, want: 9, wantFound: true},
		"no labels sums all":        {name: "karpenter_pods_eviction_requests_total", want: 12, wantFound: true},
		"escaped label value":       {name: "karpenter_pods_eviction_requests_total", labels: map[string]string{"reason": `a "quoted", spaced value`}, want: 2, wantFound: true},
		"metric without labels":     {name: "karpenter_nodes_total", want: 4, wantFound: true},
		"label value absent":        {name: "karpenter_pods_eviction_requests_total", labels: map[string]string{"code": "500"}},
		"prefix of another metric":  {name: "karpenter_nodes", labels: nil},
		"label the metric lacks":    {name: "karpenter_nodes_total", labels: map[string]string{"code": "429"}},
		"name is a longer metric's": {name: "karpenter_nodes_total_other", labels: map[string]string{"code": "429"}, want: 100, wantFound: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, found := MetricSum(text, c.name, c.labels)
			if got != c.want || found != c.wantFound {
				t.Errorf("MetricSum(%s, %v) = %v, %v; want %v, %v", c.name, c.labels, got, found, c.want, c.wantFound)
			}
		})
	}
}
