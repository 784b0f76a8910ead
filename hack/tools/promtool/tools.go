//go:build tools

// Package tools pins promtool's module; `go build github.com/prometheus/prometheus/cmd/promtool` builds it.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
