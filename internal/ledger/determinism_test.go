package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// genLog returns a seeded random log of n entries that exercises every command
// and outcome: duplicates, reused keys, structured keys and watermarks, the
// bound, expiry with small budgets, stale commits, invalid and ignorable
// commands (none that does not decode: that halts), configuration entries between commands, and the job
// lifecycle (queued commits, leases, heartbeats, completions, failures and
// expired leases, from a second generator, so that the first draws the same
// sequence as before the lifecycle existed). scale
// multiplies the TTLs and bounds: 1 expires and fills aggressively, larger
// values leave more state at the end.
func genLog(seed uint64, n int, scale int64) []*raft.Log {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var (
		logs     []*raft.Log
		now      = t0
		jobN     int
		reserved []Reserve
	)
	tenants := []string{"acme", "globex", "initech"}
	clients := []string{"host1.dc1:1", "host2.dc1:2"}
	// The lifecycle's generator. A shadow FSM applies the log as it grows, so
	// the generator knows which jobs each Lease handed out under which lease
	// (leased); heartbeats, completions and failures name those, or a lease
	// that has ended since, which makes the stale leases.
	lrng := rand.New(rand.NewPCG(seed^0x5bd1e995, seed))
	rrng := rand.New(rand.NewPCG(seed^0x27d4eb2f, seed))
	shadow := New(Options{})
	type guess struct{ tenant, job, lease string }
	var leased []guess
	nonces := []string{"a1b2c3d4e5f6a7b8", "0000000000000001"}
	add := func(typ raft.LogType, data []byte) {
		l := &raft.Log{Index: uint64(len(logs) + 1), Term: 1, Type: typ, Data: data}
		logs = append(logs, l)
		if res, ok := shadow.Apply(l).(Result); ok && res.Outcome == OutcomeLeased {
			for _, j := range res.Lease.Jobs {
				leased = append(leased, guess{j.Tenant, j.ID, j.Life.LeaseID})
			}
		}
	}
	// One-round admissions and claims, from a third generator (the others
	// draw the same sequences as before they existed): Admits of keys of
	// their own and of the Reserves' keys, multi-datacenter two times in
	// three (so that they are carried, confirmed and owed), and claims of
	// the Reserves' keys for dc2's or dc3's jobs, some of them released.
	arng := rand.New(rand.NewPCG(seed^0x85ebca6b, seed^0xc2b2ae35))
	var claims []Claim
	for len(logs) < n {
		if len(logs)%7 == 6 { // (arng only)
			tn := tenants[arng.IntN(len(tenants))]
			switch p := arng.IntN(100); {
			case p < 55:
				key := fmt.Sprintf("a%d", arng.IntN(30))
				if arng.IntN(3) == 0 {
					key = fmt.Sprintf("k%d", arng.IntN(60))
				}
				r := reserve(tn, key, now)
				r.MaxEntries = uint64(40 + arng.IntN(60))
				r.JobID = fmt.Sprintf("adm-%d", len(logs))
				if arng.IntN(3) > 0 {
					r.Request.Datacenters = []string{"dc1", "dc2"}
				}
				var out Verdict = QueueCommit(Commit{Tenant: r.Tenant, Key: r.Key, JobID: r.JobID, Now: now,
					ExpiresAt: now + scale*(5*sec+arng.Int64N(20*sec)), JobExpiresAt: now + scale*(10*sec+arng.Int64N(60*sec))})
				if arng.IntN(4) == 0 {
					out = Reject{Tenant: r.Tenant, Key: r.Key, JobID: r.JobID, Now: now,
						ExpiresAt: now + scale*5*sec, Status: 422, Reason: "unknown_job_type", Detail: "d"}
				}
				reserved = append(reserved, r)
				add(raft.LogCommand, Encode(Admit{Reserve: r, Outcome: out}))
			case p < 85:
				r := reserve(tn, fmt.Sprintf("k%d", arng.IntN(60)), now)
				c := Claim{Tenant: tn, Key: r.Key, Fingerprint: r.Fingerprint, JobID: fmt.Sprintf("clm-%d", len(logs)),
					Home: []string{"dc2", "dc3"}[arng.IntN(2)], Type: "a", Now: now,
					ExpiresAt: now + scale*(5*sec+arng.Int64N(20*sec)), MaxEntries: uint64(40 + arng.IntN(60))}
				claims = append(claims, c)
				add(raft.LogCommand, Encode(c))
			default:
				if len(claims) > 0 {
					c := claims[arng.IntN(len(claims))]
					add(raft.LogCommand, Encode(Release{Tenant: c.Tenant, Key: c.Key, Fingerprint: c.Fingerprint, Home: c.Home, Now: now}))
				}
			}
		}
		if len(logs)%11 == 10 && len(reserved) > 0 { // the outbox's progress (no draw: the sequence stays as it was)
			r := reserved[len(reserved)/2]
			add(raft.LogCommand, Encode(Confirm{Items: []Confirmation{{r.Tenant, r.Key, r.JobID, "dc2"}}}))
			// and the latest one's, twice (the outbox's retry: unchanged)
			r = reserved[len(reserved)-1]
			c := Encode(Confirm{Items: []Confirmation{{r.Tenant, r.Key, r.JobID, "dc2"}}})
			add(raft.LogCommand, c)
			add(raft.LogCommand, c)
		}
		if len(logs)%5 == 4 { // the lifecycle (lrng only)
			tn := tenants[lrng.IntN(len(tenants))]
			pick := func() (guess, bool) {
				if len(leased) == 0 {
					return guess{}, false
				}
				i := lrng.IntN(len(leased))
				if lrng.IntN(2) == 0 { // the latest lease, most likely current
					i = len(leased) - 1
				}
				g := leased[i]
				if lrng.IntN(3) > 0 { // it ends the attempt (probably)
					leased = append(leased[:i], leased[i+1:]...)
				}
				return g, true
			}
			switch p := lrng.IntN(100); {
			case p < 30:
				l := Lease{Tenant: tn, Holder: "w", Max: uint64(1 + lrng.IntN(4)), Now: now,
					Expiry: now + scale*(2+lrng.Int64N(20))*sec, MaxAttempts: uint64(lrng.IntN(4))}
				if lrng.IntN(4) == 0 {
					l.Types = []string{[]string{"a", "b"}[lrng.IntN(2)]}
				}
				// A third are replayable, their IDs from a few sets shared
				// by several Leases, and half of those are retried at once
				// (a worker's retry: the same command again).
				l.Replay = rrng.IntN(3) == 0
				set := rrng.IntN(4)
				for i := range l.Max {
					if l.Replay {
						l.LeaseIDs = append(l.LeaseIDs, fmt.Sprintf("R%d-%d", set, i))
					} else {
						l.LeaseIDs = append(l.LeaseIDs, fmt.Sprintf("L%d-%d", len(logs), i))
					}
				}
				add(raft.LogCommand, Encode(l))
				if l.Replay && rrng.IntN(2) == 0 {
					add(raft.LogCommand, Encode(l))
				}
			case p < 45:
				if g, ok := pick(); ok {
					leased = append(leased, g) // a heartbeat does not end it
					add(raft.LogCommand, Encode(Heartbeat{Tenant: g.tenant, JobID: g.job, LeaseID: g.lease,
						Now: now, Expiry: now + scale*(2+lrng.Int64N(20))*sec}))
				}
			case p < 65:
				if g, ok := pick(); ok {
					add(raft.LogCommand, Encode(Complete{Tenant: g.tenant, JobID: g.job, LeaseID: g.lease,
						Result: json.RawMessage(fmt.Sprintf(`{"r":%d}`, lrng.IntN(100))), Now: now}))
				}
			case p < 85:
				if g, ok := pick(); ok {
					f := Fail{Tenant: g.tenant, JobID: g.job, LeaseID: g.lease, Error: "e", Retry: lrng.IntN(4) > 0,
						Now: now, RetryAt: now + lrng.Int64N(5*sec), MaxAttempts: uint64(lrng.IntN(4))}
					add(raft.LogCommand, Encode(f))
				}
			default:
				add(raft.LogCommand, Encode(ExpireLeases{Now: now, Max: uint64(lrng.IntN(4)),
					RetryAt: now + lrng.Int64N(5*sec), MaxAttempts: uint64(lrng.IntN(4))}))
			}
		}
		now += rng.Int64N(3 * sec)
		switch p := rng.IntN(100); {
		case p < 40:
			tn := tenants[rng.IntN(len(tenants))]
			var r Reserve
			if rng.IntN(2) == 0 {
				r = reserve(tn, fmt.Sprintf("k%d", rng.IntN(60)), now)
			} else {
				r = structured(tn, clients[rng.IntN(2)], uint64(rng.IntN(40)), nonces[rng.IntN(2)], now)
			}
			r.MaxEntries = uint64(4 + rng.IntN(16))
			if scale > 1 {
				r.MaxEntries = uint64(40 + rng.IntN(60))
			}
			if rng.IntN(5) == 0 {
				r.Fingerprint = "other"
			}
			r.Request.Type = []string{"a", "b"}[rng.IntN(2)]
			r.Request.Payload = json.RawMessage(fmt.Sprintf(`{"n":%d}`, rng.IntN(1000)))
			jobN++
			r.JobID = fmt.Sprintf("job-%d", jobN)
			if jobN%3 == 0 { // a multi-datacenter job (no draw: the sequence stays as it was)
				r.Request.Datacenters = []string{"dc1", "dc2"}
			}
			if rng.IntN(10) == 0 { // a colliding job ID: a recent one of the same tenant
				for i := len(reserved) - 1; i >= max(0, len(reserved)-8); i-- {
					if reserved[i].Tenant == tn && reserved[i].Key != r.Key {
						r.JobID = reserved[i].JobID
						break
					}
				}
			}
			switch rng.IntN(4) {
			case 1, 2: // the bounds
				// (not scaled: every run reaches the refusals)
				r.MaxWatermarks = uint64(2 + rng.IntN(6))
				r.MaxTenantWatermarks = uint64(1 + rng.IntN(3))
				if rng.IntN(2) == 0 { // (every admission holds a job: half without the bytes' bounds reach the watermarks')
					r.MaxBytes = uint64(4000 + rng.IntN(12000))
					r.MaxTenantBytes = uint64(2000 + rng.IntN(6000))
				}
				if rng.IntN(3) == 0 {
					r.ResultTTL = time.Duration(scale*(1+rng.Int64N(30))) * time.Second
				}
			}
			reserved = append(reserved, r)
			// the verdict: mostly a Commit (some capped, some queued), else a Reject
			var out Verdict
			if rng.IntN(4) > 0 {
				c := Commit{Tenant: r.Tenant, Key: r.Key, JobID: r.JobID, Now: now,
					ExpiresAt: now + scale*20*sec, JobExpiresAt: now + scale*(10*sec+rng.Int64N(60*sec))}
				if rng.IntN(3) == 1 {
					c.MaxJobs = uint64(scale * int64(3+rng.IntN(10)))
					c.RejectedExpiresAt, c.CapacityDetail = now+scale*5*sec, "full"
				}
				if lrng.IntN(2) == 0 { // the job is queued
					c = QueueCommit(c)
				}
				out = c
			} else {
				out = Reject{Tenant: r.Tenant, Key: r.Key, JobID: r.JobID, Now: now,
					ExpiresAt: now + scale*5*sec, Status: []int{422, 429}[rng.IntN(2)], Reason: "capacity", Detail: "d"}
			}
			add(raft.LogCommand, Encode(Admit{Reserve: r, Outcome: out}))
		case p < 84:
			e := Expire{Now: now, MaxRemovals: uint64(rng.IntN(6)),
				WatermarkTTL: time.Duration(scale*int64(30+rng.IntN(60))) * time.Second}
			rng.IntN(3) // a draw the generator always made: the sequence stays as it was
			add(raft.LogCommand, Encode(e))
		case p < 88:
			// Bytes that do not decode would halt the FSM (TestHaltOnUndecodableEntry):
			// a committed log holds none, so the draw (kept, the sequence stays
			// as it was) makes a command that decodes and breaks a rule of its type.
			garbage := make([]byte, rng.IntN(40))
			for i := range garbage {
				garbage[i] = byte(rng.UintN(256))
			}
			add(raft.LogCommand, Encode(Admit{Reserve: Reserve{Tenant: "t", Key: string(garbage), JobID: "j", Now: now, MaxEntries: 1},
				Outcome: Reject{Tenant: "t", Key: string(garbage), JobID: "j", Now: now, ExpiresAt: now + 1, Status: 200}}))
		case p < 90:
			add(raft.LogCommand, []byte{byte(TypeIgnorable) | 0x33, 1, 1, 2, 3})
		case p < 92:
			add(raft.LogCommand, Encode(admit(Reserve{Tenant: "t", Key: "k", JobID: "j", Now: now}))) // invalid
		case p < 94:
			add(raft.LogConfiguration, []byte("config"))
		case p < 96:
			// (was an unknown version, which halts: a Commit that decodes and is invalid)
			add(raft.LogCommand, Encode(Admit{Reserve: Reserve{Tenant: "t", Key: "k", JobID: "j", Now: now, MaxEntries: 1},
				Outcome: Commit{Tenant: "t", Key: "k", JobID: "j", Now: now, ExpiresAt: now}}))
		}
	}
	return logs[:n] // an iteration may add several entries
}

