package ledger

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"
)

const (
	tenant  = "acme"
	client  = "host1.dc1:12345"
	nonce   = "a1b2c3d4e5f6a7b8"
	nonce2  = "0000000000000001"
	key     = "order-1"
	tCommit = t0 + sec
)

var (
	base  = reserve(tenant, key, t0)
	sbase = structured(tenant, client, 5, nonce, t0)
)

func withFingerprint(r Reserve, fp string) Reserve { r.Fingerprint = fp; return r }
func withJobID(r Reserve, id string) Reserve       { r.JobID = id; return r }
func at(r Reserve, now int64) Reserve              { r.Now = now; return r }
func cmd(c Command) func(*harness) Command         { return func(*harness) Command { return c } }

func setupCommitted(r Reserve) func(*harness) {
	return func(h *harness) {
		h.must(admitWith(r, commit(r, r.Now+sec)), OutcomeCommitted)
	}
}

func setupRejected(r Reserve) func(*harness) {
	return func(h *harness) {
		h.must(admitWith(r, reject(r, r.Now+sec, 422)), OutcomeRejected)
	}
}

// setupWatermark commits structured seq 5 and expires it: watermark 5.
func setupWatermark(h *harness) {
	setupCommitted(sbase)(h)
	h.must(expire(tCommit+commitTTL), OutcomeExpired)
	if w, ok := h.f.Watermark(tenant, client, nonce); !ok || w.Sequence != 5 {
		h.t.Fatalf("watermark %+v %v, want 5", w, ok)
	}
}

