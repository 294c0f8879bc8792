package ledger

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// One test per sentence of the FSM doc comment.

func TestContractApplyReturnsResultValue(t *testing.T) {
	f := newFSM(t, Options{})
	out := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: Encode(admit(base))})
	if _, ok := out.(Result); !ok {
		t.Fatalf("Apply returned %T, want ledger.Result", out)
	}
	if _, ok := out.(*Result); ok {
		t.Fatal("Apply returned a pointer")
	}
	for i, typ := range []raft.LogType{raft.LogConfiguration, raft.LogNoop, raft.LogBarrier, raft.LogAddPeerDeprecated} {
		if out := f.Apply(&raft.Log{Index: uint64(2 + i), Type: typ, Data: Encode(admit(base))}); out != nil {
			t.Fatalf("Apply of %v returned %v, want nil", typ, out)
		}
	}
}

func TestContractInvalidChangesOnlyAppliedIndex(t *testing.T) {
	h := newHarness(t)
	h.must(admit(base), OutcomeCommitted)
	before := dumpTables(h.f)
	// Commands that decode and break a rule of their type (one that does
	// not decode halts the FSM: TestHaltOnUndecodableEntry).
	for _, data := range [][]byte{
		Encode(admit(Reserve{Tenant: "t", Key: "k", JobID: "j", Now: 5})),
		Encode(admitWith(Reserve{Tenant: "t", Key: "k", JobID: "j", Now: 5, MaxEntries: 1},
			Reject{Tenant: "t", Key: "k", JobID: "j", Now: 5, ExpiresAt: 6, Status: 200})),
		Encode(admitWith(Reserve{Tenant: "t", Key: "k", JobID: "j", Now: 5, MaxEntries: 1},
			Commit{Tenant: "", Key: "k", JobID: "j", Now: 5, ExpiresAt: 6, JobExpiresAt: 6})),
	} {
		res := h.applyRaw(data)
		if res.Outcome != OutcomeInvalid || !errors.Is(res.Err, ErrInvalidCommand) {
			t.Fatalf("%x: result %+v", data, res)
		}
		if st := h.f.Stats(); st.AppliedIndex != h.idx {
			t.Fatalf("applied index %d, want %d", st.AppliedIndex, h.idx)
		}
	}
	if !reflect.DeepEqual(before, dumpTables(h.f)) {
		t.Fatal("an invalid command changed the state")
	}
}

func TestContractNeverPanics(t *testing.T) {
	h := newHarness(t)
	rng := rand.New(rand.NewPCG(1, 2))
	valid := [][]byte{}
	for _, c := range sampleCommands() {
		valid = append(valid, Encode(c))
	}
	for i := 0; i < 20000; i++ {
		var data []byte
		if i%2 == 0 { // mutate a valid command
			data = bytes.Clone(valid[rng.IntN(len(valid))])
			for k := 0; k < 1+rng.IntN(3); k++ {
				if len(data) > 0 {
					data[rng.IntN(len(data))] = byte(rng.UintN(256))
				}
			}
		} else {
			data = make([]byte, rng.IntN(64))
			for k := range data {
				data[k] = byte(rng.UintN(256))
			}
		}
		// A panic fails the test. What does not decode halts an FSM (a
		// scratch one in memory: this one goes on with the rest).
		if _, err := DecodeCommand(data); err != nil {
			f := New(Options{})
			res := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}).(Result)
			if !errors.Is(res.Err, ErrHalted) || f.Halted() == nil {
				t.Fatalf("%x: %+v, want the halt", data, res)
			}
			continue
		}
		h.applyRaw(data)
	}
	checkInvariants(t, h.f)
}

func TestContractIgnorable(t *testing.T) {
	h := newHarness(t)
	h.must(admit(base), OutcomeCommitted)
	before := dumpTables(h.f)
	for _, data := range [][]byte{{0x80, 1}, {0x9f, 200, 1, 2, 3}, Encode(Unknown{Type: 0xc0, Version: 1, Body: []byte("x")})} {
		if res := h.applyRaw(data); res.Outcome != OutcomeIgnored || res.Err != nil {
			t.Fatalf("%x: %+v", data, res)
		}
	}
	if !reflect.DeepEqual(before, dumpTables(h.f)) {
		t.Fatal("an ignored command changed the state")
	}
}

