package events

import (
	"sync"
	"time"

	"github.com/runner-guard/runner-guard/internal/lru"
)

// DefaultRemembered is how many delivery IDs the
// endpoint remembers: far more than GitHub redelivers within minutes, and a
// few megabytes at most.
const DefaultRemembered = 10000

// rememberFor is how long a delivery ID is remembered:
// GitHub lets a delivery be redelivered for three days.
const rememberFor = 72 * time.Hour

// recent is a bounded set of strings, each kept for rememberFor; the least
// recently used is forgotten first when full (the one cache type every
// bounded memory in runner-guard uses).
type recent struct {
	// mu makes add's look-up and store one step: two copies of a delivery
	// arriving together are one new and one repeat.
	mu sync.Mutex
	c  *lru.Cache[string, struct{}]
}

func newRecent(limit int, now func() time.Time) *recent {
	return &recent{c: lru.New[string, struct{}](max(1, limit), rememberFor, now)}
}

// add remembers key and reports whether it was new.
func (r *recent) add(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.c.Get(key); ok {
		return false
	}
	r.c.Add(key, struct{}{})
	return true
}

// remove forgets key.
func (r *recent) remove(key string) { r.c.Remove(key) }
