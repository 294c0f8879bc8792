package ledger

import (
	"testing"

	"github.com/hashicorp/raft"
)

// TestBenchKnobs checks that each of TestingKnobs takes away what
// docs/benchmarks.md says it does, and only that: the state applies the same
// commands to the same counts, and pebble holds what the knob leaves.
func TestBenchKnobs(t *testing.T) {
	const subs = 3000 // three Expires (one every 1000), ~100 entries live
	type held map[byte]int
	run := func(t *testing.T, orders, keep, none bool) (Stats, held) {
		t.Helper()
		knobs := TestingKnobs{OrdersInMemory: orders, KeepRemoved: keep, NoWrites: none}
		f := openFSM(t, t.TempDir(), Options{Store: StoreOptions{Knobs: knobs}})
		g := &benchLog{live: 100}
		var buf []*raft.Log
		for range subs / 10 { // batches of 10 whole submissions
			var logs []*raft.Log
			for range 10 {
				logs = append(logs, g.next(buf)...)
			}
			f.ApplyBatch(logs)
		}
		h := held{}
		f.s.store.Walk(nil, nil, func(k, _ []byte) bool { h[k[0]]++; return true })
		return f.Stats(), h
	}

	want, all := run(t, false, false, false)
	if want.Entries == 0 || want.Entries >= subs || want.Jobs != want.Entries {
		t.Fatalf("the workload left %d entries and %d jobs of %d submissions", want.Entries, want.Jobs, subs)
	}
	if all[pfxEntries] != want.Entries || all[pfxEntryExp] != want.Entries || all[pfxJobs] != want.Jobs || all[pfxJobSeq] != want.Jobs {
		t.Fatalf("the whole store holds %v for %d entries and %d jobs", all, want.Entries, want.Jobs)
	}
	orders := []byte{pfxEntryExp, pfxJobSeq, pfxJobType, pfxJobExp}

	for _, c := range []struct {
		name               string
		orders, keep, none bool
		check              func(t *testing.T, h held)
	}{
		{"orders=memory", true, false, false, func(t *testing.T, h held) {
			for _, p := range orders {
				if h[p] != 0 {
					t.Errorf("%d keys of order %c in pebble", h[p], p)
				}
			}
			if h[pfxEntries] != want.Entries || h[pfxJobs] != want.Jobs {
				t.Errorf("pebble holds %d entries and %d jobs, the state %d and %d", h[pfxEntries], h[pfxJobs], want.Entries, want.Jobs)
			}
		}},
		{"removed=kept", true, true, false, func(t *testing.T, h held) {
			if h[pfxEntries] != subs || h[pfxJobs] != subs {
				t.Errorf("pebble holds %d entries and %d jobs, want every one of the %d submissions'", h[pfxEntries], h[pfxJobs], subs)
			}
		}},
		{"writes=none", true, false, true, func(t *testing.T, h held) {
			for p, n := range h {
				if p > pfxTenantWMs {
					t.Errorf("%d keys with prefix %c in pebble", n, p)
				}
			}
			if h[pfxMeta] != 1 {
				t.Errorf("the counters are not in pebble: %v", h)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, h := run(t, c.orders, c.keep, c.none)
			if st != want {
				t.Errorf("stats %+v, without the knob %+v", st, want)
			}
			c.check(t, h)
		})
	}
}
