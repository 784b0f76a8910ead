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
