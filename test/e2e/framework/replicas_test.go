package framework

import (
	"slices"
	"testing"
)

func TestWithoutFlag(t *testing.T) {
	tests := map[string]struct {
		args      []string
		wantValue string
		wantRest  []string
	}{
		"absent":         {args: []string{"--a=1"}, wantRest: []string{"--a=1"}},
		"taken out":      {args: []string{"--a=1", "--events-bind-address=127.0.0.1:9", "--b"}, wantValue: "127.0.0.1:9", wantRest: []string{"--a=1", "--b"}},
		"the last wins":  {args: []string{"--events-bind-address=:1", "--events-bind-address=:2"}, wantValue: ":2"},
		"a longer name":  {args: []string{"--events-bind-address-x=1"}, wantRest: []string{"--events-bind-address-x=1"}},
		"no args at all": {},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			value, rest := withoutFlag(tc.args, eventsBindFlag)
			if value != tc.wantValue || !slices.Equal(rest, tc.wantRest) {
				t.Errorf("withoutFlag(%q) = %q, %q; want %q, %q", tc.args, value, rest, tc.wantValue, tc.wantRest)
			}
		})
	}
}