// withActions inserts a tenant's Cancel and Retry commands into log (after
// every 13th entry, renumbering the indexes), of the jobs the log has
// committed so far, chosen by their state in a shadow FSM that applies the
// log as it grows, under keys from a small pool so that replays and reused
// keys occur; a quarter are sent twice (a client's retry).
func withActions(log []*raft.Log, seed uint64, scale int64) []*raft.Log {
	arng := rand.New(rand.NewPCG(seed^0x85ebca6b, seed))
	shadow := New(Options{})
	type ref struct{ tenant, id string }
	var jobs []ref
	var out []*raft.Log
	add := func(typ raft.LogType, data []byte) {
		l := &raft.Log{Index: uint64(len(out) + 1), Term: 1, Type: typ, Data: data}
		out = append(out, l)
		if res, ok := shadow.Apply(l).(Result); ok && res.Outcome == OutcomeCommitted && res.Job.ID != "" {
			jobs = append(jobs, ref{res.Job.Tenant, res.Job.ID})
		}
	}
	for i, l := range log {
		add(l.Type, l.Data)
		if i%13 != 12 || len(jobs) == 0 {
			continue
		}
		r := jobs[arng.IntN(len(jobs))]
		now := shadow.LedgerTime()
		a := JobAction{Tenant: r.tenant, JobID: r.id, Key: fmt.Sprintf("act%d", arng.IntN(40)), Now: now,
			ExpiresAt: now + scale*(5*sec+arng.Int64N(20*sec)), MaxEntries: uint64(scale * int64(8+arng.IntN(24)))}
		if arng.IntN(8) == 0 {
			a.MaxBytes = uint64(4000 + arng.IntN(12000))
		}
		retry := arng.IntN(2) == 0
		if j, ok := shadow.Job(r.tenant, r.id); ok && arng.IntN(4) > 0 {
			st := j.State()
			retry = st == JobFailed || st == JobDead
		}
		if retry {
			a.Fingerprint = "retry " + r.id
			add(raft.LogCommand, Encode(Retry{a}))
		} else {
			a.Fingerprint = "cancel " + r.id
			add(raft.LogCommand, Encode(Cancel{a}))
		}
		if arng.IntN(4) == 0 {
			add(raft.LogCommand, out[len(out)-1].Data)
		}
	}
	return out
}

