package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/raft"
)

// TestBatchMixedOutcomes applies one AdmitBatch whose items get every kind
// of answer, and checks each item's Result.
func TestBatchMixedOutcomes(t *testing.T) {
	h := newHarness(t)
	dup := reserve("acme", "dup", t0)
	reused := reserve("acme", "reused", t0)
	h.must(admit(dup), OutcomeCommitted)
	h.must(admit(reused), OutcomeCommitted)

	now := t0 + sec
	fresh1, fresh2 := reserve("acme", "new-1", now), reserve("acme", "new-2", now)
	other := reused
	other.Fingerprint, other.JobID, other.Now = "another", "job-other", now
	again := dup
	again.JobID, again.Now = "job-again", now
	tooBig := reserve("acme", "big", now)
	tooBig.MaxEntries = 2 // the table holds 2 live entries before this batch
	bad := reserve("acme", "bad", now)
	bad.MaxEntries = 0 // invalid
	fresh3 := reserve("globex", "new-3", now)

	res := h.must(AdmitBatch{Items: []Command{admit(fresh1), admit(again), admit(other), admit(tooBig), admit(bad),
		admitWith(fresh2, reject(fresh2, now, 422)), admit(fresh3)}}, OutcomeBatch)
	want := []Outcome{OutcomeCommitted, OutcomeExists, OutcomeKeyReused, OutcomeFull, OutcomeInvalid,
		OutcomeRejected, OutcomeCommitted}
	checkItems(t, res, want)
	if !errors.Is(res.Items[4].Err, ErrInvalidCommand) {
		t.Fatalf("invalid item error %v", res.Items[4].Err)
	}
	if res.Items[1].Entry.JobID != dup.JobID || res.Items[2].Entry.Fingerprint != reused.Fingerprint {
		t.Fatalf("duplicate answers %+v / %+v", res.Items[1].Entry, res.Items[2].Entry)
	}
	if e, ok := h.f.Entry("acme", "bad"); ok {
		t.Fatalf("an invalid item left an entry %+v", e)
	}
	// Seqs as singles on consecutive indexes would get: index + position.
	for i, wantSeq := range map[int]uint64{0: h.idx, 6: h.idx + 6} {
		if got := res.Items[i].Job.Seq; got != wantSeq {
			t.Fatalf("item %d seq %d, want %d", i, got, wantSeq)
		}
	}
	// The next single Admit takes a Seq after the batch's, though its index is lower.
	late := reserve("acme", "late", now)
	h.must(admit(late), OutcomeCommitted)
	if j, _ := h.f.Job("acme", late.JobID); j.Seq != h.idx-1+7 {
		t.Fatalf("single admit after a batch: seq %d, want %d", j.Seq, h.idx-1+7)
	}
	// A restored replica keeps giving Seqs past the batch's.
	g := restore(t, persist(t, h.f))
	if !bytes.Equal(persist(t, g), persist(t, h.f)) {
		t.Fatal("restored snapshot differs")
	}
	if g.s.lastSeq != h.f.s.lastSeq {
		t.Fatalf("restored lastSeq %d, want %d", g.s.lastSeq, h.f.s.lastSeq)
	}
}

