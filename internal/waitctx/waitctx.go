// Package waitctx waits a duration unless a context ends first.
package waitctx

import (
	"context"
	"time"
)

// Sleep waits d and returns nil, or returns ctx.Err() as soon as ctx ends. A
// d of zero or less does not wait, but still reports an ended ctx, so a caller
// looping on Sleep stops once its context is done.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
