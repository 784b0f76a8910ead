package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(buildInfo("v1.2.3")); err != nil {
		t.Fatal(err)
	}
	want := `# HELP runner_guard_build_info runner-guard's version and Go version (labels); always 1.
# TYPE runner_guard_build_info gauge
runner_guard_build_info{goversion="` + runtime.Version() + `",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "runner_guard_build_info"); err != nil {
		t.Error(err)
	}
}
