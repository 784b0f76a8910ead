package webhook

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// admittedMemory remembers pods whose deletion was admitted after GitHub removed
// (or did not know) their runner. The API server may review one deletion up to
// three times; the repeats are answered from here so one delete costs one
// unregister. Denials are never stored.
type admittedMemory struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[admittedKey]time.Time // value: expiry
}

type admittedKey struct {
	uid    types.UID
	runner string // scope and name, so a reused UID with another runner never matches
}

func newAdmittedMemory(ttl time.Duration, now func() time.Time) *admittedMemory {
	return &admittedMemory{ttl: ttl, now: now, entries: map[admittedKey]time.Time{}}
}

func (m *admittedMemory) remember(uid types.UID, t Target) {
	if m.ttl <= 0 || uid == "" {
		return
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	// Sweep on insert: the map stays as small as the deletions of the last TTL.
	for k, exp := range m.entries {
		if !now.Before(exp) {
			delete(m.entries, k)
		}
	}
	m.entries[admittedKey{uid, targetKey(t)}] = now.Add(m.ttl)
}

func (m *admittedMemory) admitted(uid types.UID, t Target) bool {
	if uid == "" {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	exp, ok := m.entries[admittedKey{uid, targetKey(t)}]
	return ok && m.now().Before(exp)
}

func targetKey(t Target) string { return t.Scope.String() + "\x00" + t.Name }
