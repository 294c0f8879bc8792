package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/btree"
	"github.com/hashicorp/raft"
)

// Times of the tests, in unix nanoseconds.
const (
	t0         = int64(1_800_000_000) * int64(time.Second)
	sec        = int64(time.Second)
	pendingTTL = 60 * sec
	commitTTL  = 300 * sec
	rejectTTL  = 60 * sec
	jobTTL     = 3600 * sec
)

// harness drives one FSM with increasing raft indexes and records changes.
type harness struct {
	t       testing.TB
	f       *FSM
	idx     uint64
	changes []Change
	quiet   bool // must skips checkInvariants (quietly)
}

func newHarness(t testing.TB) *harness {
	h := &harness{t: t}
	h.f = newFSM(t, Options{OnChange: func(c Change) { h.changes = append(h.changes, c) }})
	return h
}

func (h *harness) applyRaw(data []byte) Result {
	h.t.Helper()
	h.idx++
	out := h.f.Apply(&raft.Log{Index: h.idx, Term: 1, Type: raft.LogCommand, Data: data})
	res, ok := out.(Result)
	if !ok {
		h.t.Fatalf("Apply returned %T, want Result", out)
	}
	return res
}

func (h *harness) apply(c Command) Result {
	h.t.Helper()
	return h.applyRaw(Encode(c))
}

// must applies c and fails unless the outcome is want.
func (h *harness) must(c Command, want Outcome) Result {
	h.t.Helper()
	res := h.apply(c)
	if res.Outcome != want {
		h.t.Fatalf("%T: outcome %v (err %v), want %v", c, res.Outcome, res.Err, want)
	}
	if !h.quiet {
		checkInvariants(h.t, h.f)
	}
	return res
}

// quietly runs fn, whose commands skip must's invariant check, then checks
// the invariants once. checkInvariants walks every index: checked after each
// of n commands, a loop costs n walks of up to n items (26 s of TestExpire
// under -race, on disk).
func (h *harness) quietly(fn func()) {
	h.t.Helper()
	h.quiet = true
	fn()
	h.quiet = false
	checkInvariants(h.t, h.f)
}

func (h *harness) entry(tenant, key string) Entry {
	h.t.Helper()
	e, ok := h.f.Entry(tenant, key)
	if !ok {
		h.t.Fatalf("no entry %s/%s", tenant, key)
	}
	return e
}

func (h *harness) noEntry(tenant, key string) {
	h.t.Helper()
	if e, ok := h.f.Entry(tenant, key); ok {
		h.t.Fatalf("entry %s/%s exists: %+v", tenant, key, e)
	}
}

func reserve(tenant, key string, now int64) Reserve {
	return Reserve{
		Tenant:      tenant,
		Key:         key,
		Fingerprint: "fp-" + key,
		JobID:       "job-" + tenant + "-" + key,
		Now:         now,
		MaxEntries:  1000,
		Request: Request{
			Type:        "send_invoice",
			Payload:     json.RawMessage(`{"order":"` + key + `"}`),
			Datacenters: []string{"dc1"},
		},
	}
}

func structured(tenant, client string, seq uint64, nonce string, now int64) Reserve {
	key := fmt.Sprintf("%s:%d:%s", client, seq, nonce)
	r := reserve(tenant, key, now)
	r.Structured, r.ClientID, r.Sequence, r.Nonce = true, client, seq, nonce
	return r
}

// admit is r decided by a Commit at its own Now (a job outside the
// lifecycle): a key taken, as the tests set up their state.
func admit(r Reserve) Admit { return Admit{Reserve: r, Outcome: commit(r, r.Now)} }

// admitWith is r decided by v.
func admitWith(r Reserve, v Verdict) Admit { return Admit{Reserve: r, Outcome: v} }

func commit(r Reserve, now int64) Commit {
	return Commit{Tenant: r.Tenant, Key: r.Key, JobID: r.JobID, Now: now,
		ExpiresAt: now + commitTTL, JobExpiresAt: now + jobTTL}
}

func reject(r Reserve, now int64, status int) Reject {
	return Reject{Tenant: r.Tenant, Key: r.Key, JobID: r.JobID, Now: now,
		ExpiresAt: now + rejectTTL, Status: status, Reason: "capacity", Detail: "queue full"}
}