// TestAdmitReserve: an Admit's checks of its key (Reserve's semantics).
func TestAdmitReserve(t *testing.T) {
	dueAt := t0 + commitTTL // a committed entry's ExpiresAt: due at that instant
	full := func(h *harness) {
		for _, k := range []string{"a", "b", "c"} {
			r := reserve(tenant, k, t0)
			r.MaxEntries = 3
			h.must(admit(r), OutcomeCommitted)
		}
	}
	bounded := func(r Reserve) Reserve { r.MaxEntries = 3; return r }
	wantInvalid := func(t *testing.T, _ *harness, res Result) {
		if !errors.Is(res.Err, ErrInvalidCommand) {
			t.Fatalf("err %v, want ErrInvalidCommand", res.Err)
		}
	}
	runCases(t, []applyCase{
		{
			name: "new key", cmd: cmd(admit(base)), want: OutcomeCommitted,
			changes: []ChangeKind{ChangeCommitted},
			check: func(t *testing.T, h *harness, res Result) {
				want := Entry{Tenant: tenant, Key: key, Fingerprint: base.Fingerprint, State: StateCommitted,
					JobID: base.JobID, ReservedAt: t0, ResolvedAt: t0, ExpiresAt: t0 + commitTTL, Request: base.Request}
				if !reflect.DeepEqual(res.Entry, want) {
					t.Fatalf("result entry\n got %+v\nwant %+v", res.Entry, want)
				}
				if got := h.entry(tenant, key); !reflect.DeepEqual(got, want) {
					t.Fatalf("stored entry %+v", got)
				}
				if !reflect.DeepEqual(h.changes[0].Entry, want) {
					t.Fatalf("change entry %+v", h.changes[0].Entry)
				}
			},
		},
		{
			name: "new structured key", cmd: cmd(admit(sbase)), want: OutcomeCommitted,
			changes: []ChangeKind{ChangeCommitted},
			check: func(t *testing.T, h *harness, res Result) {
				e := h.entry(tenant, sbase.Key)
				if !e.Structured || e.ClientID != client || e.Sequence != 5 || e.Nonce != nonce {
					t.Fatalf("structured parts %+v", e)
				}
			},
		},
		{
			name: "committed, same fingerprint", setup: setupCommitted(base), want: OutcomeExists,
			cmd: cmd(admit(withJobID(at(base, t0+2*sec), "other-job"))),
			check: func(t *testing.T, h *harness, res Result) {
				if res.Entry.State != StateCommitted || res.Job.ID != base.JobID || res.Job.CreatedAt != res.Entry.ResolvedAt {
					t.Fatalf("result %+v", res)
				}
			},
		},
		{
			name: "committed, other fingerprint", setup: setupCommitted(base), want: OutcomeKeyReused,
			cmd: cmd(admit(withFingerprint(at(base, t0+2*sec), "other"))),
			check: func(t *testing.T, h *harness, res Result) {
				if res.Entry.State != StateCommitted {
					t.Fatalf("result entry %+v", res.Entry)
				}
			},
		},
		{
			name: "rejected, same fingerprint", setup: setupRejected(base), want: OutcomeExists,
			cmd: cmd(admit(at(base, t0+2*sec))),
			check: func(t *testing.T, h *harness, res Result) {
				if e := res.Entry; e.State != StateRejected || e.Status != 422 || e.Reason != "capacity" || e.Detail != "queue full" {
					t.Fatalf("result entry %+v", e)
				}
			},
		},
		{
			name: "rejected, other fingerprint", setup: setupRejected(base), want: OutcomeKeyReused,
			cmd: cmd(admit(withFingerprint(at(base, t0+2*sec), "other"))),
		},
		{
			name: "one nanosecond before its TTL an entry still answers", setup: setupCommitted(base),
			cmd: cmd(admit(at(base, tCommit+commitTTL-1))), want: OutcomeExists,
		},
		{
			name: "committed opaque key past its TTL is admitted anew", setup: setupCommitted(base),
			cmd: cmd(admit(withJobID(at(base, tCommit+commitTTL), "job-2"))), want: OutcomeCommitted,
			changes: []ChangeKind{ChangeRemoved, ChangeCommitted},
			check: func(t *testing.T, h *harness, res Result) {
				if res.Removed != (Removed{Committed: 1}) || h.f.Stats().Watermarks != 0 || res.Entry.ReservedAt != tCommit+commitTTL {
					t.Fatalf("result %+v, stats %+v", res, h.f.Stats())
				}
				if _, ok := h.f.Job(tenant, base.JobID); !ok {
					t.Fatal("the old job is gone with its entry; it must stay until its retention")
				}
			},
		},
		{
			name: "committed structured key past its TTL: key expired", setup: setupCommitted(sbase),
			cmd: cmd(admit(at(sbase, tCommit+commitTTL))), want: OutcomeKeyExpired,
			changes: []ChangeKind{ChangeRemoved},
			check: func(t *testing.T, h *harness, res Result) {
				if res.Watermark != 5 || res.Removed != (Removed{Committed: 1}) {
					t.Fatalf("result %+v", res)
				}
				h.noEntry(tenant, sbase.Key)
			},
		},
		{
			name: "rejected past its TTL is admitted anew", setup: setupRejected(sbase),
			cmd: cmd(admitWith(at(sbase, tCommit+rejectTTL), reject(sbase, tCommit+rejectTTL, 422))), want: OutcomeRejected,
			changes: []ChangeKind{ChangeRemoved, ChangeRejected},
			check: func(t *testing.T, h *harness, res Result) {
				if w, ok := h.f.Watermark(tenant, client, nonce); ok && (w.Committed(sbase.Sequence) || w.Sequence != 0) {
					t.Fatalf("a rejected entry raised a watermark: %+v", w)
				}
			},
		},
		{
			name: "structured, a lower sequence that never committed is judged afresh", setup: setupWatermark,
			cmd: cmd(admit(structured(tenant, client, 3, nonce, t0+time.Hour.Nanoseconds()))), want: OutcomeCommitted,
			changes: []ChangeKind{ChangeCommitted},
		},
		{
			name: "structured, sequence at the watermark", setup: setupWatermark,
			cmd: cmd(admit(structured(tenant, client, 5, nonce, t0+time.Hour.Nanoseconds()))), want: OutcomeKeyExpired,
		},
		{
			name: "structured, sequence above the watermark", setup: setupWatermark,
			cmd: cmd(admit(structured(tenant, client, 6, nonce, t0+time.Hour.Nanoseconds()))), want: OutcomeCommitted,
			changes: []ChangeKind{ChangeCommitted},
		},
		{
			name: "structured, new nonce (client restarted)", setup: setupWatermark,
			cmd: cmd(admit(structured(tenant, client, 1, nonce2, t0+time.Hour.Nanoseconds()))), want: OutcomeCommitted,
			changes: []ChangeKind{ChangeCommitted},
		},
		{
			name: "structured, another tenant's watermark", setup: setupWatermark,
			cmd: cmd(admit(structured("other", client, 1, nonce, t0+time.Hour.Nanoseconds()))), want: OutcomeCommitted,
			changes: []ChangeKind{ChangeCommitted},
		},
		{
			name: "opaque key equal to a structured one ignores watermarks", setup: setupWatermark,
			cmd: cmd(admit(withJobID(at(reserve(tenant, sbase.Key, 0), t0+time.Hour.Nanoseconds()), "job-opaque"))), want: OutcomeCommitted,
			changes: []ChangeKind{ChangeCommitted},
		},
		{
			name: "full", setup: full, want: OutcomeFull,
			cmd: cmd(admit(bounded(reserve(tenant, "d", t0+sec)))),
		},
		{
			name: "full, but a duplicate is still answered", setup: full, want: OutcomeExists,
			cmd: cmd(admit(bounded(reserve(tenant, "a", t0+sec)))),
		},
		{
			name: "full of due entries: the earliest is removed to make room", setup: full,
			cmd: cmd(admit(bounded(reserve(tenant, "d", dueAt)))), want: OutcomeCommitted,
			changes: []ChangeKind{ChangeRemoved, ChangeCommitted},
			check: func(t *testing.T, h *harness, res Result) {
				if res.Removed != (Removed{Committed: 1}) {
					t.Fatalf("removed %+v", res.Removed)
				}
				h.noEntry(tenant, "a") // earliest by (expires_at, tenant, key)
				h.entry(tenant, "b")
				h.entry(tenant, "d")
			},
		},
		{
			name: "bound lowered below the count: still full", setup: full, want: OutcomeFull,
			cmd: cmd(admit(Reserve{Tenant: tenant, Key: "d", JobID: "j", Now: t0, MaxEntries: 1})),
		},
		{name: "empty tenant", cmd: cmd(admit(reserve("", key, t0))), want: OutcomeInvalid, check: wantInvalid},
		{name: "empty key", cmd: cmd(admit(reserve(tenant, "", t0))), want: OutcomeInvalid, check: wantInvalid},
		{name: "empty job ID", cmd: cmd(admit(withJobID(base, ""))), want: OutcomeInvalid, check: wantInvalid},
		{
			name: "max entries 0", want: OutcomeInvalid, check: wantInvalid,
			cmd: cmd(admit(Reserve{Tenant: tenant, Key: key, JobID: "j", Now: t0})),
		},
		{
			name: "a verdict of another key", want: OutcomeInvalid, check: wantInvalid,
			cmd: cmd(admitWith(base, commit(reserve(tenant, "other", t0), t0))),
		},
		{name: "reject status 200", cmd: cmd(admitWith(base, reject(base, t0, 200))), want: OutcomeInvalid, check: wantInvalid},
		{name: "reject status 600", cmd: cmd(admitWith(base, reject(base, t0, 600))), want: OutcomeInvalid, check: wantInvalid},
		{
			name: "commit expires_at not after now", want: OutcomeInvalid, check: wantInvalid,
			cmd: cmd(admitWith(base, Commit{Tenant: tenant, Key: key, JobID: base.JobID, Now: t0, ExpiresAt: t0, JobExpiresAt: t0 + 1})),
		},
	})
}

