package cache

import (
	"testing"
	"time"
)

func byteConfig(maxBytes int64) func(*Config) {
	return func(cfg *Config) {
		cfg.Shards = 1
		cfg.MaxBytes = maxBytes
		cfg.Size = func(v any) int64 { return int64(len(v.(*response).body)) }
	}
}

// TestMaxBytesStopsCachingButNeverDropsAWaiter: an outcome that does not fit
// IDEMPOTENCY_MAX_BYTES is handed to its waiters and not cached; what is cached
// stays until it expires or leaves, and then gives its bytes back.
func TestMaxBytesStopsCachingButNeverDropsAWaiter(t *testing.T) {
	c, clk := newCache(t, byteConfig(100))
	big := &response{status: 201, body: make([]byte, 60)}

	a := mustBegin(t, c, "a", "fp", LookupMiss)
	mustComplete(t, a.Owner, big, Committed, 0)
	mustBegin(t, c, "a", "fp", LookupHit)

	b := mustBegin(t, c, "b", "fp", LookupMiss)
	w := mustBegin(t, c, "b", "fp", LookupPending)
	mustComplete(t, b.Owner, big, Committed, 0) // 120 > 100: not cached
	if v, st, err := w.Waiter.Wait(guard(t)); err != nil || st != Committed || v != big {
		t.Fatalf("the waiter lost the outcome: %v %v %v", v, st, err)
	}
	if st := c.Stats(); st.NotCached != 1 {
		t.Fatalf("stats %+v", st)
	}
	// b was not cached: the next duplicate owns a new entry (and forwards).
	b2 := mustBegin(t, c, "b", "fp", LookupMiss)
	// a's entry is still answered: nothing live was dropped for b.
	mustBegin(t, c, "a", "fp", LookupHit)
	// Once a expires, its bytes make room.
	clk.Advance(committedTTL)
	mustComplete(t, b2.Owner, big, Committed, 0)
	mustBegin(t, c, "b", "fp", LookupHit)
	// A sweep gives bytes back too.
	clk.Advance(committedTTL)
	if n := c.Sweep(); n != 1 || c.Len() != 0 {
		t.Fatalf("swept %d, len %d; want 1, 0", n, c.Len())
	}
	d := mustBegin(t, c, "d", "fp", LookupMiss)
	mustComplete(t, d.Owner, big, Rejected, time.Minute)
	mustBegin(t, c, "d", "fp", LookupHit)
}

func TestMaxBytesNeedsSize(t *testing.T) {
	clk := newClock()
	cfg := testConfig(clk)
	cfg.MaxBytes = 10
	if _, err := New[*response](cfg); err == nil {
		t.Fatal("MaxBytes without Size accepted")
	}
}