func TestContractApplyBatchResponses(t *testing.T) {
	f := newFSM(t, Options{})
	logs := []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: Encode(admit(base))},
		{Index: 2, Type: raft.LogConfiguration, Data: []byte("cfg")},
		{Index: 3, Type: raft.LogCommand, Data: Encode(admit(base))},
		{Index: 4, Type: raft.LogCommand, Data: []byte{1}},
	}
	out := f.ApplyBatch(logs)
	if len(out) != len(logs) || out[1] != nil {
		t.Fatalf("responses %v", out)
	}
	want := []Outcome{OutcomeCommitted, 0, OutcomeExists, OutcomeInvalid}
	for i, o := range want {
		if o != 0 && out[i].(Result).Outcome != o {
			t.Fatalf("response %d: %+v, want %v", i, out[i], o)
		}
	}
	if j, _ := f.Job(tenant, base.JobID); j.Seq != 1 {
		t.Fatalf("job seq %d, want the admit's index 1", j.Seq)
	}
	if out := f.ApplyBatch(nil); len(out) != 0 {
		t.Fatal("empty batch")
	}
}

func TestContractIndexesIncrease(t *testing.T) {
	f := newFSM(t, Options{})
	f.Apply(&raft.Log{Index: 5, Type: raft.LogCommand, Data: Encode(admit(base))})
	before := dumpTables(f)
	for _, idx := range []uint64{5, 4, 0} {
		res := f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: Encode(admit(reserve(tenant, "x", t0)))}).(Result)
		if res.Outcome != OutcomeInvalid || !errors.Is(res.Err, ErrInvalidCommand) {
			t.Fatalf("index %d: %+v", idx, res)
		}
	}
	if !reflect.DeepEqual(before, dumpTables(f)) || f.Stats().AppliedIndex != 5 {
		t.Fatal("an out-of-order index changed the state")
	}
}

// Snapshot is O(1): its allocations do not grow with the state.
func TestContractSnapshotIsCheap(t *testing.T) {
	small, _ := populated(t, 21, 50, 50)
	large, _ := populated(t, 22, 5000, 5000)
	allocs := func(f *FSM) float64 {
		return testing.AllocsPerRun(20, func() {
			s, _ := f.Snapshot()
			s.Release()
		})
	}
	if a, b := allocs(small), allocs(large); a != b || b > 24 {
		t.Fatalf("Snapshot allocates %v (small) and %v (large), want a small constant", a, b)
	}
}

// Readers never see a partial command or batch: with only Reserve and Commit
// applied, the counters always agree with each other.
func TestContractReadersSeeWholeCommands(t *testing.T) {
	f := newFSM(t, Options{})
	var logs []*raft.Log
	for i := 0; i < 2000; i++ {
		r := reserve(tenant, string(rune('a'+i%26))+string(rune(0x100+i)), t0)
		var v Verdict = commit(r, t0+1)
		if i%3 == 0 {
			v = reject(r, t0+1, 422)
		}
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogCommand, Data: Encode(admitWith(r, v))})
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < len(logs); i += 7 {
			if i%2 == 0 {
				f.ApplyBatch(logs[i:min(len(logs), i+7)])
			} else {
				for _, l := range logs[i:min(len(logs), i+7)] {
					f.Apply(l)
				}
			}
		}
		close(done)
	}()
	for {
		st := f.Stats()
		if st.Entries != st.Committed+st.Rejected || st.Jobs != st.Committed || st.Rejected != (st.Entries+2)/3 {
			t.Fatalf("inconsistent read %+v", st)
		}
		select {
		case <-done:
			wg.Wait()
			return
		default:
		}
	}
}

