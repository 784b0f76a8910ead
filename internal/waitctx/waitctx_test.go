package waitctx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/internal/waitctx"
)

func TestSleep(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := map[string]struct {
		ctx  context.Context
		d    time.Duration
		want error
	}{
		"waits out a short d":          {ctx: context.Background(), d: time.Millisecond},
		"zero d does not wait":         {ctx: context.Background()},
		"negative d does not wait":     {ctx: context.Background(), d: -time.Second},
		"ended ctx cuts a long d":      {ctx: cancelled, d: time.Hour, want: context.Canceled},
		"ended ctx reported at zero d": {ctx: cancelled, want: context.Canceled},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := waitctx.Sleep(tc.ctx, tc.d); !errors.Is(err, tc.want) {
				t.Errorf("Sleep(%v) = %v; want %v", tc.d, err, tc.want)
			}
		})
	}
}
