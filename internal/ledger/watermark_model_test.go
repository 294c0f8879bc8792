package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestStructuredKeysAgainstModel drives structured keys (several clients
// and nonces, two tenants) with a random mix of first attempts, retries,
// out-of-order and late sequences, bodies reused under another key,
// commits and rejections, and Expires that age watermarks out, on the
// memory and the disk store at once, some under the watermark bounds. It checks every Result and every
// client's watermark against a reference model written from docs/api.md
// ("Late retries of structured keys") and docs/ledger.md alone:
//
//   - a key whose entry lives is answered by it (exists, or key reused);
//   - once it expired, a sequence the client's watermark records as
//     committed, or one more than WatermarkWindow below its highest
//     committed sequence, is refused (key expired): it never runs again;
//   - any other sequence is judged afresh;
//   - a watermark is created or refreshed by every admission, raised by
//     every commit and by every committed entry's expiry, and ages out
//     IDEMPOTENCY_WATERMARK_TTL_SECONDS after its last update;
//   - a client without a watermark is refused while the table holds
//     IDEMPOTENCY_WATERMARK_MAX_CLIENTS watermarks, or its tenant
//     IDEMPOTENCY_WATERMARK_MAX_CLIENTS_PER_TENANT (both counted across
//     expiries, reopens and restores); no watermark is ever evicted.
//
// Every 200 entries the disk FSM is replaced, in turn, by its own store
// reopened and by the memory FSM's snapshot restored on disk; both stores
// must persist the same bytes.
func TestStructuredKeysAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runWatermarkModel(t, seed, 1500) })
	}
}

// busyClients is how many of the run's clients (the first) are used often.
const busyClients = 4

// wmClient is one structured-key client of the run.
type wmClient struct{ tenant, client, nonce string }

// wmModel is the reference watermark of a client: the sequences it knows
// committed, the highest of them, and when it was last updated.
type wmModel struct {
	committed map[uint64]bool
	high      uint64
	updatedAt int64
}

// refuses is docs/api.md's rule for a key whose entry is gone.
func (w *wmModel) refuses(seq uint64) bool {
	return w.committed[seq] && w.high-seq < WatermarkWindow || seq <= w.high && w.high-seq >= WatermarkWindow
}

// wmEntry is the reference entry of a key.
type wmEntry struct {
	client    int
	seq       uint64
	committed bool
	fp        string
	expiresAt int64
}

type wmRun struct {
	*twin
	t          *testing.T
	rng        *rand.Rand
	now        int64
	clients    []wmClient
	wms        map[int]*wmModel
	entries    map[[2]string]*wmEntry // by (tenant, key)
	watermarkT time.Duration
	seen       map[Outcome]int
	aged       int // watermarks aged out
}

func runWatermarkModel(t *testing.T, seed uint64, steps int) {
	r := &wmRun{
		twin: newTwin(t),
		t:    t,
		rng:  rand.New(rand.NewPCG(seed, seed^0x5eed)),
		now:  t0,
		clients: []wmClient{
			{"t1", "host1:10", "n1"}, {"t1", "host1:10", "n2"}, {"t1", "host2:7", "n1"}, {"t2", "host1:10", "n1"},
			// Seldom used: their watermarks age out between uses.
			{"t2", "rare:1", "n1"}, {"t1", "rare:2", "n1"}, {"t2", "rare:3", "n9"},
		},
		wms:        map[int]*wmModel{},
		entries:    map[[2]string]*wmEntry{},
		watermarkT: 10 * time.Minute,
		seen:       map[Outcome]int{},
	}
	for step := range steps {
		r.now += r.rng.Int64N(20 * sec)
		if r.rng.IntN(10) == 0 {
			r.expire(step)
		} else {
			r.admit(step)
		}
		r.compareWatermarks(step)
		if step%200 == 199 {
			r.swapDisk(step, (step/200)%2 == 0)
			r.compareWatermarks(step)
		}
	}
	r.finish()
	t.Logf("outcomes %v, watermarks aged out %d", r.seen, r.aged)
	// The run reached every case it is about.
	for _, o := range []Outcome{OutcomeCommitted, OutcomeRejected, OutcomeExists, OutcomeKeyReused, OutcomeKeyExpired,
		OutcomeWatermarksFull, OutcomeTenantWatermarksFull} {
		if r.seen[o] == 0 {
			t.Errorf("the run never saw %v: %v", o, r.seen)
		}
	}
	if r.seen[OutcomeExpired] == 0 || r.aged == 0 {
		t.Errorf("the run never expired an entry or aged a watermark out: %v", r.seen)
	}
}

