package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runner-guard/runner-guard/test/fixture"
)

func TestRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	var out, errb bytes.Buffer
	code := run([]string{"-dir", dir, "-dns", "a.example,b.example", "-dns", "c.example", "-ip", "127.0.0.1", "-validity", "2h"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	data, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	c := fixture.ParseCert(t, data)
	if strings.Join(c.DNSNames, ",") != "a.example,b.example,c.example" || len(c.IPAddresses) != 1 {
		t.Errorf("SANs %v %v", c.DNSNames, c.IPAddresses)
	}
	for _, f := range []string{"tls.key", "ca.crt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestRunBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-dir is required"},
		{[]string{"-dir", t.TempDir(), "-ip", "not-an-ip"}, `-ip "not-an-ip" is not an IP address`},
		{[]string{"-dir", t.TempDir(), "-validity", "-1h"}, "-validity must be positive"},
		{[]string{"-dir", t.TempDir(), "-validity", "soon"}, "invalid value"},
		{[]string{"-dir", t.TempDir(), "-dns", "bad name"}, `invalid DNS name "bad name"`},
		{[]string{"-dir", t.TempDir(), "extra"}, "unexpected arguments: extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
		if !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, errb.String(), tc.want)
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-h"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "Usage: gencerts") {
		t.Errorf("-h: exit %d, %q", code, errb.String())
	}
}
