package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/webhook/arc"
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

// busyMemo is what the busy memory says about one runner.
type busyMemo struct {
	// Known: GitHub (or a listing) said busy recently, so the runner is
	// re-checked with knowledge that costs less than a DELETE first.
	Known bool
	// Wait is how long a remembered "busy" is still trusted when nothing
	// fresher can be had (the budget is spent); 0: not trusted any more.
	Wait time.Duration
	// Next is how long the "busy" GitHub just answered will be trusted.
	Next time.Duration
}

// busyMemory remembers GitHub's "busy" answer per runner for a short time that
// grows while the runner stays busy (first busyRetryAfter, doubling up to a
// cap). kubectl drain retries a refused eviction every 5 s whatever
// retryAfterSeconds says: without it one busy pod costs 720 GitHub requests
// an hour. Remembering a refusal is always safe: at worst a pod waits longer.
type busyMemory struct {
	first, cap time.Duration
	now        func() time.Time

	mu      sync.Mutex
	entries map[string]busyEntry
}

type busyEntry struct {
	until   time.Time
	backoff time.Duration
	seen    time.Time // last busy answer; a runner idle for long starts over
}

// maxBusyEntries bounds the memory; busy runners are few next to all runners.
const maxBusyEntries = 10000

func newBusyMemory(first, cap time.Duration, now func() time.Time) *busyMemory {
	return &busyMemory{first: first, cap: max(cap, first), now: now, entries: map[string]busyEntry{}}
}

// recall returns what is remembered of the runner: whether it was busy
// lately, and how long that is still trusted (0 if no longer).
func (m *busyMemory) recall(t Target) busyMemo {
	if m.first <= 0 {
		return busyMemo{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[targetKey(t)]
	now := m.now()
	if !ok || now.Sub(e.seen) > 2*m.cap {
		return busyMemo{}
	}
	return busyMemo{Known: true, Wait: max(e.until.Sub(now), 0)}
}

// busy records a "busy" answer and returns how long it will be trusted.
func (m *busyMemory) busy(t Target) time.Duration {
	if m.first <= 0 {
		return 0
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	key := targetKey(t)
	e, ok := m.entries[key]
	switch {
	case !ok || now.Sub(e.seen) > 2*m.cap:
		e.backoff = m.first
	default:
		e.backoff = min(2*e.backoff, m.cap)
	}
	e.until, e.seen = now.Add(e.backoff), now
	if len(m.entries) >= maxBusyEntries {
		for k, old := range m.entries {
			if now.Sub(old.seen) > 2*m.cap {
				delete(m.entries, k)
			}
		}
	}
	if len(m.entries) < maxBusyEntries || ok {
		m.entries[key] = e
	}
	return e.backoff
}

// forget drops a runner GitHub no longer reports busy.
func (m *busyMemory) forget(t Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, targetKey(t))
}

// fallbackMemory reports each cause of reading labels instead of an
// EphemeralRunner once in the log, and once per pod as an Event: a missing CRD
// or RBAC rule would otherwise fill both on every request.
type fallbackMemory struct {
	mu     sync.Mutex
	causes map[string]bool
	pods   map[types.UID]bool
}

// maxFallbackPods bounds the pods remembered; past it, Events stop.
const maxFallbackPods = 10000

func newFallbackMemory() *fallbackMemory {
	return &fallbackMemory{causes: map[string]bool{}, pods: map[types.UID]bool{}}
}

// report logs err the first time its cause is seen and returns the Event note
// for pod the first time the pod is seen ("" after that).
func (m *fallbackMemory) report(ctx context.Context, pod *corev1.Pod, err *arc.UnavailableError) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cause := string(err.Reason); !m.causes[cause] {
		m.causes[cause] = true
		logr.FromContextOrDiscard(ctx).Info("reading scale-set runners from pod labels: cannot read their EphemeralRunners (reported once per cause)",
			"cause", cause, "error", err.Error())
	}
	if m.pods[pod.UID] || len(m.pods) >= maxFallbackPods {
		return ""
	}
	m.pods[pod.UID] = true
	return fmt.Sprintf("runner scope read from pod labels, which ARC may shorten or omit: %v", err)
}

// statusMemory remembers the answer of a read-only look-up (dry runs, bypass
// users, disrupted pods) per runner for a short window, so a loop of reviews,
// forged or not, costs GitHub at most one request per runner per window.
// Only read-only look-ups read it: an unregister always asks GitHub.
type statusMemory struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[string]statusEntry
}

