package cache

import (
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Run with: go test -tags hashicorpmetrics -run '^$' -bench . -benchmem -cpu 1,2 ./internal/cache/

func benchCache(b *testing.B, shards int) *Cache[*response] {
	b.Helper()
	c, err := New[*response](Config{
		MaxEntries:      100000, // the IDEMPOTENCY_MAX_ENTRIES default
		PendingTTL:      time.Minute,
		CleanupInterval: 10 * time.Second,
		Shards:          shards,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// benchKeys are tenant-scoped keys shaped like the gate's (structured form).
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = Key("tenant-a", "host1.dc1:4242:"+strconv.Itoa(i)+":a1b2c3d4e5f6a7b8")
	}
	return keys
}

var shardCases = []int{1, 16}

// Begin (a miss: a new owner) then Complete, on keys never seen before, from
// every P; the cache is full, so each insert also evicts. Each goroutine walks
// its own stride of the keys (no shared counter in the loop).
func BenchmarkBeginComplete(b *testing.B) {
	// 512Ki keys through a 100k cache: a key is long evicted when it comes back.
	const n = 1 << 19
	keys := benchKeys(n)
	v := &response{status: 201, body: make([]byte, 200)}
	for _, shards := range shardCases {
		b.Run(fmt.Sprint("shards=", shards), func(b *testing.B) {
			c := benchCache(b, shards)
			for _, k := range keys[n-100000:] { // fill with keys used last
				completeIn(c.Begin(k, "fp").Owner, v, Committed, 0)
			}
			procs := uint64(runtime.GOMAXPROCS(0))
			var ids atomic.Uint64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := ids.Add(1) - 1
				for pb.Next() {
					l := c.Begin(keys[i%n], "fp")
					if l.Kind != LookupMiss {
						b.Errorf("kind %v", l.Kind)
						return
					}
					completeIn(l.Owner, v, Committed, 0)
					i += procs
				}
			})
		})
	}
}

// Begin hits on a few hot completed keys, from every P.
func BenchmarkHitHot(b *testing.B) {
	const hot = 64
	keys := benchKeys(hot)
	v := &response{status: 201, body: make([]byte, 200)}
	for _, shards := range shardCases {
		b.Run(fmt.Sprint("shards=", shards), func(b *testing.B) {
			c := benchCache(b, shards)
			for _, k := range keys {
				completeIn(c.Begin(k, "fp").Owner, v, Committed, 0)
			}
			var next atomic.Uint64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := next.Add(7919) // each P starts elsewhere in the hot set
				for pb.Next() {
					i++
					if l := c.Begin(keys[i%hot], "fp"); l.Kind != LookupHit {
						b.Errorf("kind %v", l.Kind)
						return
					}
				}
			})
		})
	}
}