// TestDeterminism applies the same log to two FSMs, one entry at a time and in
// random batches: every result, every change and the snapshots taken every
// 500 entries are identical. Each seed's log runs as generated and again with
// a tenant's Cancel and Retry commands inserted (withActions: they change
// which jobs later leases hand out, so the lifecycle's outcomes are reached
// by the first run and the actions' by the second).
func TestDeterminism(t *testing.T) {
	for _, tc := range []struct{ seed, scale uint64 }{{1, 1}, {5, 1}, {3, 40}, {4, 40}} {
		t.Run(fmt.Sprintf("seed=%d,scale=%d", tc.seed, tc.scale), func(t *testing.T) {
			plain := genLog(tc.seed, 5000, int64(tc.scale))
			outcomes := map[Outcome]int{}
			owedSeen := 0
			for _, logs := range [][]*raft.Log{plain, withActions(plain, tc.seed, int64(tc.scale))} {
				o, owed := applyTwoWays(t, logs, tc.seed)
				for k, v := range o {
					outcomes[k] += v
				}
				owedSeen = max(owedSeen, owed)
			}
			want := []Outcome{OutcomeExists, OutcomeKeyReused, OutcomeKeyExpired,
				OutcomeFull, OutcomeCommitted, OutcomeRejected, OutcomeUnchanged, OutcomeNotFound,
				OutcomeExpired, OutcomeIgnored, OutcomeInvalid, OutcomeBytesFull, OutcomeTenantBytesFull,
				OutcomeLeased, OutcomeExtended, OutcomeLeaseLost, OutcomeCompleted, OutcomeFailed, OutcomeLeasesExpired,
				OutcomeClaimed, OutcomeReleased, OutcomeConfirmed, OutcomeCancelled, OutcomeRetried, OutcomeConflict}
			if tc.scale == 1 { // with long TTLs every client keeps its watermark: no new one to refuse
				want = append(want, OutcomeWatermarksFull, OutcomeTenantWatermarksFull)
			}
			for _, o := range want {
				if outcomes[o] == 0 {
					t.Errorf("the log never produced %v; make the generator reach it", o)
				}
			}
			if owedSeen == 0 {
				t.Error("no snapshot held an owed entry; make the generator reach it")
			}
		})
	}
}