func TestExpire(t *testing.T) {
	wm := func(t testing.TB, h *harness, want uint64) {
		t.Helper()
		w, ok := h.f.Watermark(tenant, client, nonce)
		if want == 0 {
			if ok && (w.Sequence != 0 || w.Window != [WatermarkWindow / 64]uint64{}) {
				t.Fatalf("watermark %+v, want nothing committed", w)
			}
			return
		}
		if !ok || w.Sequence != want {
			t.Fatalf("watermark %+v %v, want %d", w, ok, want)
		}
	}
	fiveDue := func(h *harness) {
		for i, k := range []string{"e", "d", "c", "b", "a"} {
			r := reserve(tenant, k, t0+int64(i))
			h.must(admitWith(r, reject(r, r.Now, 422)), OutcomeRejected)
		}
	}
	runCases(t, []applyCase{
		{
			name: "empty", cmd: cmd(expire(t0)), want: OutcomeExpired,
			check: func(t *testing.T, h *harness, res Result) {
				if res.Removed.Total() != 0 || res.More {
					t.Fatalf("result %+v", res)
				}
			},
		},
		{
			name: "committed opaque, due", setup: setupCommitted(base), want: OutcomeExpired,
			cmd: cmd(expire(tCommit + commitTTL)), changes: []ChangeKind{ChangeRemoved},
			check: func(t *testing.T, h *harness, res Result) {
				h.noEntry(tenant, key)
				if res.Removed != (Removed{Committed: 1}) || h.f.Stats().Watermarks != 0 {
					t.Fatalf("result %+v", res)
				}
				if _, ok := h.f.Job(tenant, base.JobID); !ok {
					t.Fatal("job removed with its entry")
				}
			},
		},
		{
			name: "committed structured, due: watermark", setup: setupCommitted(sbase), want: OutcomeExpired,
			cmd: cmd(expire(tCommit + commitTTL)), changes: []ChangeKind{ChangeRemoved},
			check: func(t *testing.T, h *harness, res Result) {
				h.noEntry(tenant, sbase.Key)
				wm(t, h, 5)
				if w, _ := h.f.Watermark(tenant, client, nonce); w.UpdatedAt != tCommit+commitTTL {
					t.Fatalf("watermark updated at %d", w.UpdatedAt)
				}
			},
		},
		{
			name: "committed structured, a lower sequence expiring later keeps the higher watermark",
			setup: func(h *harness) {
				s10 := structured(tenant, client, 10, nonce, t0)
				setupCommitted(s10)(h)
				setupCommitted(structured(tenant, client, 2, nonce, t0+10*sec))(h) // out of order, while 10 is live
				h.must(expire(tCommit+commitTTL), OutcomeExpired)
				wm(h.t, h, 10)
			},
			cmd: cmd(expire(t0 + time.Hour.Nanoseconds())), want: OutcomeExpired,
			changes: []ChangeKind{ChangeRemoved},
			check:   func(t *testing.T, h *harness, res Result) { wm(t, h, 10) },
		},
		{
			name: "rejected, due", setup: setupRejected(sbase), want: OutcomeExpired,
			cmd: cmd(expire(tCommit + rejectTTL)), changes: []ChangeKind{ChangeRemoved},
			check: func(t *testing.T, h *harness, res Result) {
				if res.Removed != (Removed{Rejected: 1}) {
					t.Fatalf("removed %+v", res.Removed)
				}
				wm(t, h, 0)
			},
		},
		{
			name: "job retention", want: OutcomeExpired,
			setup: func(h *harness) {
				h.must(admitWith(base, Commit{Tenant: tenant, Key: key, JobID: base.JobID, Now: tCommit,
					ExpiresAt: tCommit + commitTTL, JobExpiresAt: tCommit + 10*sec}), OutcomeCommitted)
			},
			cmd: cmd(expire(tCommit + 10*sec)),
			check: func(t *testing.T, h *harness, res Result) {
				if res.Removed != (Removed{Jobs: 1}) {
					t.Fatalf("removed %+v", res.Removed)
				}
				if _, ok := h.f.Job(tenant, base.JobID); ok {
					t.Fatal("job outlived its retention")
				}
				h.entry(tenant, key) // the entry has its own TTL
				// A duplicate still gets the entry, without the job.
				if res := h.apply(admit(at(base, tCommit+11*sec))); res.Outcome != OutcomeExists || res.Job.ID != "" {
					t.Fatalf("duplicate: %+v", res)
				}
			},
		},
		{
			name: "watermark TTL", setup: setupWatermark, want: OutcomeExpired,
			cmd: cmd(Expire{Now: tCommit + commitTTL + 3600*sec, WatermarkTTL: time.Hour}),
			check: func(t *testing.T, h *harness, res Result) {
				if res.Removed.Watermarks != 1 {
					t.Fatalf("removed %+v", res.Removed)
				}
				wm(t, h, 0)
			},
		},
		{
			name: "watermark younger than its TTL", setup: setupWatermark, want: OutcomeExpired,
			cmd:   cmd(Expire{Now: tCommit + commitTTL + 3600*sec - 1, WatermarkTTL: time.Hour}),
			check: func(t *testing.T, h *harness, res Result) { wm(t, h, 5) },
		},
		{
			name: "watermark TTL 0: no age limit", setup: setupWatermark, want: OutcomeExpired,
			cmd:   cmd(Expire{Now: tCommit + 1000*3600*sec}),
			check: func(t *testing.T, h *harness, res Result) { wm(t, h, 5) },
		},
		{
			name: "MaxRemovals, earliest first", setup: fiveDue, want: OutcomeExpired,
			cmd:     cmd(Expire{Now: t0 + time.Hour.Nanoseconds(), MaxRemovals: 2}),
			changes: []ChangeKind{ChangeRemoved, ChangeRemoved},
			check: func(t *testing.T, h *harness, res Result) {
				if res.Removed.Rejected != 2 || !res.More {
					t.Fatalf("result %+v", res)
				}
				h.noEntry(tenant, "e")
				h.noEntry(tenant, "d")
				h.entry(tenant, "c")
				res = h.must(Expire{Now: t0 + time.Hour.Nanoseconds(), MaxRemovals: 3}, OutcomeExpired)
				if res.Removed.Rejected != 3 || res.More {
					t.Fatalf("second round %+v", res)
				}
			},
		},
		{
			// more due than one walk of an order reads (removeDue's chunk)
			name: "MaxRemovals over several walks, earliest first", want: OutcomeExpired,
			setup: func(h *harness) {
				h.quietly(func() {
					for i := range 3*dueChunk + 7 {
						h.must(admit(reserve(tenant, fmt.Sprintf("k%04d", i), t0+int64(i))), OutcomeCommitted)
					}
				})
			},
			cmd:     cmd(Expire{Now: t0 + time.Hour.Nanoseconds(), MaxRemovals: 2*dueChunk + 3}),
			changes: slices.Repeat([]ChangeKind{ChangeRemoved}, 2*dueChunk+3),
			check: func(t *testing.T, h *harness, res Result) {
				if res.Removed.Committed != 2*dueChunk+3 || !res.More || len(h.changes) != 2*dueChunk+3 {
					t.Fatalf("result %+v, %d changes", res, len(h.changes))
				}
				for i, c := range h.changes {
					if want := fmt.Sprintf("k%04d", i); c.Entry.Key != want {
						t.Fatalf("removal %d is %s, want %s", i, c.Entry.Key, want)
					}
				}
				h.noEntry(tenant, fmt.Sprintf("k%04d", 2*dueChunk+2))
				h.entry(tenant, fmt.Sprintf("k%04d", 2*dueChunk+3))
				res = h.must(Expire{Now: t0 + time.Hour.Nanoseconds()}, OutcomeExpired)
				if res.Removed.Committed != dueChunk+4 || res.More || h.f.Stats().Entries != 0 {
					t.Fatalf("second round %+v, stats %+v", res, h.f.Stats())
				}
			},
		},
		{
			name: "same expiry: ordered by tenant, key", want: OutcomeExpired,
			setup: func(h *harness) {
				for _, tk := range [][2]string{{"b", "a"}, {"a", "z"}, {"a", "b"}} {
					h.must(admit(reserve(tk[0], tk[1], t0)), OutcomeCommitted)
				}
			},
			cmd: cmd(Expire{Now: t0 + commitTTL}), changes: []ChangeKind{ChangeRemoved, ChangeRemoved, ChangeRemoved},
			check: func(t *testing.T, h *harness, res Result) {
				var got []string
				for _, c := range h.changes {
					got = append(got, c.Entry.Tenant+"/"+c.Entry.Key)
				}
				if want := []string{"a/b", "a/z", "b/a"}; !reflect.DeepEqual(got, want) {
					t.Fatalf("order %v, want %v", got, want)
				}
			},
		},
	})
}

