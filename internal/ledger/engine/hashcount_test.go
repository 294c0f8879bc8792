package engine

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestHashCounts checks the packed set against a map, with hashes chosen to
// collide: few shards, few homes, tags told apart only by their low bits
// under the count, and counts driven past sticky.
func TestHashCounts(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		c := newHashCounts(int(seed) * 100) // sized ahead or grown from empty
		want := map[uint64]uint32{}
		// The pool: 2 shards, in each a few thousand homes and the last
		// few of the table, and tags shared by hashes that differ only under
		// the count: probes run long, wrap, and shift back on removal.
		var pool []uint64
		for range 400 {
			h := uint64(rng.IntN(2))<<56 | uint64(rng.IntN(3000))<<countBits | uint64(rng.IntN(256))
			end := uint64(rng.IntN(2))<<56 | uint64(1<<20-1-rng.IntN(8))<<countBits // homes at the table's end: probes wrap
			pool = append(pool, h, end|uint64(rng.IntN(256)))
		}
		for step := range 20_000 {
			h := pool[rng.IntN(len(pool))]
			tag := tagOf(h)
			n := want[tag]
			d := int64(1)
			if n > 0 && rng.IntN(2) == 0 {
				d = -1
			}
			if rng.IntN(500) == 0 { // a burst past sticky
				d = 300
			}
			if err := c.add(h, d); err != nil {
				t.Fatalf("seed %d step %d: add(%#x, %d): %v", seed, step, h, d, err)
			}
			switch {
			case n == sticky:
			case int64(n)+d >= sticky:
				want[tag] = sticky
			case int64(n)+d == 0:
				delete(want, tag)
			default:
				want[tag] = uint32(int64(n) + d)
			}
			if got := c.get(h); got != want[tag] {
				t.Fatalf("seed %d step %d: get(%#x) = %d, want %d", seed, step, h, got, want[tag])
			}
		}
		got := map[uint64]uint32{}
		c.each(func(tag uint64, n uint32) { got[tag] = n })
		if len(got) != len(want) || c.len() != len(want) {
			t.Fatalf("seed %d: %d tags held (len %d), want %d", seed, len(got), c.len(), len(want))
		}
		for tag, n := range want {
			if got[tag] != n {
				t.Fatalf("seed %d: tag %#x counts %d, want %d", seed, tag, got[tag], n)
			}
		}
		for _, h := range pool { // every probe still finds what is held
			if g := c.get(h); g != want[tagOf(h)] {
				t.Fatalf("seed %d: get(%#x) = %d after the run, want %d", seed, h, g, want[tagOf(h)])
			}
		}
	}
}

func TestHashCountsRefuseUncounted(t *testing.T) {
	c := newHashCounts(0)
	if err := c.add(42<<countBits, -1); !errors.Is(err, ErrStore) {
		t.Fatalf("removing from an empty set: %v, want ErrStore", err)
	}
	if err := c.add(42<<countBits, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.add(43<<countBits, -1); !errors.Is(err, ErrStore) {
		t.Fatalf("removing an absent hash: %v, want ErrStore", err)
	}
	if c.get(42<<countBits) != 1 || c.len() != 1 {
		t.Fatalf("a refused removal changed the set: count %d, len %d", c.get(42<<countBits), c.len())
	}
}

// BenchmarkHashCountsBytes reports the bytes per hash of the packed set for
// 1 M random hashes grown from empty (one op is the whole fill; the figure
// is the memory, not the time).
func BenchmarkHashCountsBytes(b *testing.B) {
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	for range b.N {
		c := newHashCounts(0)
		for range n {
			if err := c.add(rng.Uint64(), 1); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(c.bytes())/n, "bytes/hash")
	}
}

// len returns how many distinct tags the set holds.
func (c *hashCounts) len() int {
	n := 0
	for i := range c.shards {
		n += c.shards[i].n
	}
	return n
}

// each calls fn with every tag and its count.
func (c *hashCounts) each(fn func(tag uint64, n uint32)) {
	for i := range c.shards {
		for _, w := range c.shards[i].slots {
			if w != 0 {
				fn(tagOf(w), uint32(w&countMask))
			}
		}
	}
}

// bytes is the memory its tables hold.
func (c *hashCounts) bytes() int {
	n := 0
	for i := range c.shards {
		n += 8 * len(c.shards[i].slots)
	}
	return n
}