// pickSeq chooses a sequence for client i: mostly the next ones, often a
// retry of a recent one or one a little out of order, now and then one far
// below the highest (a late retry, or a first attempt the window no longer
// tells apart).
func (r *wmRun) pickSeq(i int) uint64 {
	high := uint64(0)
	if w := r.wms[i]; w != nil {
		high = w.high
	}
	var seq int64
	switch n := r.rng.IntN(20); {
	case n < 10:
		seq = int64(high) + 1 + r.rng.Int64N(3)
	case n < 16:
		seq = int64(high) - r.rng.Int64N(8)
	case n < 18:
		seq = int64(high) + r.rng.Int64N(300) // a jump: the window slides
	default:
		seq = int64(high) - WatermarkWindow + 4 - r.rng.Int64N(8) // at the window's edge
	}
	return uint64(max(seq, 1))
}

func (r *wmRun) admit(step int) {
	i := r.rng.IntN(busyClients)
	if r.rng.IntN(20) == 0 {
		i = busyClients + r.rng.IntN(len(r.clients)-busyClients)
	}
	c := r.clients[i]
	seq := r.pickSeq(i)
	rs := structured(c.tenant, c.client, seq, c.nonce, r.now)
	rs.MaxEntries = 1 << 20
	rs.JobID = fmt.Sprintf("job-%d", r.idx+1) // every attempt its own
	if r.rng.IntN(15) == 0 {
		rs.Fingerprint = "another body"
	}
	// The watermark bounds, as the leader's configuration stamps them; some
	// entries carry them, so a client without a watermark is refused while
	// the table or its tenant's share is full (nothing is evicted).
	switch r.rng.IntN(6) {
	case 0:
		rs.MaxWatermarks = 5
	case 1:
		rs.MaxTenantWatermarks = 2
	case 2:
		rs.MaxWatermarks, rs.MaxTenantWatermarks = 5, 2
	}
	var v Verdict = commit(rs, r.now)
	rejected := r.rng.IntN(4) == 0
	if rejected {
		v = reject(rs, r.now, 429)
	}
	got := r.apply(Encode(admitWith(rs, v)))

	// The model.
	k := [2]string{c.tenant, rs.Key}
	want := Outcome(0)
	if e := r.entries[k]; e != nil && e.expiresAt <= r.now {
		r.removeEntry(k, e) // a due entry of the key goes first
	}
	switch e := r.entries[k]; {
	case e != nil && e.fp == rs.Fingerprint:
		want = OutcomeExists
	case e != nil:
		want = OutcomeKeyReused
	case r.wms[i] != nil && r.wms[i].refuses(seq):
		want = OutcomeKeyExpired
	case r.wms[i] == nil && rs.MaxWatermarks > 0 && uint64(len(r.wms)) >= rs.MaxWatermarks:
		want = OutcomeWatermarksFull
	case r.wms[i] == nil && rs.MaxTenantWatermarks > 0 && uint64(r.tenantWatermarks(c.tenant)) >= rs.MaxTenantWatermarks:
		want = OutcomeTenantWatermarksFull
	case rejected:
		want = OutcomeRejected
		r.entries[k] = &wmEntry{client: i, seq: seq, fp: rs.Fingerprint, expiresAt: r.now + rejectTTL}
		r.touch(i)
	default:
		want = OutcomeCommitted
		r.entries[k] = &wmEntry{client: i, seq: seq, committed: true, fp: rs.Fingerprint, expiresAt: r.now + commitTTL}
		r.raise(i, seq)
	}
	if got.Outcome != want {
		r.t.Fatalf("step %d: %s/%s (seq %d, high %d) at %d: %v, the model %v", step, c.tenant, rs.Key, seq,
			r.highOf(i), r.now, got.Outcome, want)
	}
	if want == OutcomeKeyExpired && got.Watermark != r.wms[i].high {
		r.t.Fatalf("step %d: key expired with watermark %d, the model %d", step, got.Watermark, r.wms[i].high)
	}
	r.seen[want]++
}