// applyTwoWays applies logs to two FSMs, one entry at a time and in random
// batches (drawn from seed), and fails t unless every result, every change
// and the snapshots taken every 500 entries are identical. It returns the
// outcomes counted and the most owed entries a snapshot held.
func applyTwoWays(t *testing.T, logs []*raft.Log, seed uint64) (map[Outcome]int, int) {
	t.Helper()
	const every = 500
	n := len(logs)
	var changesA, changesB []Change
	a := newFSM(t, Options{OnChange: func(c Change) { changesA = append(changesA, c) }})
	b := newFSM(t, Options{OnChange: func(c Change) { changesB = append(changesB, c) }})

	resA := make([]interface{}, 0, n)
	resB := make([]interface{}, 0, n)
	rng := rand.New(rand.NewPCG(seed, 7))
	largest, owedSeen := 0, 0
	for start := 0; start < n; start += every {
		seg := logs[start:min(n, start+every)]
		for _, l := range seg {
			resA = append(resA, a.Apply(l))
		}
		for i := 0; i < len(seg); {
			j := min(len(seg), i+1+rng.IntN(64))
			resB = append(resB, b.ApplyBatch(seg[i:j])...)
			i = j
		}
		sa, sb := persist(t, a), persist(t, b)
		if !bytes.Equal(sa, sb) {
			t.Fatalf("after %d entries: snapshots differ (%d vs %d bytes)", start+every, len(sa), len(sb))
		}
		largest = max(largest, len(sa))
		owedSeen = max(owedSeen, a.OwedLen())
		// A replica restored from the snapshot writes it back identically.
		if sc := persist(t, restore(t, sa)); !bytes.Equal(sa, sc) {
			t.Fatal("a restored FSM persists different bytes")
		}
	}

	outcomes := map[Outcome]int{}
	for i := range logs {
		if logs[i].Type != raft.LogCommand {
			if resA[i] != nil || resB[i] != nil {
				t.Fatalf("log %d (%v): responses %v / %v, want nil", i, logs[i].Type, resA[i], resB[i])
			}
			continue
		}
		ra, rb := resA[i].(Result), resB[i].(Result)
		if !sameResult(ra, rb) {
			t.Fatalf("log %d: results differ:\nApply      %+v\nApplyBatch %+v", i, ra, rb)
		}
		outcomes[ra.Outcome]++
	}
	t.Logf("outcomes: %v; final stats %+v; largest snapshot %d bytes", outcomes, a.Stats(), largest)
	if len(changesA) != len(changesB) {
		t.Fatalf("%d changes vs %d", len(changesA), len(changesB))
	}
	for i := range changesA {
		if !sameChange(changesA[i], changesB[i]) {
			t.Fatalf("change %d differs: %+v vs %+v", i, changesA[i], changesB[i])
		}
	}
	checkInvariants(t, a)
	checkInvariants(t, b)
	return outcomes, owedSeen
}

func sameChange(a, b Change) bool {
	return a.Index == b.Index && a.Kind == b.Kind && sameResult(Result{Entry: a.Entry}, Result{Entry: b.Entry})
}