// TestLateRetryRefusedByWatermark is the acceptance scenario of the watermark:
// a late retry of an expired committed key is refused, an out-of-order new
// sequence while the higher one is live is not.
func TestLateRetryRefusedByWatermark(t *testing.T) {
	h := newHarness(t)
	now := t0
	s10 := structured(tenant, client, 10, nonce, now)
	h.must(admitWith(s10, commit(s10, now+sec)), OutcomeCommitted)

	// Out of order: seq 9's first attempt arrives while seq 10 is live.
	now += 10 * sec
	s9 := structured(tenant, client, 9, nonce, now)
	h.must(admitWith(s9, commit(s9, now+sec)), OutcomeCommitted)

	// Seq 10 expires: watermark 10. Seq 9 is still live and answers.
	h.must(expire(t0+sec+commitTTL), OutcomeExpired)
	if w, _ := h.f.Watermark(tenant, client, nonce); w.Sequence != 10 {
		t.Fatalf("watermark %d, want 10", w.Sequence)
	}
	if res := h.must(admit(at(s9, t0+sec+commitTTL+1)), OutcomeExists); res.Job.ID != s9.JobID {
		t.Fatalf("retry of seq 9 while live: %+v", res)
	}
	// A late retry of seq 10: refused, not executed again.
	late := at(s10, t0+sec+commitTTL+2)
	if res := h.must(admit(late), OutcomeKeyExpired); res.Watermark != 10 {
		t.Fatalf("watermark in result %d", res.Watermark)
	}
	// Seq 9 expires too; its late retry is refused as well.
	h.must(expire(now+sec+commitTTL), OutcomeExpired)
	h.must(admit(at(s9, now+sec+commitTTL+1)), OutcomeKeyExpired)
	// The next sequence is new work.
	h.must(admit(structured(tenant, client, 11, nonce, now+sec+commitTTL+2)), OutcomeCommitted)
	if st := h.f.Stats(); st.Jobs != 3 {
		t.Fatalf("jobs %d, want 3 (sequences 10, 9 and 11): nothing ran twice", st.Jobs)
	}
}