// tenantWatermarks counts the watermarks of tenant's clients.
func (r *wmRun) tenantWatermarks(tenant string) int {
	n := 0
	for i := range r.wms {
		if r.clients[i].tenant == tenant {
			n++
		}
	}
	return n
}

func (r *wmRun) highOf(i int) uint64 {
	if w := r.wms[i]; w != nil {
		return w.high
	}
	return 0
}

// touch creates client i's watermark or refreshes it.
func (r *wmRun) touch(i int) {
	if w := r.wms[i]; w != nil {
		w.updatedAt = max(w.updatedAt, r.now)
		return
	}
	r.wms[i] = &wmModel{committed: map[uint64]bool{}, updatedAt: r.now}
}

// raise records seq committed in client i's watermark.
func (r *wmRun) raise(i int, seq uint64) {
	r.touch(i)
	w := r.wms[i]
	w.committed[seq] = true
	w.high = max(w.high, seq)
}

// removeEntry removes an entry at its expiry: a committed one raises its
// client's watermark.
func (r *wmRun) removeEntry(k [2]string, e *wmEntry) {
	delete(r.entries, k)
	if e.committed {
		r.raise(e.client, e.seq)
	}
}

func (r *wmRun) expire(step int) {
	got := r.apply(Encode(Expire{Now: r.now, WatermarkTTL: r.watermarkT}))
	var want Removed
	for k, e := range r.entries {
		if e.expiresAt <= r.now {
			r.removeEntry(k, e)
			if e.committed {
				want.Committed++
			} else {
				want.Rejected++
			}
		}
	}
	cutoff := r.now - int64(r.watermarkT)
	for i, w := range r.wms {
		if w.updatedAt <= cutoff {
			delete(r.wms, i)
			want.Watermarks++
		}
	}
	got.Removed.Jobs = 0 // jobs are not the model's
	if got.Outcome != OutcomeExpired || got.Removed != want {
		r.t.Fatalf("step %d: expire at %d: %v %+v, the model removed %+v", step, r.now, got.Outcome, got.Removed, want)
	}
	r.seen[OutcomeExpired] += want.Committed + want.Rejected
	r.aged += want.Watermarks
}

// compareWatermarks checks every client's watermark on both stores against
// the model: present or not, its highest sequence, its window bit by bit,
// and when it was last updated.
func (r *wmRun) compareWatermarks(step int) {
	r.t.Helper()
	for i, c := range r.clients {
		want := r.wms[i]
		for _, f := range []*FSM{r.mem, r.disk} {
			w, ok := f.Watermark(c.tenant, c.client, c.nonce)
			if ok != (want != nil) {
				r.t.Fatalf("step %d: client %v has a watermark: %v, the model %v", step, c, ok, want != nil)
			}
			if !ok {
				continue
			}
			if w.Sequence != want.high || w.UpdatedAt != want.updatedAt {
				r.t.Fatalf("step %d: client %v watermark %d updated %d, the model %d updated %d",
					step, c, w.Sequence, w.UpdatedAt, want.high, want.updatedAt)
			}
			for d := uint64(0); d < WatermarkWindow && d <= w.Sequence; d++ {
				if seq := w.Sequence - d; w.Committed(seq) != want.committed[seq] {
					r.t.Fatalf("step %d: client %v sequence %d committed: %v, the model %v",
						step, c, seq, w.Committed(seq), want.committed[seq])
				}
			}
		}
	}
}
