package cache

import "sync/atomic"

// Stats are cumulative counters since New, for the gate's /metrics.
type Stats struct {
	Hits       uint64 // Begin answered LookupHit
	Misses     uint64 // Begin answered LookupMiss (a new owner)
	Waits      uint64 // Begin answered LookupPending (whether or not the caller waited)
	Mismatches uint64 // Begin answered LookupMismatch

	WaitTimeouts uint64 // Waiter.Wait returned ErrWaitTimeout
	Abandons     uint64 // Owner.Abandon calls that resolved an entry

	Evictions        uint64 // entries removed by LRU pressure
	PendingEvictions uint64 // of which PENDING (the cache was full of PENDING entries)
	Expirations      uint64 // expired entries removed (by lookup, eviction or sweep)
	// NotCached counts outcomes not cached because they did not fit MaxBytes
	// or had already expired (Owner.CompleteUntil).
	NotCached uint64
}

type counters struct {
	hits, misses, waits, mismatches          atomic.Uint64
	waitTimeouts, abandons                   atomic.Uint64
	evictions, pendingEvictions, expirations atomic.Uint64
	notCached                                atomic.Uint64
}

// Stats returns the counters, summed over the shards without locking.
func (c *Cache[V]) Stats() Stats {
	var st Stats
	for i := range c.shards {
		k := &c.shards[i].stats
		st.Hits += k.hits.Load()
		st.Misses += k.misses.Load()
		st.Waits += k.waits.Load()
		st.Mismatches += k.mismatches.Load()
		st.WaitTimeouts += k.waitTimeouts.Load()
		st.Abandons += k.abandons.Load()
		st.Evictions += k.evictions.Load()
		st.PendingEvictions += k.pendingEvictions.Load()
		st.Expirations += k.expirations.Load()
		st.NotCached += k.notCached.Load()
	}
	return st
}
