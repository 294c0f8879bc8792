package shardsim

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// workload builds clients of tenants whose sizes follow a Zipf law (a few big
// tenants, many small ones) and whose per-client submission counts follow
// another (a few hot clients): the shape real multi-tenant traffic has.
func workload(tenants, clients int, hotClients bool) (ts, ks []string, ws []int) {
	r := rand.New(rand.NewPCG(1, 2))
	tz := rand.NewZipf(r, 1.1, 1, uint64(tenants-1))
	cz := rand.NewZipf(r, 1.3, 1, 10000)
	for c := range clients {
		t := fmt.Sprintf("tenant-%d", tz.Uint64())
		ts = append(ts, t)
		ks = append(ks, fmt.Sprintf("host%d.dc1:%d:1:0123456789abcdef", c, r.Uint32()))
		w := 10
		if hotClients {
			w = 1 + int(cz.Uint64())
		}
		ws = append(ws, w)
	}
	return ts, ks, ws
}

func TestClientKeysShareASlot(t *testing.T) {
	a := SlotOf("t1", "host1.dc1:1234:1:0123456789abcdef")
	for seq := 2; seq < 100; seq++ {
		if s := SlotOf("t1", fmt.Sprintf("host1.dc1:1234:%d:fedcba9876543210", seq)); s != a {
			t.Fatalf("sequence %d of one client routes to slot %d, the first to %d: its watermark would span groups", seq, s, a)
		}
	}
	if SlotOf("t2", "host1.dc1:1234:1:0123456789abcdef") == a && SlotOf("t3", "host1.dc1:1234:1:0123456789abcdef") == a {
		t.Fatal("the tenant does not take part in the slot")
	}
	// Opaque keys spread by the whole key.
	seen := map[Slot]bool{}
	for i := range 64 {
		seen[SlotOf("t1", fmt.Sprintf("order-%d", i))] = true
	}
	if len(seen) < 60 {
		t.Fatalf("64 opaque keys landed in %d slots", len(seen))
	}
}

func TestBalanceAcrossGroups(t *testing.T) {
	ts, ks, ws := workload(1000, 100_000, false)
	for _, groups := range []int{2, 4, 8, 16, 32} {
		tab, err := NewTable(groups)
		if err != nil {
			t.Fatal(err)
		}
		l := Route(tab, ts, ks, ws)
		t.Logf("%2d groups, 100k clients of 1000 Zipf tenants: busiest group %.3f x the mean", groups, l.MaxOverMean)
		if l.MaxOverMean > 1.05 {
			t.Errorf("%d groups: busiest group carries %.3f x the mean (want <= 1.05)", groups, l.MaxOverMean)
		}
	}
}

func TestHotClientsBoundTheSpread(t *testing.T) {
	// With a few very hot clients, balance is bounded by the hottest client:
	// all of its keys live in one slot (its watermark does). The plan says so
	// (docs/scaling.md); this measures by how much.
	ts, ks, ws := workload(1000, 100_000, true)
	tab, _ := NewTable(16)
	l := Route(tab, ts, ks, ws)
	total, hottest := 0, 0
	for _, w := range ws {
		total += w
		hottest = max(hottest, w)
	}
	t.Logf("16 groups, Zipf(1.3) clients: busiest group %.3f x the mean; hottest client %.2f%% of all submissions", l.MaxOverMean, 100*float64(hottest)/float64(total))
	if l.MaxOverMean > 1.25 {
		t.Errorf("busiest group carries %.3f x the mean (want <= 1.25)", l.MaxOverMean)
	}
}

func TestRebalanceMovesTheFewestSlots(t *testing.T) {
	for _, c := range []struct{ from, to int }{{1, 2}, {3, 4}, {4, 5}, {16, 17}, {8, 6}} {
		tab, _ := NewTable(c.from)
		next, moves, err := tab.Rebalance(c.to)
		if err != nil {
			t.Fatal(err)
		}
		if next.Epoch != tab.Epoch+1 {
			t.Errorf("%d->%d: epoch %d after %d", c.from, c.to, next.Epoch, tab.Epoch)
		}
		counts := next.Counts()
		lo, hi := NumSlots, 0
		for _, n := range counts {
			lo, hi = min(lo, n), max(hi, n)
		}
		if hi-lo > 1 {
			t.Errorf("%d->%d: uneven after rebalance: %v", c.from, c.to, counts)
		}
		// The least any even layout allows: the slots above the new share of
		// the groups that stay, plus all slots of the groups that go.
		want := 0
		for g, n := range tab.Counts() {
			share := NumSlots / c.to
			if g < NumSlots%c.to {
				share++
			}
			if g >= c.to {
				want += n
			} else if n > share {
				want += n - share
			}
		}
		if len(moves) != want {
			t.Errorf("%d->%d: %d slots moved, the least possible is %d", c.from, c.to, len(moves), want)
		}
		for _, m := range moves {
			if tab.Owner[m.Slot] != m.From || next.Owner[m.Slot] != m.To || m.From == m.To {
				t.Fatalf("%d->%d: move %+v does not match the tables", c.from, c.to, m)
			}
		}
		t.Logf("%2d -> %2d groups: %4d of %d slots move (%.1f%%)", c.from, c.to, len(moves), NumSlots, 100*float64(len(moves))/NumSlots)
	}
}

func TestTableBounds(t *testing.T) {
	if _, err := NewTable(0); err == nil {
		t.Error("NewTable(0) accepted")
	}
	tab, _ := NewTable(2)
	if _, _, err := tab.Rebalance(NumSlots + 1); err == nil {
		t.Error("Rebalance above NumSlots accepted")
	}
}

// BenchmarkSlotOf is the gate's added work per submission under the plan:
// parse the key's client_id and hash it.
func BenchmarkSlotOf(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = SlotOf("tenant-42", "host1.dc1:1234:987654:0123456789abcdef")
	}
}
