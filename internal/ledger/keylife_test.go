package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestAcknowledgedKeysAreNeverAdmittedAgain drives random Admits (plain and
// structured keys, commits and rejects, two fingerprints), Claims, Releases,
// Cancels, Retries and Expires, with small removal budgets, tight entry,
// byte and tenant bounds and short TTLs, through a memory and a disk FSM at
// once (the disk one reopened or restored from the
// memory one's snapshot in turn), and holds every answer to the promise the
// ledger makes a client: a key answered COMMITTED is answered with its job
// while its entry's TTL runs (never dropped by relief, an Expire, a Claim or
// a restart), and a structured key's committed sequence is never admitted
// again while its client's watermark lasts (Expires age some out); a
// sequence more than the window below the client's highest committed one is
// refused as expired.
func TestAcknowledgedKeysAreNeverAdmittedAgain(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runKeyLife(t, seed, 400) })
	}
}

type keyAck struct {
	fp, jobID string
	expiresAt int64
}

type wmID struct{ tenant, client string }

func runKeyLife(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	w := newTwin(t)
	const unit = int64(time.Second)
	now := int64(1_000) * unit
	acked := map[[2]string]keyAck{}   // (tenant, key): the live COMMITTED answer
	ran := map[wmID]map[uint64]bool{} // structured sequences committed
	high := map[wmID]uint64{}         // the highest of them
	seqs := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 1500, 1501, 1502, 3000, 3001}
	tenants := []string{"t1", "t2"}

	for step := 0; step < steps; step++ {
		now += rng.Int64N(3) * unit
		tn := tenants[rng.IntN(len(tenants))]
		switch p := rng.IntN(20); {
		case p < 12: // an Admit
			var r Reserve
			var id wmID
			if rng.IntN(2) == 0 {
				r = reserve(tn, fmt.Sprintf("k%d", rng.IntN(6)), now)
			} else {
				id = wmID{tn, fmt.Sprintf("c%d", rng.IntN(2))}
				r = structured(tn, id.client, seqs[rng.IntN(len(seqs))], "n", now)
			}
			fp := "a"
			if rng.IntN(6) == 0 {
				fp = "b"
			}
			r.Fingerprint, r.JobID = fp, "job-"+r.Key+"-"+fp
			r.MaxEntries = uint64(4 + rng.IntN(12))
			if rng.IntN(3) == 0 {
				r.MaxBytes = uint64(6+rng.IntN(10)) * (EntryOverhead + JobOverhead + 64)
			}
			if rng.IntN(4) == 0 {
				r.ResultTTL = time.Duration(1+rng.IntN(12)) * time.Second
			}
			var v Verdict
			if rng.IntN(5) == 0 {
				rj := reject(r, now, 429)
				rj.ExpiresAt = now + (1+rng.Int64N(6))*unit
				v = rj
			} else {
				c := commit(r, now)
				c.ExpiresAt = now + (1+rng.Int64N(10))*unit
				if r.ResultTTL > 0 {
					c.ExpiresAt = now + int64(r.ResultTTL)
				}
				c.JobExpiresAt = now + (1+rng.Int64N(12))*unit
				c.Queue = rng.IntN(2) == 0
				if rng.IntN(3) == 0 {
					c.MaxJobs, c.RejectedExpiresAt, c.CapacityDetail = uint64(2+rng.IntN(6)), now+unit, "full"
				}
				v = c
			}
			res := w.apply(Encode(admitWith(r, v)))
			k := [2]string{tn, r.Key}
			if a, ok := acked[k]; ok && now < a.expiresAt {
				if res.Outcome != OutcomeExists && res.Outcome != OutcomeKeyReused || res.Entry.JobID != a.jobID {
					t.Fatalf("step %d: %s/%s committed as %s until %d: an Admit at %d answers %v (job %q)",
						step, tn, r.Key, a.jobID, a.expiresAt, now, res.Outcome, res.Entry.JobID)
				}
				if (res.Outcome == OutcomeExists) != (a.fp == fp) {
					t.Fatalf("step %d: %s/%s: fingerprint %s against %s answers %v", step, tn, r.Key, fp, a.fp, res.Outcome)
				}
			}
			if r.Structured {
				if ran[id][r.Sequence] && res.Outcome != OutcomeExists && res.Outcome != OutcomeKeyReused &&
					res.Outcome != OutcomeKeyExpired {
					t.Fatalf("step %d: %v sequence %d committed before: an Admit answers %v", step, id, r.Sequence, res.Outcome)
				}
				if h, ok := high[id]; ok && r.Sequence+WatermarkWindow <= h &&
					(res.Outcome == OutcomeCommitted || res.Outcome == OutcomeRejected) {
					t.Fatalf("step %d: %v sequence %d below the window of %d: an Admit answers %v", step, id, r.Sequence, h, res.Outcome)
				}
			}
			if res.Outcome == OutcomeCommitted {
				acked[k] = keyAck{fp: fp, jobID: r.JobID, expiresAt: res.Entry.ExpiresAt}
				if r.Structured {
					if ran[id] == nil {
						ran[id] = map[uint64]bool{}
					}
					ran[id][r.Sequence] = true
					high[id] = max(high[id], r.Sequence)
				}
			}
		case p < 14: // a Claim of a plain key
			key := fmt.Sprintf("k%d", rng.IntN(6))
			home := []string{"dc0", "dc2"}[rng.IntN(2)]
			res := w.apply(Encode(Claim{Tenant: tn, Key: key, Fingerprint: "a", JobID: "job-" + key + "-a", Home: home,
				Type: "t", Now: now, ExpiresAt: now + (1+rng.Int64N(6))*unit, MaxEntries: uint64(4 + rng.IntN(12))}))
			if a, ok := acked[[2]string{tn, key}]; ok && now < a.expiresAt && res.Outcome == OutcomeClaimed {
				t.Fatalf("step %d: %s/%s committed as %s until %d: a Claim at %d takes it", step, tn, key, a.jobID, a.expiresAt, now)
			}
		case p < 15: // a Release
			key := fmt.Sprintf("k%d", rng.IntN(6))
			w.apply(Encode(Release{Tenant: tn, Key: key, Fingerprint: "a", Home: []string{"dc0", "dc2"}[rng.IntN(2)], Now: now}))
		case p < 16: // a Cancel or a Retry of a plain key's job, under an action's key
			job := fmt.Sprintf("job-k%d-a", rng.IntN(6))
			a := JobAction{Tenant: tn, JobID: job, Key: fmt.Sprintf("act%d", rng.IntN(4)), Fingerprint: "cancel " + job,
				Now: now, ExpiresAt: now + (1+rng.Int64N(6))*unit, MaxEntries: uint64(4 + rng.IntN(12))}
			if rng.IntN(2) == 0 {
				w.apply(Encode(Cancel{a}))
			} else {
				a.Fingerprint = "retry " + job
				w.apply(Encode(Retry{a}))
			}
		case p < 19:
			var ttl time.Duration
			if rng.IntN(2) == 0 {
				ttl = time.Duration(3+rng.IntN(15)) * time.Second
			}
			w.apply(Encode(Expire{Now: now, MaxRemovals: uint64(rng.IntN(4)), WatermarkTTL: ttl}))
		default:
			w.swapDisk(step, rng.IntN(2) == 0)
		}
		// Every acknowledged key still live is in the table, as it was answered.
		for k, a := range acked {
			if now >= a.expiresAt {
				delete(acked, k)
				continue
			}
			e, ok := w.disk.Entry(k[0], k[1])
			if !ok || e.State != StateCommitted || e.JobID != a.jobID {
				t.Fatalf("step %d: %s/%s committed as %s until %d: at %d the ledger holds %+v (%v)", step, k[0], k[1], a.jobID, a.expiresAt, now, e, ok)
			}
		}
		// A watermark aged out forgets its client's sequences (the age limit).
		for id := range ran {
			if _, ok := w.mem.Watermark(id.tenant, id.client, "n"); !ok {
				delete(ran, id)
				delete(high, id)
			}
		}
		if step%50 == 49 {
			w.finish()
		}
	}
	w.finish()
}