type statusEntry struct {
	res     githubResult
	expires time.Time
}

// maxStatusEntries bounds the memory; past it, expired entries are swept and
// then new answers are not remembered until some expire.
const maxStatusEntries = 10000

func newStatusMemory(ttl time.Duration, now func() time.Time) *statusMemory {
	return &statusMemory{ttl: ttl, now: now, entries: map[string]statusEntry{}}
}

func statusKey(t Target) string {
	key := targetKey(t)
	if t.Creds != nil {
		key += "\x00" + t.Creds.Key
	}
	return key
}

// recall returns the remembered answer for the runner, if one is fresh.
func (m *statusMemory) recall(t Target) (githubResult, bool) {
	if m.ttl <= 0 {
		return githubResult{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[statusKey(t)]
	if !ok || !m.now().Before(e.expires) {
		return githubResult{}, false
	}
	return e.res, true
}

// remember stores a read-only answer.
func (m *statusMemory) remember(t Target, res githubResult) {
	if m.ttl <= 0 {
		return
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.entries) >= maxStatusEntries {
		for k, e := range m.entries {
			if !now.Before(e.expires) {
				delete(m.entries, k)
			}
		}
		if len(m.entries) >= maxStatusEntries {
			return
		}
	}
	m.entries[statusKey(t)] = statusEntry{res: res, expires: now.Add(m.ttl)}
}

// failureMemory remembers, per pod UID and runner, that GitHub failed its
// last decision, and keeps the next ones from reaching GitHub for a backoff
// that doubles from failureFirst up to failureCap while the failures go on.
// A pod deleted in a loop (its repository misspelt, GitHub down) then costs
// the credential every team shares a request now and then, not one each.
type failureMemory struct {
	now func() time.Time

	mu      sync.Mutex
	entries map[admittedKey]failureEntry
}

type failureEntry struct {
	err     error
	until   time.Time
	backoff time.Duration
	seen    time.Time // last failure; past 2*failureCap the backoff starts over
}

const (
	failureFirst = time.Second
	failureCap   = 2 * time.Minute
	// maxFailureEntries bounds the memory; past it, old entries are swept
	// and then new failures are not remembered until some expire.
	maxFailureEntries = 10000
)

func newFailureMemory(now func() time.Time) *failureMemory {
	return &failureMemory{now: now, entries: map[admittedKey]failureEntry{}}
}

// recalledFailure is what the failure memory says of a pod's runner.
type recalledFailure struct {
	// Known: its last decision failed lately.
	Known bool
	// Err is that failure; Left how long it is still answered from memory
	// (0: ask again, at recheck priority).
	Err  error
	Left time.Duration
}

// recall says whether the pod's runner failed lately, and how.
func (m *failureMemory) recall(uid types.UID, t Target) recalledFailure {
	if uid == "" {
		return recalledFailure{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[admittedKey{uid, targetKey(t)}]
	now := m.now()
	if !ok || now.Sub(e.seen) > 2*failureCap {
		return recalledFailure{}
	}
	return recalledFailure{Known: true, Err: e.err, Left: max(e.until.Sub(now), 0)}
}

// failed records err for the pod's runner and returns the backoff.
func (m *failureMemory) failed(uid types.UID, t Target, err error) time.Duration {
	if uid == "" {
		return 0
	}
	now := m.now()
	key := admittedKey{uid, targetKey(t)}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok || now.Sub(e.seen) > 2*failureCap {
		e.backoff = failureFirst
	} else {
		e.backoff = min(2*e.backoff, failureCap)
	}
	e.err, e.until, e.seen = err, now.Add(e.backoff), now
	if !ok && len(m.entries) >= maxFailureEntries {
		for k, old := range m.entries {
			if now.Sub(old.seen) > 2*failureCap {
				delete(m.entries, k)
			}
		}
		if len(m.entries) >= maxFailureEntries {
			return e.backoff
		}
	}
	m.entries[key] = e
	return e.backoff
}

func (m *failureMemory) forget(uid types.UID, t Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.entries, admittedKey{uid, targetKey(t)})
}

// recentFailure is a decision's GitHub failure answered from the failure
// memory. It wraps GitHub's last answer, so the rules decide as they did.
type recentFailure struct {
	err  error
	left time.Duration
}

func (e *recentFailure) Error() string {
	return fmt.Sprintf("%v (this pod's last decision failed moments ago: runner-guard asks GitHub again in %s)", e.err, roundUp(e.left))
}

func (e *recentFailure) Unwrap() error { return e.err }
