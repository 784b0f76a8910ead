package activation

import (
	"testing"
	"time"
)

// A loop looks again every Recheck it was given, the default when that is
// not positive, and reads the clock it was given, time.Now when none.
func TestNewEveryReplica(t *testing.T) {
	fixed := time.Unix(1000, 0)
	tests := map[string]struct {
		recheck     time.Duration
		now         func() time.Time
		wantRecheck time.Duration
		wantFixed   bool
	}{
		"given":                 {recheck: time.Second, now: func() time.Time { return fixed }, wantRecheck: time.Second, wantFixed: true},
		"zero: the default":     {wantRecheck: time.Minute},
		"negative: the default": {recheck: -time.Second, wantRecheck: time.Minute},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := NewEveryReplica(tc.recheck, time.Minute, tc.now)
			if got := e.Recheck(); got != tc.wantRecheck {
				t.Errorf("Recheck() = %v; want %v", got, tc.wantRecheck)
			}
			if got := e.Now(); got.Equal(fixed) != tc.wantFixed {
				t.Errorf("Now() = %v; given clock used: %v, want %v", got, got.Equal(fixed), tc.wantFixed)
			}
			if e.NeedLeaderElection() {
				t.Error("NeedLeaderElection() = true; every replica runs the loop")
			}
		})
	}
}
