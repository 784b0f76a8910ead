package events

import (
	"container/list"
	"sync"
)

// DefaultRemembered is how many delivery IDs (and completed jobs) the
// endpoint remembers: far more than GitHub redelivers within minutes, and a
// few megabytes at most.
const DefaultRemembered = 10000

// recent is a bounded set of strings; the oldest is forgotten first.
type recent struct {
	mu    sync.Mutex
	limit int
	order *list.List
	index map[string]*list.Element
}

func newRecent(limit int) *recent {
	return &recent{limit: max(1, limit), order: list.New(), index: map[string]*list.Element{}}
}

// add remembers key and reports whether it was new.
func (r *recent) add(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.index[key]; ok {
		return false
	}
	r.index[key] = r.order.PushBack(key)
	for r.order.Len() > r.limit {
		oldest := r.order.Front()
		r.order.Remove(oldest)
		delete(r.index, oldest.Value.(string))
	}
	return true
}

// has reports whether key is remembered.
func (r *recent) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.index[key]
	return ok
}

// remove forgets key.
func (r *recent) remove(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.index[key]; ok {
		r.order.Remove(e)
		delete(r.index, key)
	}
}

// len is how many keys are remembered.
func (r *recent) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.order.Len()
}
