package activation

import "time"

// EveryReplica is the part of a manager.Runnable that every replica runs,
// without leader election, and that looks again every Recheck when no event
// comes, reading the clock Now. The Activator embeds it, and so does
// certs/rotation's Rotator: both keep the same ValidatingWebhookConfiguration.
type EveryReplica struct {
	recheck time.Duration
	now     func() time.Time
}

// NewEveryReplica returns the loop's pace: recheck, or def when recheck is
// not positive, and the clock now, or time.Now when nil.
func NewEveryReplica(recheck, def time.Duration, now func() time.Time) EveryReplica {
	if recheck <= 0 {
		recheck = def
	}
	if now == nil {
		now = time.Now
	}
	return EveryReplica{recheck: recheck, now: now}
}

// NeedLeaderElection is false: every replica runs the loop, so what it
// writes must be idempotent or tested against the resourceVersion it was
// planned from.
func (EveryReplica) NeedLeaderElection() bool { return false }

// Recheck is how often the loop looks again without an event.
func (e EveryReplica) Recheck() time.Duration { return e.recheck }

// Now reads the loop's clock.
func (e EveryReplica) Now() time.Time { return e.now() }
