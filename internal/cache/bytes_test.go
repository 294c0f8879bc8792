package cache

import (
	"fmt"
	"math/rand/v2"
	"sync"
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

// TestMaxBytesBoundsTheWholeCache: MaxBytes bounds the bytes of the whole
// cache, not each shard by a share of it. In an empty cache of several
// shards, an outcome larger than MaxBytes/Shards but within MaxBytes is
// cached; the outcomes cached over every shard never sum past MaxBytes; and
// bytes given back in one shard make room in any other.
func TestMaxBytesBoundsTheWholeCache(t *testing.T) {
	c, clk := newCache(t, func(cfg *Config) {
		byteConfig(100)(cfg)
		cfg.Shards = 4
	})
	big := &response{status: 201, body: make([]byte, 60)} // more than a shard's 25
	a := mustBegin(t, c, "a", "fp", LookupMiss)
	mustComplete(t, a.Owner, big, Committed, 0)
	mustBegin(t, c, "a", "fp", LookupHit)

	// 60 more bytes fit in no shard while a holds its 60; 40 fit in any.
	const keys = 16 // over every shard (the seed is random)
	for i := range keys {
		o := mustBegin(t, c, fmt.Sprint("big", i), "fp", LookupMiss)
		mustComplete(t, o.Owner, big, Committed, 0)
	}
	if st := c.Stats(); st.NotCached != keys {
		t.Fatalf("stats %+v: want all %d outcomes of 60 bytes not cached next to a's 60 (bound 100)", st, keys)
	}
	small := mustBegin(t, c, "small", "fp", LookupMiss)
	mustComplete(t, small.Owner, &response{status: 201, body: make([]byte, 40)}, Committed, time.Minute)
	mustBegin(t, c, "small", "fp", LookupHit)

	// Bytes given back in one shard (expired and swept) make room for an
	// outcome in whatever shard it falls.
	for i := range keys {
		clk.Advance(committedTTL)
		c.Sweep()
		key := fmt.Sprint("again", i)
		o := mustBegin(t, c, key, "fp", LookupMiss)
		mustComplete(t, o.Owner, big, Committed, 0)
		mustBegin(t, c, key, "fp", LookupHit)
	}
}

// TestMaxBytesCountUnderConcurrency: completions, hits, evictions, expiries
// and sweeps from many goroutines over several shards keep the byte count
// within MaxBytes at every moment, and equal, once they stop, to the sizes
// of the completed entries the cache holds.
func TestMaxBytesCountUnderConcurrency(t *testing.T) {
	const (
		workers  = 8
		keys     = 64
		maxBytes = 300
	)
	ops := 2000
	if testing.Short() {
		ops = 200
	}
	c, clk := newCache(t, func(cfg *Config) {
		byteConfig(maxBytes)(cfg)
		cfg.Shards, cfg.MaxEntries = 4, 16
	})
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range ops {
				switch op := rng.IntN(100); {
				case op < 3:
					clk.Advance(time.Duration(rng.IntN(20)) * time.Second)
				case op < 5:
					c.Sweep()
				default:
					if l := c.Begin(fmt.Sprint("k", rng.IntN(keys)), "fp"); l.Kind == LookupMiss {
						v := &response{body: make([]byte, rng.IntN(120))}
						completeIn(l.Owner, v, Committed, time.Duration(1+rng.IntN(30))*time.Second)
					}
				}
				if n := c.bytes.Load(); n < 0 || n > maxBytes {
					errs <- fmt.Errorf("byte count %d outside [0, %d]", n, maxBytes)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var sum int64
	for i := range c.shards {
		for _, e := range c.shards[i].done.Values() {
			sum += int64(len(e.value.body))
		}
	}
	if n := c.bytes.Load(); n != sum {
		t.Fatalf("byte count %d, the cached outcomes hold %d", n, sum)
	}
	clk.Advance(time.Hour)
	c.Sweep()
	if n := c.bytes.Load(); n != 0 || c.Len() != 0 {
		t.Fatalf("%d bytes in %d entries after every entry expired and was swept, want none", n, c.Len())
	}
}