// TestFullNeverDropsLiveEntries fills the ledger to its bound: Reserve is
// refused, every live entry stays, and room comes back only by expiry.
func TestFullNeverDropsLiveEntries(t *testing.T) {
	const max = 50
	h := newHarness(t)
	var keys []Reserve
	for i := range max {
		r := reserve(tenant, "k"+string(rune('A'+i)), t0+int64(i))
		r.MaxEntries = max
		keys = append(keys, r)
		if i%2 == 0 {
			h.must(admitWith(r, commit(r, r.Now+1)), OutcomeCommitted)
		} else {
			h.must(admitWith(r, reject(r, r.Now+1, 422)), OutcomeRejected)
		}
	}
	before := dumpTables(h.f)
	for i := range 10 {
		r := reserve("other", "new"+string(rune('a'+i)), t0+sec)
		r.MaxEntries = max
		h.must(admit(r), OutcomeFull)
	}
	if after := dumpTables(h.f); !reflect.DeepEqual(before, after) {
		t.Fatal("Full changed the state")
	}
	if st := h.f.Stats(); st.Entries != max {
		t.Fatalf("entries %d, want %d", st.Entries, max)
	}
	// Duplicates of live entries are still answered while full.
	h.must(admit(keys[3]), OutcomeExists)
	// Expiry makes room: the rejected entries (odd i) expire first.
	res := h.must(expire(t0+rejectTTL+max), OutcomeExpired)
	if res.Removed.Rejected != max/2 {
		t.Fatalf("removed %+v", res.Removed)
	}
	r := reserve("other", "new", t0+rejectTTL+max)
	r.MaxEntries = max
	h.must(admit(r), OutcomeCommitted)
}

// TestReturnedValuesAreCopies: changing what a reader got does not change the
// FSM.
func TestReturnedValuesAreCopies(t *testing.T) {
	h := newHarness(t)
	r := reserve(tenant, key, t0)
	r.Request.Datacenters = make([]string, 1, 8) // spare capacity in the input
	r.Request.Datacenters[0] = "dc1"
	res := h.must(admit(r), OutcomeCommitted)
	res.Entry.State = StateRejected
	res.Entry.Request.Datacenters = append(res.Entry.Request.Datacenters, "dc9")
	e := h.entry(tenant, key)
	e.JobID = "changed"
	_ = append(e.Request.Datacenters, "dc8")
	_ = append(e.Request.Payload, '!')
	if got := h.entry(tenant, key); got.State != StateCommitted || got.JobID != r.JobID ||
		!reflect.DeepEqual(got.Request.Datacenters, []string{"dc1"}) || string(got.Request.Payload) != string(r.Request.Payload) {
		t.Fatalf("stored entry changed: %+v", got)
	}
	if cap(e.Request.Datacenters) != len(e.Request.Datacenters) || cap(e.Request.Payload) != len(e.Request.Payload) {
		t.Fatal("shared slices are not clipped")
	}
}
