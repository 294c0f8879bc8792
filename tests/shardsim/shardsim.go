// Package shardsim models the sharding plan of docs/scaling.md: how a
// datacenter would split its idempotency keyspace over several Raft groups.
// Nothing in the daemons uses it; it exists so that the plan's numbers (load
// balance across groups, keys moved by a rebalance, the gate's routing cost)
// come from code that can be run and checked, not from arithmetic on paper.
//
// The model: a key routes to one of NumSlots slots by a stable hash of its
// tenant and its routing part (the client_id of a structured key, so that one
// client's sequence watermark stays in one group; the whole key otherwise);
// a Table assigns every slot to exactly one group; Rebalance moves the fewest
// slots that make the groups even.
package shardsim

import (
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/once-dev/once/pkg/keys"
)

// NumSlots is the number of hash slots the keyspace is cut into: enough that
// 64 groups still hold 64 slots each (balance within 1/64), few enough that
// the slot table is a few kilobytes every gate can cache.
const NumSlots = 4096

// Slot is a hash slot, 0 <= Slot < NumSlots.
type Slot uint16

// RoutingPart is the part of an Idempotency-Key that decides its slot: the
// client_id of a structured key (all of one client's sequences, and so its
// watermark, live in one group), or the whole key when it is opaque.
func RoutingPart(key string) string {
	k, err := keys.Parse(key)
	if err == nil && k.Structured {
		return k.ClientID
	}
	return key
}

// SlotOf returns the slot of (tenant, key). It is stable across processes and
// releases (FNV-1a 64 over length-prefixed parts), as a routing table shared
// by gates and groups must be.
func SlotOf(tenant, key string) Slot {
	part := RoutingPart(key)
	h := fnv.New64a()
	var n [2]byte
	for _, s := range []string{tenant, part} {
		n[0], n[1] = byte(len(s)>>8), byte(len(s))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return Slot(h.Sum64() % NumSlots)
}

// Table assigns every slot to a group. Epoch grows with every change: a group
// refuses a command stamped with another epoch for a slot that moved, which is
// what keeps two groups from ever admitting the same slot (docs/scaling.md).
type Table struct {
	Epoch  uint64
	Groups int
	Owner  [NumSlots]int
}

// NewTable spreads the slots evenly over n groups.
func NewTable(n int) (*Table, error) {
	if n < 1 || n > NumSlots {
		return nil, fmt.Errorf("shardsim: %d groups: want 1..%d", n, NumSlots)
	}
	t := &Table{Epoch: 1, Groups: n}
	for s := range t.Owner {
		t.Owner[s] = s % n
	}
	return t, nil
}

// Counts returns the number of slots each group owns.
func (t *Table) Counts() []int {
	c := make([]int, t.Groups)
	for _, g := range t.Owner {
		c[g]++
	}
	return c
}

// Move is one slot handed from one group to another.
type Move struct {
	Slot     Slot
	From, To int
}

// Rebalance returns the table for n groups and the slot moves that lead to
// it, moving as few slots as possible: a group keeps its slots up to its new
// fair share (NumSlots/n, the first NumSlots%n groups one more), and only the
// surplus moves, to the groups under their share. Adding one group to g moves
// NumSlots/(g+1) slots, the least any even layout allows.
func (t *Table) Rebalance(n int) (*Table, []Move, error) {
	if n < 1 || n > NumSlots {
		return nil, nil, fmt.Errorf("shardsim: %d groups: want 1..%d", n, NumSlots)
	}
	share := func(g int) int {
		s := NumSlots / n
		if g < NumSlots%n {
			s++
		}
		return s
	}
	next := &Table{Epoch: t.Epoch + 1, Groups: n, Owner: t.Owner}
	have := make([]int, n)
	var free []Slot // slots whose owner is over its share or gone
	for s, g := range t.Owner {
		if g < n && have[g] < share(g) {
			have[g]++
			continue
		}
		free = append(free, Slot(s))
	}
	var moves []Move
	g := 0
	for _, s := range free {
		for have[g] >= share(g) {
			g++
		}
		moves = append(moves, Move{Slot: s, From: t.Owner[s], To: g})
		next.Owner[s] = g
		have[g]++
	}
	return next, moves, nil
}

// Load is the outcome of routing a workload through a table.
type Load struct {
	PerGroup []int
	// MaxOverMean is the busiest group's share over the mean share: 1.0 is
	// perfect balance; the cluster's throughput is bounded by the busiest
	// group, so N groups deliver N/MaxOverMean times one group.
	MaxOverMean float64
}

// Route counts the submissions of a workload per group. weights[i] is the
// number of submissions of the client keys[i] (a key of that client).
func Route(t *Table, tenants, clientKeys []string, weights []int) Load {
	per := make([]int, t.Groups)
	total := 0
	for i := range clientKeys {
		g := t.Owner[SlotOf(tenants[i], clientKeys[i])]
		per[g] += weights[i]
		total += weights[i]
	}
	mean := float64(total) / float64(t.Groups)
	return Load{PerGroup: per, MaxOverMean: float64(slices.Max(per)) / mean}
}
