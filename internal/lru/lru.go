// Package lru is apimachinery's LRUExpireCache with typed keys and values and
// the clock given as a function, so every bounded TTL cache in runner-guard
// drops the same way when full (least recently used first) and expires on the
// injected clock tests control.
package lru

import (
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
)

// Cache maps K to V for ttl, holding at most the size it was made with.
type Cache[K comparable, V any] struct {
	c   *cache.LRUExpireCache
	ttl time.Duration
}

// New returns a cache of at most size entries, each kept for ttl as now tells
// time (time.Now if nil). size must be positive.
func New[K comparable, V any](size int, ttl time.Duration, now func() time.Time) *Cache[K, V] {
	if now == nil {
		now = time.Now
	}
	return &Cache[K, V]{c: cache.NewLRUExpireCacheWithClock(size, Clock(now)), ttl: ttl}
}

// Get returns the value at k if it is there and has not expired.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	v, ok := c.c.Get(k)
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

// Add stores v at k for the cache's ttl, evicting the least recently used
// entry when full. The entry is gone at now+ttl: LRUExpireCache keeps one
// through its expiry instant, so it is given a nanosecond less, the finest
// a time.Time tells apart.
func (c *Cache[K, V]) Add(k K, v V) { c.addFor(k, v, c.ttl) }

// addFor is Add with the entry's own ttl.
func (c *Cache[K, V]) addFor(k K, v V, ttl time.Duration) { c.c.Add(k, v, ttl-time.Nanosecond) }

// Remove drops k.
func (c *Cache[K, V]) Remove(k K) { c.c.Remove(k) }

// Clock is a func() time.Time as apimachinery's cache clock.
type Clock func() time.Time

// Now returns the time the function tells.
func (f Clock) Now() time.Time { return f() }
