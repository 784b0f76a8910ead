package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/internal/lru"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// This file holds the memories a decision keeps of GitHub's answers and
// their recall: recall reads them, once per review, from resolve. Only
// settle writes them (settle.go: record), so GitHub is asked (github.go)
// from what the review recalled.

// recollection is what the memories held of a review's runner when resolve
// recalled it, and the keys under which settle writes GitHub's answer back.
type recollection struct {
	// Read: the memories were read (the runner may be asked about); nothing
	// is written back for a review that never read them.
	Read bool
	keys memoryKeys
	// Failure is the failure memory's word on the pod's runner (unregisters).
	Failure recalledFailure
	// Status is a read-only look-up's remembered answer, if StatusKnown.
	Status      githubResult
	StatusKnown bool
}

// memoryKeys are a review's keys in the memories.
type memoryKeys struct {
	pod    admittedKey // the admitted and failure memories
	runner string      // the busy memory
	status string      // the status memory
}

func memoryKeysOf(uid types.UID, t Target) memoryKeys {
	return memoryKeys{pod: admittedKey{uid, targetKey(t)}, runner: targetKey(t), status: statusKey(t)}
}

// recall reads what the memories hold of the review's runner into the
// review: whether its deletion was admitted moments ago (rule 5b), GitHub's
// "busy" lately and how long a new one would be trusted, the failure of its
// last unregister, and a read-only look-up's answer. resolve calls it once,
// for a runner that may be asked about.
func (d *decider) recall(r *review) {
	k := memoryKeysOf(r.Pod.UID, r.Target)
	r.RecentlyAdmitted = d.memory.admitted(k.pod)
	r.Busy = d.busy.recall(k.runner)
	r.Recalled = recollection{Read: true, keys: k, Failure: d.failures.recall(k.pod)}
	r.Recalled.Status, r.Recalled.StatusKnown = d.statuses.recall(k.status)
}

// admittedMemory remembers pods whose deletion was admitted after GitHub removed
// (or did not know) their runner. The API server may review one deletion up to
// three times; the repeats are answered from here so one delete costs one
// unregister. Denials are never stored.
type admittedMemory struct {
	entries *lru.Cache[admittedKey, struct{}] // nil: TTL 0, nothing remembered
}

type admittedKey struct {
	uid    types.UID
	runner string // scope and name, so a reused UID with another runner never matches
}

// maxAdmittedEntries bounds the memory to far more deletions than one TTL
// sees; past it, the least recently admitted pod is forgotten (its repeat
// review asks GitHub, which answers "not found").
const maxAdmittedEntries = 10000

func newAdmittedMemory(ttl time.Duration, now func() time.Time) *admittedMemory {
	if ttl <= 0 {
		return &admittedMemory{}
	}
	return &admittedMemory{entries: lru.New[admittedKey, struct{}](maxAdmittedEntries, ttl, now)}
}

func (m *admittedMemory) admitted(k admittedKey) bool {
	if m.entries == nil || k.uid == "" {
		return false
	}
	_, ok := m.entries.Get(k)
	return ok
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
	// Next is how long a "busy" GitHub answers now will be trusted (settle
	// records it so): the first wait, or double the last one up to the cap.
	Next time.Duration
}

// busyMemory remembers GitHub's "busy" answer per runner for a short time that
// grows while the runner stays busy (first busyRetryAfter, doubling up to a
// cap). kubectl drain retries a refused eviction every 5 s whatever
// retryAfterSeconds says: without it one busy pod costs 720 GitHub requests
// an hour. Remembering a refusal is always safe: at worst a pod waits longer.
type busyMemory struct {
	entries *lru.Backoff[string, struct{}] // nil: busyRetryAfter 0, nothing remembered
}

// maxBusyEntries bounds the memory; busy runners are few next to all runners.
const maxBusyEntries = 10000

func newBusyMemory(first, cap time.Duration, now func() time.Time) *busyMemory {
	if first <= 0 {
		return &busyMemory{}
	}
	return &busyMemory{entries: lru.NewBackoff[string, struct{}](maxBusyEntries, first, cap, now)}
}

// recall returns what is remembered of the runner (its targetKey): whether
// it was busy lately, how long that is still trusted (0 if no longer), and
// how long a new "busy" would be.
func (m *busyMemory) recall(k string) busyMemo {
	if m.entries == nil {
		return busyMemo{}
	}
	_, left, ok := m.entries.Recall(k)
	return busyMemo{Known: ok, Wait: left, Next: m.entries.Peek(k)}
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
	entries *lru.Cache[string, githubResult] // nil: TTL 0, nothing remembered
}

// maxStatusEntries bounds the memory; past it, the least recently used
// answer is dropped (a dropped answer costs one look-up).
const maxStatusEntries = 10000

func newStatusMemory(ttl time.Duration, now func() time.Time) *statusMemory {
	if ttl <= 0 {
		return &statusMemory{}
	}
	return &statusMemory{entries: lru.New[string, githubResult](maxStatusEntries, ttl, now)}
}

func statusKey(t Target) string {
	key := targetKey(t)
	if t.Creds != nil {
		key += "\x00" + t.Creds.Key
	}
	return key
}

// recall returns the remembered answer for the runner (its statusKey), if
// one is fresh.
func (m *statusMemory) recall(k string) (githubResult, bool) {
	if m.entries == nil {
		return githubResult{}, false
	}
	return m.entries.Get(k)
}

// failureMemory remembers, per pod UID and runner, that GitHub failed its
// last decision, and keeps the next ones from reaching GitHub for a backoff
// that doubles from failureFirst up to failureCap while the failures go on.
// A pod deleted in a loop (its repository misspelt, GitHub down) then costs
// the credential every team shares a request now and then, not one each.
type failureMemory struct {
	entries *lru.Backoff[admittedKey, error]
}

const (
	failureFirst = time.Second
	failureCap   = 2 * time.Minute
	// maxFailureEntries bounds the memory; past it, the least recently
	// failed pod is forgotten.
	maxFailureEntries = 10000
)

func newFailureMemory(now func() time.Time) *failureMemory {
	return &failureMemory{entries: lru.NewBackoff[admittedKey, error](maxFailureEntries, failureFirst, failureCap, now)}
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
func (m *failureMemory) recall(k admittedKey) recalledFailure {
	if k.uid == "" {
		return recalledFailure{}
	}
	err, left, ok := m.entries.Recall(k)
	if !ok {
		return recalledFailure{}
	}
	return recalledFailure{Known: true, Err: err, Left: left}
}
