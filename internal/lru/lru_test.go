package lru_test

import (
	"testing"
	"time"

	"github.com/runner-guard/runner-guard/internal/lru"
)

func TestCache(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	c := lru.New[string, int](2, time.Minute, clock)

	c.Add("a", 1)
	c.Add("b", 2)
	if v, ok := c.Get("a"); !ok || v != 1 {
		t.Fatalf("Get(a) = %v, %v; want 1, true", v, ok)
	}
	c.Add("c", 3) // full: b is the least recently used
	if _, ok := c.Get("b"); ok {
		t.Error("b still cached after c filled the cache; want least recently used evicted")
	}
	if v, ok := c.Get("c"); !ok || v != 3 {
		t.Errorf("Get(c) = %v, %v; want 3, true", v, ok)
	}
	c.Remove("c")
	if _, ok := c.Get("c"); ok {
		t.Error("c cached after Remove")
	}

	now = now.Add(time.Minute - time.Nanosecond)
	if _, ok := c.Get("a"); !ok {
		t.Error("a gone before its TTL")
	}
	now = now.Add(time.Nanosecond)
	if _, ok := c.Get("a"); ok {
		t.Error("a still cached at its TTL; want gone at now+ttl")
	}
	if v, ok := c.Get("missing"); ok || v != 0 {
		t.Errorf("Get(missing) = %v, %v; want zero, false", v, ok)
	}
}

func TestBackoff(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	b := lru.NewBackoff[string, string](2, time.Second, 4*time.Second, clock)

	if _, _, ok := b.Recall("a"); ok {
		t.Fatal("Recall of a key never failed: ok")
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if got := b.Next("a", "err"); got != want {
			t.Fatalf("failure %d: wait %s, want %s", i+1, got, want)
		}
	}
	now = now.Add(time.Second)
	if v, left, ok := b.Recall("a"); !ok || v != "err" || left != 3*time.Second {
		t.Fatalf("Recall = %q, %s, %v; want err, 3s, true", v, left, ok)
	}
	// Quiet for exactly twice the limit after the last failure: the run goes on.
	now = now.Add(7 * time.Second)
	if _, left, ok := b.Recall("a"); !ok || left != 0 {
		t.Fatalf("Recall at 2*limit = %s, %v; want 0, true", left, ok)
	}
	now = now.Add(time.Nanosecond)
	if _, _, ok := b.Recall("a"); ok {
		t.Fatal("Recall past 2*limit: ok, want the run over")
	}
	if got := b.Next("a", "err"); got != time.Second {
		t.Fatalf("wait after a quiet spell = %s, want the first 1s", got)
	}

	b.Forget("a")
	if _, _, ok := b.Recall("a"); ok {
		t.Fatal("Recall after Forget: ok")
	}

	// Bounded: a third key evicts the least recently failed.
	b.Next("x", "")
	b.Next("y", "")
	b.Next("z", "")
	if _, _, ok := b.Recall("x"); ok {
		t.Error("x remembered past the size; want the least recently failed forgotten")
	}
}

func TestBackoffAtLeast(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	b := lru.NewBackoff[string, bool](10, time.Second, 4*time.Second, clock)
	or := func(v bool) func(bool) bool { return func(last bool) bool { return last || v } }

	if got := b.NextAtLeast("a", 0, or(true)); got != time.Second {
		t.Fatalf("first wait = %s, want 1s", got)
	}
	// A Retry-After longer than twice the limit: kept, and not started over, past 2*limit.
	if got := b.NextAtLeast("a", time.Minute, or(false)); got != time.Minute {
		t.Fatalf("wait with a 1m floor = %s, want 1m", got)
	}
	now = now.Add(30 * time.Second)
	if busy, left, ok := b.Recall("a"); !ok || !busy || left != 30*time.Second {
		t.Fatalf("Recall = %v, %s, %v; want true (kept), 30s, true", busy, left, ok)
	}
	if got := b.NextAtLeast("a", 0, or(false)); got != 4*time.Second {
		t.Fatalf("wait after the floor = %s, want the 4s limit", got)
	}
}

// Peek says what Next would return, and stores nothing.
func TestBackoffPeek(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	b := lru.NewBackoff[string, string](10, time.Second, 4*time.Second, clock)

	if got := b.Peek("a"); got != time.Second {
		t.Fatalf("Peek of a new key = %s, want the first 1s", got)
	}
	if _, _, ok := b.Recall("a"); ok {
		t.Fatal("Recall after Peek: ok, want nothing stored")
	}
	for i := range 4 {
		peeked := b.Peek("a")
		if again := b.Peek("a"); again != peeked {
			t.Fatalf("failure %d: Peek twice = %s then %s, want the same", i+1, peeked, again)
		}
		if got := b.Next("a", "err"); got != peeked {
			t.Fatalf("failure %d: Next = %s, Peek said %s", i+1, got, peeked)
		}
	}
	now = now.Add(8*time.Second + time.Nanosecond) // quiet past 2*limit: the run is over
	if got := b.Peek("a"); got != time.Second {
		t.Fatalf("Peek after a quiet spell = %s, want the first 1s", got)
	}
}