func expire(now int64) Expire {
	return Expire{Now: now, WatermarkTTL: 24 * time.Hour}
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

// persist takes a snapshot of f and returns its bytes.
func persist(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("sink closed=%v cancelled=%v", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

// restore builds a fresh FSM from snapshot bytes.
func restore(t testing.TB, b []byte) *FSM {
	t.Helper()
	f := newFSM(t, Options{})
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	return f
}

// checkInvariants verifies that every index agrees with its table and that
// the counters are right.
func checkInvariants(t testing.TB, f *FSM) {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.s
	var counts [StateClaimed + 1]int
	s.entries.Ascend(func(e *Entry) bool {
		if !e.State.valid() {
			t.Errorf("entry %s/%s: bad state %d", e.Tenant, e.Key, e.State)
			return true
		}
		counts[e.State]++
		if got, ok := s.entryExp.Get(e); !ok || !reflect.DeepEqual(got, e) {
			t.Errorf("entry %s/%s missing from the expiry index", e.Tenant, e.Key)
		}
		if got, ok := s.multiDC.Get(e); carried(e) != (ok && reflect.DeepEqual(got, e)) {
			t.Errorf("entry %s/%s (%v, %v): multi-datacenter order disagrees", e.Tenant, e.Key, e.State, e.Request.Datacenters)
		}
		return true
	})
	carriedN := 0
	s.entries.Ascend(func(e *Entry) bool {
		if carried(e) {
			carriedN++
		}
		return true
	})
	if countOf(s.multiDC) != carriedN {
		t.Errorf("multiDC has %d items, %d entries belong there", countOf(s.multiDC), carriedN)
	}
	if s.multiDCLen != carriedN {
		t.Errorf("multiDCLen is %d, %d entries are carried", s.multiDCLen, carriedN)
	}
	owedLive := 0
	s.owed.Ascend(func(e *Entry) bool {
		if !carried(e) {
			t.Errorf("owed entry %s/%s/%s owes nothing", e.Tenant, e.Key, e.JobID)
		}
		live, ok := s.entries.Get(&Entry{Tenant: e.Tenant, Key: e.Key})
		if !ok || live.JobID != e.JobID {
			return true
		}
		if carried(live) {
			owedLive++
		}
		// The live entry of an owed job was admitted with the owed copy's
		// confirmations and both were confirmed alike since.
		if slices.Equal(live.Request.Datacenters, e.Request.Datacenters) && !slices.Equal(live.Confirmed, e.Confirmed) {
			t.Errorf("job %s/%s/%s: the live entry is confirmed by %v, its owed copy by %v", e.Tenant, e.Key, e.JobID, live.Confirmed, e.Confirmed)
		}
		return true
	})
	if s.owedLive != owedLive {
		t.Errorf("owedLive is %d, %d owed entries have a carried live entry of their job", s.owedLive, owedLive)
	}
	if countOf(s.entryExp) != s.entries.Len() {
		t.Errorf("entryExp has %d items, entries %d", countOf(s.entryExp), s.entries.Len())
	}
	if counts[StateCommitted] != s.entryStates[StateCommitted] || counts[StateRejected] != s.entryStates[StateRejected] ||
		counts[StateClaimed] != s.entryStates[StateClaimed] {
		t.Errorf("counts %v, counters %v", counts, s.entryStates)
	}
	var jobStates [JobCancelled + 1]int
	var retainedN, queuedN, runningN, lifeN int
	s.jobs.Ascend(func(j *Job) bool {
		st := stateOf(j)
		if st > JobCancelled || (j.Life != nil && st == JobLegacy) {
			t.Errorf("job %s/%s: bad state %d", j.Tenant, j.ID, st)
			return true
		}
		jobStates[st]++
		// Every order holds the job exactly when its state belongs there.
		for _, o := range []struct {
			name string
			idx  interface{ Get(*Job) (*Job, bool) }
			in   bool
		}{
			{"jobSeq", s.jobSeq, true},
			{"jobType", s.jobType, true},
			{"jobExp", s.jobExp, retained(j)},
			{"jobQueue", s.jobQueue, st == JobQueued},
			{"jobQueueType", s.jobQueueType, st == JobQueued},
			{"jobRunning", s.jobRunning, st == JobRunning},
			{"jobState", s.jobState, st != JobLegacy && st != JobRunning},
		} {
			if j.Life == nil && o.name != "jobSeq" && o.name != "jobType" && o.name != "jobExp" {
				continue // a legacy job has no key in the lifecycle's orders (the counts below check it is in none)
			}
			got, ok := o.idx.Get(j)
			if o.in != (ok && reflect.DeepEqual(got, j)) {
				t.Errorf("job %s/%s (%v): %s disagrees (in %v, found %v)", j.Tenant, j.ID, st, o.name, o.in, ok)
			}
		}
		if st == JobRunning {
			got, ok := s.jobLeaseID.Get(runKeyOf(j))
			if !ok || got.id != j.ID {
				t.Errorf("job %s/%s: missing from jobLeaseID", j.Tenant, j.ID)
			}
			for name, o := range map[string]*btree.BTreeG[runKey]{"jobDue": s.jobDue, "jobLeaseExp": s.jobLeaseExp} {
				if got, ok := o.Get(runKeyOf(j)); !ok || got != runKeyOf(j) {
					t.Errorf("job %s/%s: %s holds %+v, want %+v", j.Tenant, j.ID, name, got, runKeyOf(j))
				}
			}
		}
		if retained(j) {
			retainedN++
		}
		switch st {
		case JobQueued:
			queuedN++
		case JobRunning:
			runningN++
		}
		if st != JobLegacy && st != JobRunning {
			lifeN++
		}
		return true
	})
	if sum(s.jobStates[:]) != countOf(s.jobs) {
		t.Errorf("jobs by state %d, jobs %d", sum(s.jobStates[:]), countOf(s.jobs))
	}
	if jobStates != s.jobStates {
		t.Errorf("jobs by state %v, counters %v", jobStates, s.jobStates)
	}
	if countOf(s.jobSeq) != s.jobs.Len() || countOf(s.jobType) != s.jobs.Len() || countOf(s.jobExp) != retainedN {
		t.Errorf("job indexes %d/%d/%d, jobs %d (%d retained)", countOf(s.jobSeq), countOf(s.jobType), countOf(s.jobExp), s.jobs.Len(), retainedN)
	}
	if countOf(s.jobQueue) != queuedN || countOf(s.jobQueueType) != queuedN ||
		countOf(s.jobRunning) != runningN || countOf(s.jobState) != lifeN ||
		s.jobLeaseID.Len() != runningN || s.jobDue.Len() != runningN || s.jobLeaseExp.Len() != runningN {
		t.Errorf("lifecycle orders %d/%d/%d/%d, want %d queued, %d running, %d queued or finished",
			countOf(s.jobQueue), countOf(s.jobQueueType), countOf(s.jobRunning), countOf(s.jobState),
			queuedN, runningN, lifeN)
	}
	s.wms.Ascend(func(w *Watermark) bool {
		if got, ok := s.wmAge.Get(w); !ok || !reflect.DeepEqual(got, w) {
			t.Errorf("watermark %s/%s/%s missing from wmAge", w.Tenant, w.ClientID, w.Nonce)
		}
		return true
	})
	if countOf(s.wmAge) != s.wms.Len() {
		t.Errorf("wmAge has %d items, wms %d", countOf(s.wmAge), s.wms.Len())
	}
	// Byte accounting and per-tenant counts, recomputed from the tables.
	var total uint64
	perTenant := map[string]uint64{}
	s.entries.Ascend(func(e *Entry) bool {
		n := entryBytes(len(e.Request.Payload))
		total += n
		perTenant[e.Tenant] += n
		return true
	})
	s.jobs.Ascend(func(j *Job) bool {
		n := jobSize(j)
		total += n
		perTenant[j.Tenant] += n
		return true
	})
	if total != s.bytes || !reflect.DeepEqual(perTenant, s.tenantBytes) {
		t.Errorf("bytes %d (per tenant %v), recomputed %d (%v)", s.bytes, s.tenantBytes, total, perTenant)
	}
	wmPerTenant := map[string]int{}
	s.wms.Ascend(func(w *Watermark) bool { wmPerTenant[w.Tenant]++; return true })
	if !reflect.DeepEqual(wmPerTenant, s.wmTenant) {
		t.Errorf("watermarks per tenant %v, recomputed %v", s.wmTenant, wmPerTenant)
	}
	checkKeyCounts(t, s)
}

// checkKeyCounts checks the disk store's key counts, once its scan is
// merged, against the tables: every entry and job counted, and nothing else.
func checkKeyCounts(t testing.TB, s *state) {
	t.Helper()
	if s.store == nil || !s.store.Keys().Ready() {
		return
	}
	var keys [][]byte
	s.entries.Ascend(func(e *Entry) bool {
		keys = append(keys, entryOrder.key([]byte{pfxEntries}, e))
		return true
	})
	s.jobs.Ascend(func(j *Job) bool {
		keys = append(keys, jobOrder.key([]byte{pfxJobs}, j))
		return true
	})
	if !s.store.Keys().Matches(keys) {
		t.Errorf("key counts: not those of the tables' %d keys", len(keys))
	}
}

// countOf counts an index's items by walking it (a secondary order of the
// disk-backed state keeps no count).
func countOf[T any](idx index[T]) int {
	n := 0
	idx.Ascend(func(T) bool { n++; return true })
	return n
}

// sameResult compares results, errors by their sentinel and text.
func sameResult(a, b Result) bool {
	ae, be := a.Err, b.Err
	a.Err, b.Err = nil, nil
	if !reflect.DeepEqual(a, b) {
		return false
	}
	if (ae == nil) != (be == nil) {
		return false
	}
	return ae == nil || ae.Error() == be.Error()
}

// tables is the whole content of an FSM, for comparisons.
type tables struct {
	Entries    []Entry
	Jobs       []Job
	Watermarks []Watermark
	Owed       []Entry
}

func dumpTables(f *FSM) tables {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var tb tables
	f.s.entries.Ascend(func(e *Entry) bool { tb.Entries = append(tb.Entries, *e); return true })
	f.s.jobs.Ascend(func(j *Job) bool { tb.Jobs = append(tb.Jobs, *j); return true })
	f.s.wms.Ascend(func(w *Watermark) bool { tb.Watermarks = append(tb.Watermarks, *w); return true })
	f.s.owed.Ascend(func(e *Entry) bool { tb.Owed = append(tb.Owed, *e); return true })
	return tb
}

// applyCase is one row of a command's table test.
type applyCase struct {
	name  string
	setup func(h *harness)
	cmd   func(h *harness) Command
	want  Outcome
	// changes: the kinds of change the command emits, in order.
	changes []ChangeKind
	check   func(t *testing.T, h *harness, res Result)
}

// unchanging outcomes leave the tables as they were.
var unchanging = map[Outcome]bool{
	OutcomeExists: true, OutcomeKeyReused: true, OutcomeFull: true,
	OutcomeUnchanged: true, OutcomeNotFound: true,
	OutcomeIgnored: true, OutcomeInvalid: true,
}

func runCases(t *testing.T, cases []applyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if tc.setup != nil {
				tc.setup(h)
			}
			before := dumpTables(h.f)
			h.changes = nil
			res := h.apply(tc.cmd(h))
			if res.Outcome != tc.want {
				t.Fatalf("outcome %v (err %v), want %v", res.Outcome, res.Err, tc.want)
			}
			if (res.Err != nil) != (res.Outcome == OutcomeInvalid) {
				t.Fatalf("outcome %v with err %v", res.Outcome, res.Err)
			}
			if unchanging[res.Outcome] {
				if after := dumpTables(h.f); !reflect.DeepEqual(before, after) {
					t.Fatalf("%v changed the state:\nbefore %+v\nafter  %+v", res.Outcome, before, after)
				}
			}
			var kinds []ChangeKind
			for _, c := range h.changes {
				kinds = append(kinds, c.Kind)
				if c.Index != h.idx {
					t.Errorf("change %v has index %d, want %d", c.Kind, c.Index, h.idx)
				}
			}
			if !reflect.DeepEqual(kinds, tc.changes) {
				t.Fatalf("changes %v, want %v", kinds, tc.changes)
			}
			if st := h.f.Stats(); st.AppliedIndex != h.idx {
				t.Fatalf("applied index %d, want %d", st.AppliedIndex, h.idx)
			}
			checkInvariants(t, h.f)
			if tc.check != nil {
				tc.check(t, h, res)
			}
		})
	}
}
