package main

import (
	"bytes"
	"context"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

func TestVersionString(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	// checkout is what go build records in a git checkout at 30acc03abc.
	checkout := func(modified bool) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.26.1", Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "30acc03abc"}, {Key: "vcs.modified", Value: strconv.FormatBool(modified)},
		}}
	}
	tests := map[string]struct {
		version string
		commit  string
		info    *debug.BuildInfo
		want    string
	}{
		"stamped release from a clean checkout": {
			version: "v0.1.0",
			info:    checkout(false),
			want:    "runner-guard v0.1.0 (commit 30acc03abc, go1.26.1 " + platform + ")",
		},
		"modified checkout": {
			version: "v0.1.0-3-g30acc03-dirty",
			info:    checkout(true),
			want:    "runner-guard v0.1.0-3-g30acc03-dirty (commit 30acc03abc-dirty, go1.26.1 " + platform + ")",
		},
		"stamped commit wins over the checkout's": {
			version: "v0.1.0",
			commit:  "deadbeef",
			info:    checkout(true),
			want:    "runner-guard v0.1.0 (commit deadbeef, go1.26.1 " + platform + ")",
		},
		"built outside a checkout": {
			version: "dev",
			info:    &debug.BuildInfo{GoVersion: "go1.26.1"},
			want:    "runner-guard dev (commit unknown, go1.26.1 " + platform + ")",
		},
		"no build info": {
			version: "dev",
			want:    "runner-guard dev (commit unknown, unknown " + platform + ")",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := versionString(tc.version, tc.commit, tc.info); got != tc.want {
				t.Errorf("versionString() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunVersion: --version prints one line on stdout and exits 0 before
// anything else is read (no credentials, no API server).
func TestRunVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--version"}, &stdout, &stderr, func(string) string { return "" })
	if code != 0 {
		t.Fatalf("exit %d, want 0; stderr: %s", code, stderr.String())
	}
	out := stdout.String()
	if !strings.HasPrefix(out, "runner-guard "+version+" (commit ") || !strings.Contains(out, runtime.Version()) || strings.Count(out, "\n") != 1 {
		t.Errorf("stdout = %q, want one line with the version %q and %s", out, version, runtime.Version())
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr = %q, want nothing", stderr.String())
	}
}
