package engine

import (
	"fmt"
	"math/bits"
)

// hashCounts is a counting set of 64-bit hashes packed into one word per
// hash: the hash's upper 56 bits (its tag) and a count in the low 8, in
// open-addressing tables with linear probing. 8 bytes a slot, at most
// maxLoadNum/maxLoadDen of them full: 10-20 bytes per hash where a Go map of
// uint64 to uint32 took ~30 (docs/benchmarks.md).
//
// Two hashes with the same tag share a slot, and a count that reaches 255
// stays there, counted forever: for the key counts (keys.go) either only
// makes a read go to pebble that did not need to, never a wrong answer.
//
// The set is split into hashShards tables by the hash's top byte, each
// grown on its own by doubling, so a growth, on the apply path, copies
// 1/256 of the set (at 100 M hashes, ~400 k of them) and needs that much
// memory more, not the whole set's.
type hashCounts struct {
	shards [hashShards]hashShard
}

const (
	hashShards = 256
	countBits  = 8
	countMask  = 1<<countBits - 1
	// sticky is the count that no longer changes.
	sticky = countMask

	maxLoadNum, maxLoadDen = 4, 5 // a table grows past 80 % full
	minSlots               = 16
)

type hashShard struct {
	slots []uint64 // a power of two long, or empty; 0 is an empty slot
	n     int
}

// newHashCounts returns a set sized for about n hashes.
func newHashCounts(n int) *hashCounts {
	c := &hashCounts{}
	if per := n / hashShards; per > 0 {
		size := slotsFor(per)
		for i := range c.shards {
			c.shards[i].slots = make([]uint64, size)
		}
	}
	return c
}

// slotsFor is the table size that holds n tags under the load bound.
func slotsFor(n int) int {
	want := n*maxLoadDen/maxLoadNum + 1
	return max(minSlots, 1<<bits.Len(uint(want-1)))
}

func tagOf(h uint64) uint64 { return h &^ countMask }

// home is where tag's probe starts in a table of size slots: the bits
// under the top byte (which chose the shard).
func home(tag uint64, size int) int { return int(tag>>countBits) & (size - 1) }

// find returns the slot holding tag, or the empty slot where it would go.
func (s *hashShard) find(tag uint64) (int, bool) {
	mask := len(s.slots) - 1
	for i := home(tag, len(s.slots)); ; i = (i + 1) & mask {
		switch w := s.slots[i]; {
		case w == 0:
			return i, false
		case tagOf(w) == tag:
			return i, true
		}
	}
}

// get returns h's count (0: absent).
func (c *hashCounts) get(h uint64) uint32 {
	s := &c.shards[h>>56]
	if len(s.slots) == 0 {
		return 0
	}
	i, ok := s.find(tagOf(h))
	if !ok {
		return 0
	}
	return uint32(s.slots[i] & countMask)
}

// add changes h's count by d. Taking a count below 0 is an error: an item
// left that was never counted.
func (c *hashCounts) add(h uint64, d int64) error {
	tag := tagOf(h)
	s := &c.shards[h>>56]
	if d > 0 && (s.n+1)*maxLoadDen > len(s.slots)*maxLoadNum {
		s.grow()
	}
	if len(s.slots) == 0 {
		return fmt.Errorf("%w: an item left that was never counted", ErrStore)
	}
	i, ok := s.find(tag)
	n := int64(0)
	if ok {
		n = int64(s.slots[i] & countMask)
	}
	switch {
	case n == sticky:
		return nil
	case n+d < 0:
		return fmt.Errorf("%w: an item left that was never counted", ErrStore)
	case n+d == 0:
		if ok {
			s.remove(i)
		}
		return nil
	}
	if !ok {
		s.n++
	}
	s.slots[i] = tag | uint64(min(n+d, sticky))
	return nil
}

// remove empties slot i, moving back the slots after it that would not be
// found past the hole (backward-shift deletion: no tombstones).
func (s *hashShard) remove(i int) {
	mask := len(s.slots) - 1
	for j := (i + 1) & mask; s.slots[j] != 0; j = (j + 1) & mask {
		h := home(s.slots[j], len(s.slots))
		// The slot at j stays unless its home is outside (i, j], cyclically.
		if (i < j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = 0
	s.n--
}

func (s *hashShard) grow() {
	old := s.slots
	s.slots = make([]uint64, max(minSlots, 2*len(old)))
	for _, w := range old {
		if w != 0 {
			i, _ := s.find(tagOf(w))
			s.slots[i] = w
		}
	}
}