func TestContractDueEntriesStayUntilRemoved(t *testing.T) {
	h := newHarness(t)
	h.must(admitWith(base, commit(base, tCommit)), OutcomeCommitted) // index 2 at tCommit: the entry is due at tCommit+commitTTL
	if e := h.entry(tenant, key); e.ExpiresAt != tCommit+commitTTL {
		t.Fatalf("entry %+v", e)
	}
	if at, ok := h.f.NextExpiry(); !ok || at != tCommit+commitTTL {
		t.Fatalf("NextExpiry %d %v", at, ok)
	}
	// No command has run since it became due: still there.
	h.entry(tenant, key)
	h.must(expire(tCommit+commitTTL), OutcomeExpired)
	h.noEntry(tenant, key)
	if at, ok := h.f.NextExpiry(); !ok || at != tCommit+jobTTL {
		t.Fatalf("NextExpiry %d %v, want the job's retention", at, ok)
	}
	h.must(expire(tCommit+jobTTL), OutcomeExpired)
	if _, ok := h.f.NextExpiry(); ok {
		t.Fatal("NextExpiry of an empty FSM")
	}
}

// OnChange runs after the write lock is released (readers work from it and
// see at least the change; after a batch, the state after the whole batch),
// before Apply returns, in log order, with the entry after the change.
func TestContractOnChange(t *testing.T) {
	var f *FSM
	var seen []Change
	f = newFSM(t, Options{OnChange: func(c Change) {
		if !f.mu.TryLock() {
			t.Error("OnChange called while a lock is held")
		} else {
			f.mu.Unlock()
		}
		if c.Kind != ChangeRemoved {
			if e, ok := f.Entry(c.Entry.Tenant, c.Entry.Key); !ok || e.State < c.Entry.State {
				t.Errorf("OnChange(%v): reader sees %+v", c.Kind, e)
			}
		}
		seen = append(seen, c)
	}})
	r2 := reserve(tenant, "second", t0)
	f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: Encode(admitWith(base, commit(base, tCommit)))},
		{Index: 2, Type: raft.LogCommand, Data: Encode(admitWith(r2, reject(r2, tCommit, 429)))},
	})
	if len(seen) != 2 {
		t.Fatalf("%d changes after ApplyBatch returned, want 2", len(seen))
	}
	f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: Encode(expire(t0 + 24*3600*sec))})
	var got []ChangeKind
	var idx []uint64
	for _, c := range seen {
		got = append(got, c.Kind)
		idx = append(idx, c.Index)
	}
	want := []ChangeKind{ChangeCommitted, ChangeRejected, ChangeRemoved, ChangeRemoved}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(idx, []uint64{1, 2, 3, 3}) {
		t.Fatalf("changes %v at %v, want %v", got, idx, want)
	}
	if seen[0].Entry.State != StateCommitted || seen[1].Entry.Status != 429 || seen[2].Entry.State == 0 {
		t.Fatalf("change entries %+v", seen)
	}
}

// Applies moves with every change of the state (an Apply, an ApplyBatch, a
// Restore) and only then: reads do not move it.
func TestAppliesCountsTheStateChanges(t *testing.T) {
	h := newHarness(t)
	if n := h.f.Applies(); n != 0 {
		t.Fatalf("a new FSM counts %d changes", n)
	}
	h.must(admit(reserve("t", "k1", 1*sec)), OutcomeCommitted)
	h.entry("t", "k1")
	if n := h.f.Applies(); n != 1 {
		t.Fatalf("after one Apply and a read: %d changes, want 1", n)
	}
	h.idx++
	h.f.ApplyBatch([]*raft.Log{{Index: h.idx, Term: 1, Type: raft.LogCommand, Data: Encode(admit(reserve("t", "k2", 2*sec)))}})
	if n := h.f.Applies(); n != 2 {
		t.Fatalf("after an ApplyBatch: %d changes, want 2", n)
	}
	snap := persist(t, h.f)
	if err := h.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if n := h.f.Applies(); n != 3 {
		t.Fatalf("after a Restore: %d changes, want 3", n)
	}
}