func checkItems(t *testing.T, res Result, want []Outcome) {
	t.Helper()
	if len(res.Items) != len(want) {
		t.Fatalf("%d item results, want %d", len(res.Items), len(want))
	}
	for i, w := range want {
		if res.Items[i].Outcome != w {
			t.Errorf("item %d: %v (%v), want %v", i, res.Items[i].Outcome, res.Items[i].Err, w)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func TestBatchRefused(t *testing.T) {
	h := newHarness(t)
	for name, data := range map[string][]byte{
		"empty admit batch": Encode(AdmitBatch{}),
		"expire in a batch": {byte(TypeAdmitBatch), 1, 1, 2, byte(TypeExpire), 2},
		"nested batch": append([]byte{byte(TypeAdmitBatch), 1, 1, 5},
			Encode(AdmitBatch{Items: []Command{admit(reserve("a", "b", t0))}})[:5]...),
		"admit in a worker batch": append([]byte{byte(TypeWorkerBatch), 1, 1, byte(len(Encode(admit(reserve("a", "b", t0)))))},
			Encode(admit(reserve("a", "b", t0)))...),
		"version 2": {byte(TypeAdmitBatch), 2, 0},
	} {
		res := h.applyRaw(data)
		if res.Outcome != OutcomeInvalid || res.Err == nil || res.Items != nil {
			t.Fatalf("%s: %v (%v)", name, res.Outcome, res.Err)
		}
	}
	if st := h.f.Stats(); st.Entries != 0 {
		t.Fatalf("a refused batch changed the state: %+v", st)
	}
}

// batched rewrites a log of single commands as the same logical sequence in
// batch commands: every run of consecutive Admits becomes one AdmitBatch,
// every run of workers' commands one WorkerBatch, each at the index of the
// run's first entry. A run ends at maxRun items or at any other entry.
func batched(t *testing.T, logs []*raft.Log, maxRun int) (out []*raft.Log, runs [][]int) {
	t.Helper()
	kind := func(l *raft.Log) CommandType {
		if l.Type != raft.LogCommand {
			return 0
		}
		c, err := DecodeCommand(l.Data)
		if err != nil {
			return 0
		}
		switch c.(type) {
		case Admit:
			return TypeAdmitBatch
		case Lease, Heartbeat, Complete, Fail:
			return TypeWorkerBatch
		}
		return 0
	}
	for i := 0; i < len(logs); {
		k := kind(logs[i])
		if k == 0 {
			out, runs = append(out, logs[i]), append(runs, []int{i})
			i++
			continue
		}
		j := i
		for j < len(logs) && j-i < maxRun && kind(logs[j]) == k {
			j++
		}
		var run []int
		var items []Command
		for x := i; x < j; x++ {
			c, _ := DecodeCommand(logs[x].Data)
			run = append(run, x)
			items = append(items, c)
		}
		var data []byte
		switch k {
		case TypeAdmitBatch:
			data = Encode(AdmitBatch{Items: items})
		default:
			data = Encode(WorkerBatch{Items: items})
		}
		out = append(out, &raft.Log{Index: logs[i].Index, Term: 1, Type: raft.LogCommand, Data: data})
		runs = append(runs, run)
		i = j
	}
	return out, runs
}

// TestDeterminismBatches applies the same logical sequence as single commands
// (one FSM) and as batch commands (another): every item's Result equals its
// single's, and the snapshots are byte-identical (the batched FSM is given an
// ignorable no-op at the last single's index, so both have applied the same
// index).
func TestDeterminismBatches(t *testing.T) {
	for _, tc := range []struct{ seed, scale uint64 }{{1, 1}, {3, 40}, {5, 1}} {
		t.Run(fmt.Sprintf("seed=%d,scale=%d", tc.seed, tc.scale), func(t *testing.T) {
			const n = 3000
			logs := genLog(tc.seed, n, int64(tc.scale))
			rng := rand.New(rand.NewPCG(tc.seed, 11))
			blogs, runs := batched(t, logs, 1+rng.IntN(32))
			if len(blogs) >= len(logs) {
				t.Fatalf("nothing batched: %d entries", len(blogs))
			}
			a, b := newFSM(t, Options{}), newFSM(t, Options{})
			items := 0
			for k, bl := range blogs {
				var single []Result
				for _, i := range runs[k] {
					r, _ := a.Apply(logs[i]).(Result)
					single = append(single, r)
				}
				got := b.Apply(bl)
				if logs[runs[k][0]].Type != raft.LogCommand {
					continue
				}
				res := got.(Result)
				if res.Outcome != OutcomeBatch {
					if len(runs[k]) != 1 || !sameResult(res, single[0]) {
						t.Fatalf("entry %d: %+v vs %+v", k, res, single)
					}
					continue
				}
				for x := range single {
					if !sameResult(res.Items[x], single[x]) {
						t.Fatalf("entry %d item %d:\nbatch  %+v\nsingle %+v", k, x, res.Items[x], single[x])
					}
					items++
				}
			}
			if last := logs[len(logs)-1].Index; b.Stats().AppliedIndex != last {
				b.Apply(&raft.Log{Index: last, Type: raft.LogCommand, Data: []byte{byte(TypeIgnorable) | 0x33, 1}})
			}
			sa, sb := persist(t, a), persist(t, b)
			if !bytes.Equal(sa, sb) {
				t.Fatalf("snapshots differ (%d vs %d bytes)", len(sa), len(sb))
			}
			if a.LedgerTime() != b.LedgerTime() {
				t.Fatal("ledger times differ")
			}
			checkInvariants(t, b)
			t.Logf("%d log entries as %d; %d batched items; final %+v", len(logs), len(blogs), items, b.Stats())
		})
	}
}

// TestOldLogReplaysAfterBatches: a log of single commands of every type
// replays to the same state whether or not batches follow it.
func TestOldLogReplaysAfterBatches(t *testing.T) {
	logs := genLog(9, 1500, 40)
	a := newFSM(t, Options{})
	for _, l := range logs {
		a.Apply(l)
	}
	want := persist(t, a)
	b := newFSM(t, Options{})
	b.ApplyBatch(logs)
	if got := persist(t, b); !bytes.Equal(got, want) {
		t.Fatal("old log replays differently")
	}
	// Then batches apply on top of it.
	idx := logs[len(logs)-1].Index
	r := reserve("acme", "after", t0+1e15)
	out := b.Apply(&raft.Log{Index: idx + 1, Type: raft.LogCommand, Data: Encode(AdmitBatch{Items: []Command{admit(r)}})})
	if res := out.(Result); res.Outcome != OutcomeBatch || res.Items[0].Outcome != OutcomeCommitted {
		t.Fatalf("batch after an old log: %+v", res)
	}
}

func TestEncodeBatchMatchesEncode(t *testing.T) {
	r1, r2 := reserve("a", "1", t0), reserve("a", "2", t0)
	as := []Command{admit(r1), admitWith(r2, reject(r2, t0+sec, 422))}
	if !bytes.Equal(EncodeBatch(TypeAdmitBatch, [][]byte{Encode(as[0]), Encode(as[1])}), Encode(AdmitBatch{Items: as})) {
		t.Fatal("admit batch bytes differ")
	}
}
