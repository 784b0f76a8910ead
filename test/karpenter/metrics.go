package karpenter

import (
	"strconv"
	"strings"
)

// MetricSum adds up the samples of metric name, in Prometheus text format,
// whose labels include every pair of want (e.g. Karpenter's
// karpenter_pods_eviction_requests_total with code="429"). found is false
// when no sample matched.
func MetricSum(text, name string, want map[string]string) (sum float64, found bool) {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := splitSample(line)
		if !ok {
			continue
		}
		metric, labels := series, ""
		if i := strings.IndexByte(series, '{'); i >= 0 {
			metric, labels = series[:i], strings.TrimSuffix(series[i+1:], "}")
		}
		if metric != name || !hasLabels(parseLabels(labels), want) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// splitSample cuts `series value [timestamp]` after the label set, whose
// values may hold spaces.
func splitSample(line string) (series, value string, ok bool) {
	end := 0
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", false
		}
		end = j + 1
	} else {
		end = strings.IndexByte(line, ' ')
		if end < 0 {
			return "", "", false
		}
	}
	fields := strings.Fields(line[end:])
	if len(fields) == 0 {
		return "", "", false
	}
	return line[:end], fields[0], true
}

// parseLabels reads `a="x",b="y"` (escaped quotes and backslashes allowed).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return out
		}
		key := strings.TrimSpace(strings.TrimPrefix(s[:eq], ","))
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				if s[i] == 'n' {
					val.WriteByte('\n')
					continue
				}
			}
			val.WriteByte(s[i])
		}
		out[key] = val.String()
		if i+1 > len(s) {
			return out
		}
		s = strings.TrimPrefix(s[i+1:], ",")
	}
	return out
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
