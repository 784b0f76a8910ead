package lru

import (
	"sync"
	"time"
)

// Backoff remembers, per key, the last of a run of failures (or refusals) and
// a wait that doubles from first up to a limit while they go on (or longer
// when a failure says so, as GitHub's Retry-After does); a key quiet for more
// than twice the limit, and past its wait, starts over, as client-go's
// flowcontrol.Backoff does. It is
// kept in a Cache, so it is bounded: past size keys the least recently
// failed is forgotten.
//
// flowcontrol.Backoff itself is not used: it cannot say how long a key's wait
// still runs (its last update is private; IsInBackOffSinceUpdate only says
// whether), takes no floor for a wait, holds no value (the failure answered
// meanwhile), and grows without bound between the GC calls its user must
// schedule.
type Backoff[K comparable, V any] struct {
	first, limit time.Duration
	now          func() time.Time

	mu      sync.Mutex // makes Next's read, double and write one step
	entries *Cache[K, backoffEntry[V]]
}

type backoffEntry[V any] struct {
	value V
	wait  time.Duration
	until time.Time
}

// NewBackoff returns a backoff memory of at most size keys whose waits start
// at first and double up to limit (at least first), on the clock now.
func NewBackoff[K comparable, V any](size int, first, limit time.Duration, now func() time.Time) *Backoff[K, V] {
	if now == nil {
		now = time.Now
	}
	limit = max(limit, first)
	return &Backoff[K, V]{first: first, limit: limit, now: now,
		entries: New[K, backoffEntry[V]](size, 2*limit, now)} // TTL set by NextAtLeast
}

// Recall returns the value of k's last failure and how long its wait still
// runs (0: over); ok is false when k has no run going.
func (b *Backoff[K, V]) Recall(k K) (v V, left time.Duration, ok bool) {
	e, ok := b.entries.Get(k)
	if !ok {
		return v, 0, false
	}
	return e.value, max(e.until.Sub(b.now()), 0), true
}

// Next records a failure of k with value v and returns its wait: first for a
// new run, else double the last one up to the limit.
func (b *Backoff[K, V]) Next(k K, v V) time.Duration {
	return b.NextAtLeast(k, 0, func(V) V { return v })
}

// Peek returns the wait Next would give k now, storing nothing: a decision
// can say how long an answer will be trusted before it is recorded.
func (b *Backoff[K, V]) Peek(k K) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.entries.Get(k); ok {
		return min(2*e.wait, b.limit)
	}
	return b.first
}

// NextAtLeast is Next with a wait of at least least, and the value update
// makes of the last one (the zero V for a new run).
func (b *Backoff[K, V]) NextAtLeast(k K, least time.Duration, update func(last V) V) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries.Get(k)
	if ok {
		e.wait = min(2*e.wait, b.limit)
	} else {
		e = backoffEntry[V]{wait: b.first}
	}
	e.wait = max(e.wait, least)
	e.value, e.until = update(e.value), b.now().Add(e.wait)
	// Kept through 2*limit after the failure (or its longer wait): Cache
	// drops an entry at its TTL, the nanosecond after which the run starts over.
	b.entries.addFor(k, e, max(2*b.limit, e.wait)+time.Nanosecond)
	return e.wait
}

// Forget ends k's run.
func (b *Backoff[K, V]) Forget(k K) { b.entries.Remove(k) }
