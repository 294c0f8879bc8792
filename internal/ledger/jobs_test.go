package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sync"
	"testing"

	"github.com/once-dev/once/pkg/api"
)

// The job lifecycle (jobs.go). Every test here runs on both backends,
// whatever ONCE_LEDGER_TEST_STORE says, and the table test compares their
// results and snapshots byte for byte.

const (
	tQ       = t0 + sec      // the queued jobs' commit
	tL       = t0 + 2*sec    // the first lease
	leaseTTL = 30 * sec      // a lease's lifetime
	tIn      = tL + 2*sec    // a time inside the first lease
	tOut     = tL + leaseTTL // the first lease's expiry: expired at this Now
)

var stores = []string{"memory", "disk"}

// newHarnessOn is newHarness on a given backend.
func newHarnessOn(t testing.TB, store string) *harness {
	t.Helper()
	h := &harness{t: t}
	opts := Options{OnChange: func(c Change) { h.changes = append(h.changes, c) }}
	if store == "memory" {
		h.f = New(opts)
	} else {
		h.f = openFSM(t, t.TempDir(), opts)
	}
	return h
}

// onBoth runs fn as a subtest on each backend.
func onBoth(t *testing.T, fn func(t *testing.T, h *harness)) {
	for _, store := range stores {
		t.Run("store="+store, func(t *testing.T) { fn(t, newHarnessOn(t, store)) })
	}
}

// queueJob reserves and commits (version 3) a job of type typ at now.
func queueJob(h *harness, tenant, key, typ string, now int64) Job {
	h.t.Helper()
	r := reserve(tenant, key, now)
	r.Request.Type = typ
	res := h.must(admitWith(r, QueueCommit(commit(r, now))), OutcomeCommitted)
	if res.Job.State() != JobQueued {
		h.t.Fatalf("a version-3 commit made a %v job", res.Job.State())
	}
	return res.Job
}

// legacyJob reserves and commits (version 2) a job at now.
func legacyJob(h *harness, tenant, key string, now int64) Job {
	h.t.Helper()
	r := reserve(tenant, key, now)
	return h.must(admitWith(r, commit(r, now)), OutcomeCommitted).Job
}

// leaseOf returns a Lease of up to max jobs at now, with IDs unique to now.
func leaseOf(tenant string, max int, now int64, types ...string) Lease {
	ids := make([]string, max)
	for i := range ids {
		ids[i] = fmt.Sprintf("lease-%d-%d", now, i)
	}
	return Lease{Tenant: tenant, Holder: "worker-1", Types: types, Max: uint64(max), LeaseIDs: ids,
		Now: now, Expiry: now + leaseTTL, MaxAttempts: 5}
}

// lease applies a Lease and returns the IDs of the jobs handed out.
func (h *harness) lease(l Lease) []string {
	h.t.Helper()
	res := h.must(l, OutcomeLeased)
	var ids []string
	for i, j := range res.Lease.Jobs {
		if j.State() != JobRunning || j.Life.LeaseID != l.LeaseIDs[i] || j.Life.LeaseExpiresAt != l.Expiry || j.Life.Holder != l.Holder {
			h.t.Fatalf("job handed out %+v", j)
		}
		got, _ := h.f.Job(j.Tenant, j.ID)
		if !reflect.DeepEqual(got, j) {
			h.t.Fatalf("the result's job %+v is not the stored %+v", j, got)
		}
		ids = append(ids, j.ID)
	}
	return ids
}

func (h *harness) job(tenant, id string) Job {
	h.t.Helper()
	j, ok := h.f.Job(tenant, id)
	if !ok {
		h.t.Fatalf("no job %s/%s", tenant, id)
	}
	return j
}

func failOf(j Job, lease string, now int64, retry bool) Fail {
	return Fail{Tenant: j.Tenant, JobID: j.ID, LeaseID: lease, Error: "boom", Retry: retry,
		Now: now, RetryAt: now + 10*sec, MaxAttempts: 5}
}

// jobStates are the rows of the table test: each sets up the tenant's job
// "job-acme-order-1" in one state (the running ones under lease "L1") and
// says at which Now the command applies.
var jobStates = []struct {
	name  string
	setup func(h *harness)
	now   int64
}{
	{"queued", func(h *harness) { queueJob(h, tenant, key, "send_invoice", tQ) }, tIn},
	{"running", setupRunning, tIn},
	{"running, lease expired", setupRunning, tOut},
	{"succeeded", func(h *harness) {
		setupRunning(h)
		h.must(Complete{Tenant: tenant, JobID: base.JobID, LeaseID: "L1", Result: []byte(`{"n":1}`), Now: tL + sec}, OutcomeCompleted)
	}, tIn},
	{"failed", func(h *harness) {
		setupRunning(h)
		h.must(failOf(Job{Tenant: tenant, ID: base.JobID}, "L1", tL+sec, false), OutcomeFailed)
	}, tIn},
	{"dead", func(h *harness) {
		setupRunning(h)
		f := failOf(Job{Tenant: tenant, ID: base.JobID}, "L1", tL+sec, true)
		f.MaxAttempts = 1
		if res := h.must(f, OutcomeFailed); res.Job.State() != JobDead {
			h.t.Fatalf("fail at max attempts: %v", res.Job.State())
		}
	}, tIn},
	{"legacy", func(h *harness) { legacyJob(h, tenant, key, tQ) }, tIn},
	{"unknown", func(h *harness) {}, tIn},
}

func setupRunning(h *harness) {
	h.t.Helper()
	queueJob(h, tenant, key, "send_invoice", tQ)
	l := leaseOf(tenant, 1, tL)
	l.LeaseIDs = []string{"L1"}
	if ids := h.lease(l); len(ids) != 1 {
		h.t.Fatalf("leased %v", ids)
	}
}

// TestLifecycleCommandByState: every command in every state of the job, on
// both backends, which must agree byte for byte. A stale lease is refused in
// every state.
func TestLifecycleCommandByState(t *testing.T) {
	const (
		LL = OutcomeLeaseLost
		NF = OutcomeNotFound
	)
	type want struct {
		outcome Outcome
		state   JobState // the job's state after (when it exists)
		n       int      // Lease: jobs handed out; ExpireLeases: leases expired
	}
	rows := []struct {
		name string
		cmd  func(now int64) Command
		// by state, in jobStates' order
		want [8]want
	}{
		{"heartbeat", func(now int64) Command {
			return Heartbeat{Tenant: tenant, JobID: base.JobID, LeaseID: "L1", Now: now, Expiry: now + leaseTTL}
		}, [8]want{{LL, JobQueued, 0}, {OutcomeExtended, JobRunning, 0}, {LL, JobRunning, 0}, {LL, JobSucceeded, 0},
			{LL, JobFailed, 0}, {LL, JobDead, 0}, {LL, JobLegacy, 0}, {NF, 0, 0}}},
		{"complete", func(now int64) Command {
			return Complete{Tenant: tenant, JobID: base.JobID, LeaseID: "L1", Result: []byte(`{"n":1}`), Now: now}
		}, [8]want{{LL, JobQueued, 0}, {OutcomeCompleted, JobSucceeded, 0}, {LL, JobRunning, 0}, {OutcomeUnchanged, JobSucceeded, 0},
			{LL, JobFailed, 0}, {LL, JobDead, 0}, {LL, JobLegacy, 0}, {NF, 0, 0}}},
		{"fail, retry", func(now int64) Command {
			return failOf(Job{Tenant: tenant, ID: base.JobID}, "L1", now, true)
		}, [8]want{{LL, JobQueued, 0}, {OutcomeFailed, JobQueued, 0}, {LL, JobRunning, 0}, {LL, JobSucceeded, 0},
			{OutcomeUnchanged, JobFailed, 0}, {OutcomeUnchanged, JobDead, 0}, {LL, JobLegacy, 0}, {NF, 0, 0}}},
		{"fail, no retry", func(now int64) Command {
			return failOf(Job{Tenant: tenant, ID: base.JobID}, "L1", now, false)
		}, [8]want{{LL, JobQueued, 0}, {OutcomeFailed, JobFailed, 0}, {LL, JobRunning, 0}, {LL, JobSucceeded, 0},
			{OutcomeUnchanged, JobFailed, 0}, {OutcomeUnchanged, JobDead, 0}, {LL, JobLegacy, 0}, {NF, 0, 0}}},
		{"lease", func(now int64) Command { return leaseOf(tenant, 10, now) },
			[8]want{{OutcomeLeased, JobRunning, 1}, {OutcomeLeased, JobRunning, 0}, {OutcomeLeased, JobRunning, 1},
				{OutcomeLeased, JobSucceeded, 0}, {OutcomeLeased, JobFailed, 0}, {OutcomeLeased, JobDead, 0},
				{OutcomeLeased, JobLegacy, 0}, {OutcomeLeased, 0, 0}}},
		{"lease, other type", func(now int64) Command { return leaseOf(tenant, 10, now, "resize") },
			[8]want{{OutcomeLeased, JobQueued, 0}, {OutcomeLeased, JobRunning, 0}, {OutcomeLeased, JobRunning, 0},
				{OutcomeLeased, JobSucceeded, 0}, {OutcomeLeased, JobFailed, 0}, {OutcomeLeased, JobDead, 0},
				{OutcomeLeased, JobLegacy, 0}, {OutcomeLeased, 0, 0}}},
		{"lease, other tenant", func(now int64) Command { return leaseOf("globex", 10, now) },
			[8]want{{OutcomeLeased, JobQueued, 0}, {OutcomeLeased, JobRunning, 0}, {OutcomeLeased, JobRunning, 0},
				{OutcomeLeased, JobSucceeded, 0}, {OutcomeLeased, JobFailed, 0}, {OutcomeLeased, JobDead, 0},
				{OutcomeLeased, JobLegacy, 0}, {OutcomeLeased, 0, 0}}},
		{"expire leases", func(now int64) Command { return ExpireLeases{Now: now, RetryAt: now + sec, MaxAttempts: 5} },
			[8]want{{OutcomeLeasesExpired, JobQueued, 0}, {OutcomeLeasesExpired, JobRunning, 0}, {OutcomeLeasesExpired, JobQueued, 1},
				{OutcomeLeasesExpired, JobSucceeded, 0}, {OutcomeLeasesExpired, JobFailed, 0}, {OutcomeLeasesExpired, JobDead, 0},
				{OutcomeLeasesExpired, JobLegacy, 0}, {OutcomeLeasesExpired, 0, 0}}},
	}
	// A stale lease: refused in every state.
	for _, stale := range []struct {
		name string
		cmd  func(now int64) Command
	}{
		{"heartbeat, stale lease", func(now int64) Command {
			return Heartbeat{Tenant: tenant, JobID: base.JobID, LeaseID: "L0", Now: now, Expiry: now + leaseTTL}
		}},
		{"complete, stale lease", func(now int64) Command {
			return Complete{Tenant: tenant, JobID: base.JobID, LeaseID: "L0", Now: now}
		}},
		{"fail, stale lease", func(now int64) Command { return failOf(Job{Tenant: tenant, ID: base.JobID}, "L0", now, true) }},
	} {
		row := struct {
			name string
			cmd  func(now int64) Command
			want [8]want
		}{name: stale.name, cmd: stale.cmd}
		for i, st := range []JobState{JobQueued, JobRunning, JobRunning, JobSucceeded, JobFailed, JobDead, JobLegacy} {
			row.want[i] = want{LL, st, 0}
		}
		row.want[7] = want{NF, 0, 0}
		rows = append(rows, row)
	}

	for _, row := range rows {
		for i, st := range jobStates {
			t.Run(row.name+"/"+st.name, func(t *testing.T) {
				w := row.want[i]
				var results []Result
				var snaps [][]byte
				for _, store := range stores {
					h := newHarnessOn(t, store)
					st.setup(h)
					before := dumpTables(h.f)
					res := h.apply(row.cmd(st.now))
					if res.Outcome != w.outcome {
						t.Fatalf("%s: outcome %v (err %v), want %v", store, res.Outcome, res.Err, w.outcome)
					}
					checkInvariants(t, h.f)
					switch res.Outcome {
					case OutcomeLeaseLost, OutcomeNotFound, OutcomeUnchanged:
						if after := dumpTables(h.f); !reflect.DeepEqual(before, after) {
							t.Fatalf("%s: %v changed the state", store, res.Outcome)
						}
					}
					j, ok := h.f.Job(tenant, base.JobID)
					if ok != (st.name != "unknown") || (ok && j.State() != w.state) {
						t.Fatalf("%s: job after %+v (%v), want state %v", store, j, ok, w.state)
					}
					if res.Job.ID != "" && !reflect.DeepEqual(res.Job, j) {
						t.Fatalf("%s: result's job %+v, stored %+v", store, res.Job, j)
					}
					switch res.Outcome {
					case OutcomeLeased:
						if len(res.Lease.Jobs) != w.n {
							t.Fatalf("%s: %d jobs handed out, want %d", store, len(res.Lease.Jobs), w.n)
						}
					case OutcomeLeasesExpired:
						if res.Lease.Requeued != w.n {
							t.Fatalf("%s: %+v, want %d requeued", store, *res.Lease, w.n)
						}
					}
					for _, c := range h.changes { // lifecycle commands change jobs, not entries
						if c.Index == h.idx {
							t.Fatalf("%s: change %+v", store, c)
						}
					}
					results = append(results, res)
					snaps = append(snaps, persist(t, h.f))
				}
				if !sameResult(results[0], results[1]) {
					t.Fatalf("results differ:\nmemory %+v\ndisk   %+v", results[0], results[1])
				}
				if !bytes.Equal(snaps[0], snaps[1]) {
					t.Fatal("the backends' snapshots differ")
				}
			})
		}
	}
}

func TestLifecycleTransitions(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		q := queueJob(h, tenant, key, "send_invoice", tQ)
		want := Job{ID: base.JobID, Tenant: tenant, Key: key, Type: "send_invoice", Payload: base.Request.Payload,
			Datacenters: []string{"dc1"}, CreatedAt: tQ, Seq: q.Seq,
			Life: &JobLife{State: JobQueued, RunAt: tQ, Retention: jobTTL}}
		if !reflect.DeepEqual(q, want) || q.State().String() != api.JobStatusQueued {
			t.Fatalf("queued job\n got %+v\nwant %+v", q, want)
		}
		l := leaseOf(tenant, 1, tL)
		h.lease(l)
		life := *want.Life
		want.Life = &life // the job's lifecycle is a new value at every change
		want.Life.State, want.Life.Attempts = JobRunning, 1
		want.Life.LeaseID, want.Life.Holder, want.Life.LeaseExpiresAt = l.LeaseIDs[0], "worker-1", tL+leaseTTL
		if got := h.job(tenant, q.ID); !reflect.DeepEqual(got, want) || got.State().String() != api.JobStatusRunning {
			t.Fatalf("running job\n got %+v\nwant %+v", got, want)
		}
		// A heartbeat extends the lease: it is no longer expired at tOut.
		h.must(Heartbeat{Tenant: tenant, JobID: q.ID, LeaseID: l.LeaseIDs[0], Now: tIn, Expiry: tOut + sec}, OutcomeExtended)
		if n, ok := h.f.NextLeaseExpiry(); !ok || n != tOut+sec {
			t.Fatalf("NextLeaseExpiry %d %v", n, ok)
		}
		res := h.must(Complete{Tenant: tenant, JobID: q.ID, LeaseID: l.LeaseIDs[0], Result: []byte(`{"ok":1}`), Now: tOut}, OutcomeCompleted)
		want.Life.State, want.Life.LeaseExpiresAt = JobSucceeded, tOut+sec
		want.Life.Result, want.Life.FinishedAt, want.ExpiresAt = []byte(`{"ok":1}`), tOut, tOut+jobTTL
		if !reflect.DeepEqual(res.Job, want) || !reflect.DeepEqual(h.job(tenant, q.ID), want) || res.Job.State().String() != api.JobStatusSucceeded {
			t.Fatalf("succeeded job\n got %+v\nwant %+v", res.Job, want)
		}
		if _, ok := h.f.NextLeaseExpiry(); ok {
			t.Fatal("a lease is left")
		}
		// Applied once: the same Complete again answers the same job.
		again := h.must(Complete{Tenant: tenant, JobID: q.ID, LeaseID: l.LeaseIDs[0], Result: []byte(`{"other":1}`), Now: tOut + sec}, OutcomeUnchanged)
		if !reflect.DeepEqual(again.Job, want) {
			t.Fatalf("repeated complete: %+v", again.Job)
		}
		if st := h.f.Stats(); st.Jobs != 1 || st.Succeeded != 1 || st.Queued+st.Running+st.Failed+st.Dead != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestLeaseOrder: oldest first by (queue time, commit order), Max, the type
// filter, tenants apart, and RunAt respected.
func TestLeaseOrder(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		// Queue times: a1(t0+1) b1(t0+2) a2(t0+3) a3(t0+3, committed later) b2(t0+4); globex g1(t0).
		r := func(key, typ string, now int64) string { return queueJob(h, tenant, key, typ, now).ID }
		g1 := queueJob(h, "globex", "g1", "a", t0).ID
		a1 := r("a1", "a", t0+1*sec)
		b1 := r("b1", "b", t0+2*sec)
		a2 := r("a2", "a", t0+3*sec)
		a3 := r("a3", "a", t0+3*sec)
		c1 := r("c1", "c", t0+3*sec)
		b2 := r("b2", "b", t0+4*sec)
		// Nothing queued later than Now is handed out.
		if got := h.lease(leaseOf(tenant, 100, t0+1*sec)); !reflect.DeepEqual(got, []string{a1}) {
			t.Fatalf("lease at t0+1s: %v", got)
		}
		// Types b and a: merged in queue order, Max 3.
		if got := h.lease(leaseOf(tenant, 3, t0+10*sec, "b", "a")); !reflect.DeepEqual(got, []string{b1, a2, a3}) {
			t.Fatalf("lease of b, a: %v", got)
		}
		if got := h.lease(leaseOf(tenant, 100, t0+11*sec)); !reflect.DeepEqual(got, []string{c1, b2}) {
			t.Fatalf("the rest: %v", got)
		}
		// The other tenant's job was never handed to acme.
		if j := h.job("globex", g1); j.State() != JobQueued {
			t.Fatalf("globex job %+v", j)
		}
		if got := h.lease(leaseOf("globex", 100, t0+12*sec)); !reflect.DeepEqual(got, []string{g1}) {
			t.Fatalf("globex: %v", got)
		}
		// A retry waits for its RunAt, then goes in queue order with the rest.
		j := h.job(tenant, a1)
		res := h.must(failOf(j, j.Life.LeaseID, t0+13*sec, true), OutcomeFailed)
		if res.Job.State() != JobQueued || res.Job.Life.RunAt != t0+23*sec || res.Job.Life.Error != "boom" {
			t.Fatalf("after a failed attempt: %+v", res.Job)
		}
		late := r("late", "a", t0+20*sec)
		if got := h.lease(leaseOf(tenant, 100, t0+22*sec)); !reflect.DeepEqual(got, []string{late}) {
			t.Fatalf("before the retry's RunAt: %v", got)
		}
		r2 := r("r2", "a", t0+24*sec)
		if got := h.lease(leaseOf(tenant, 100, t0+30*sec)); !reflect.DeepEqual(got, []string{a1, r2}) {
			t.Fatalf("after the retry's RunAt: %v", got)
		}
		if j := h.job(tenant, a1); j.Life.Attempts != 2 {
			t.Fatalf("attempts %d", j.Life.Attempts)
		}
		// Legacy jobs are never handed out.
		legacyJob(h, tenant, "legacy", t0+31*sec)
		if got := h.lease(leaseOf(tenant, 100, t0+35*sec)); len(got) != 0 {
			t.Fatalf("legacy handed out: %v", got)
		}
	})
}

// TestLeaseReclaim: a lease that expired is handed out again by the next
// Lease, before the queue, at most MaxReclaim a Lease; one that used its
// attempts is made DEAD.
func TestLeaseReclaim(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		var ids []string
		for i := range MaxReclaim + 6 {
			ids = append(ids, queueJob(h, tenant, fmt.Sprintf("k%03d", i), "a", tQ).ID)
		}
		got := append(h.lease(leaseOf(tenant, 50, tL)), h.lease(leaseOf(tenant, 50, tL+1))...)
		if !reflect.DeepEqual(got, ids) {
			t.Fatalf("leased %v", got)
		}
		fresh := queueJob(h, tenant, "fresh", "a", tL+2).ID
		// The worker died: at tOut+1 every lease has expired. A Lease of 100
		// reclaims MaxReclaim of them, earliest first, then takes the queue.
		res := h.must(leaseOf(tenant, 100, tOut+1), OutcomeLeased)
		if res.Lease.Reclaimed != MaxReclaim || len(res.Lease.Jobs) != MaxReclaim+1 {
			t.Fatalf("reclaimed %+v, %d jobs", *res.Lease, len(res.Lease.Jobs))
		}
		for i, j := range res.Lease.Jobs[:MaxReclaim] {
			if j.ID != ids[i] || j.Life.Attempts != 2 || j.Life.Error != ErrorLeaseExpired {
				t.Fatalf("reclaimed job %d: %+v", i, j)
			}
		}
		if res.Lease.Jobs[MaxReclaim].ID != fresh {
			t.Fatalf("after the reclaim: %+v", res.Lease.Jobs[MaxReclaim])
		}
		// The old lease of a reclaimed job is lost.
		old := leaseOf(tenant, 50, tL).LeaseIDs[0]
		h.must(Heartbeat{Tenant: tenant, JobID: ids[0], LeaseID: old, Now: tOut + 2, Expiry: tOut + leaseTTL}, OutcomeLeaseLost)
		h.must(Complete{Tenant: tenant, JobID: ids[0], LeaseID: old, Now: tOut + 2}, OutcomeLeaseLost)
		// The 6 left are looked at by the next Lease; with MaxAttempts 1 they die.
		l := leaseOf(tenant, 100, tOut+3)
		l.MaxAttempts = 1
		res = h.must(l, OutcomeLeased)
		if res.Lease.Dead != 6 || len(res.Lease.Jobs) != 0 {
			t.Fatalf("with max attempts 1: %+v, %d jobs", *res.Lease, len(res.Lease.Jobs))
		}
		for _, id := range ids[MaxReclaim:] {
			if j := h.job(tenant, id); j.State() != JobDead || j.Life.FinishedAt != tOut+3 || j.ExpiresAt != tOut+3+jobTTL || j.Life.LeaseID != "" {
				t.Fatalf("dead job %+v", j)
			}
		}
		if st := h.f.Stats(); st.Dead != 6 || st.Running != MaxReclaim+1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestFailBackoffAndDead: a job retried until it used MaxAttempts, each retry
// at the leader's RetryAt, then DEAD; a Fail without retry is FAILED at once.
// A Lease with Replay whose lease IDs are held answers the jobs holding them
// and leases nothing: the retry of a worker's lease (the same request, so the
// same IDs) gets the first attempt's jobs, whichever leader applies it. IDs
// no longer held (the job completed, the lease expired) lease afresh.
func TestLeaseReplay(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		var ids []string
		for i := range 5 {
			ids = append(ids, queueJob(h, tenant, fmt.Sprintf("r%d", i), "a", tQ).ID)
		}
		queueJob(h, "globex", "g1", "a", tQ)
		l := leaseOf(tenant, 3, tL)
		l.Replay = true
		first := h.lease(l)
		if !reflect.DeepEqual(first, ids[:3]) {
			t.Fatalf("first attempt leased %v", first)
		}
		at := func(l Lease, now int64) Lease {
			l.Now, l.Expiry = now, now+leaseTTL
			return l
		}
		replayed := func(l Lease, want []string) {
			t.Helper()
			res := h.must(l, OutcomeLeased)
			var got []string
			for _, j := range res.Lease.Jobs {
				if stored := h.job(j.Tenant, j.ID); !reflect.DeepEqual(stored, j) {
					t.Fatalf("replayed job %+v is not the stored %+v", j, stored)
				}
				got = append(got, j.ID)
			}
			if !res.Lease.Replayed || !reflect.DeepEqual(got, want) {
				t.Fatalf("replay: replayed %v, jobs %v, want %v", res.Lease.Replayed, got, want)
			}
		}
		replayed(at(l, tIn), ids[:3])
		if st := h.f.Stats(); st.Queued != 3 || st.Running != 3 { // 2 of acme's, globex's
			t.Fatalf("a replay leased: %+v", st)
		}
		// Another tenant's Lease with the same IDs holds none of them.
		g := at(l, tIn)
		g.Tenant = "globex"
		if res := h.must(g, OutcomeLeased); res.Lease.Replayed || len(res.Lease.Jobs) != 1 {
			t.Fatalf("globex: %+v", res.Lease)
		}
		// A completed job no longer holds its lease: the rest replays.
		h.must(Complete{Tenant: tenant, JobID: ids[0], LeaseID: l.LeaseIDs[0], Now: tIn + 1}, OutcomeCompleted)
		replayed(at(l, tIn+2), ids[1:3])
		// Without Replay (version 1), the same IDs lease again, as before.
		if got := h.lease(at(Lease{Tenant: tenant, Holder: "worker-1", Max: 1, LeaseIDs: []string{"other"}}, tIn+3)); !reflect.DeepEqual(got, ids[3:4]) {
			t.Fatalf("a lease without replay: %v", got)
		}
		// Once the leases have expired, the same IDs lease afresh: the
		// expired jobs are reclaimed under them, then the queue.
		res := h.must(at(l, tOut+1), OutcomeLeased)
		var got []string
		for _, j := range res.Lease.Jobs {
			got = append(got, j.ID)
		}
		if res.Lease.Replayed || res.Lease.Reclaimed != 2 || !reflect.DeepEqual(got, []string{ids[1], ids[2], ids[4]}) {
			t.Fatalf("after expiry: %+v, jobs %v", res.Lease, got)
		}
		// The job leased under "other" is still RUNNING; its lease expired at
		// tIn+3+leaseTTL. The first lease's IDs now hold ids 1, 2 and 4 again.
		replayed(at(l, tOut+2), []string{ids[1], ids[2], ids[4]})
		checkInvariants(t, h.f)
	})
}

// The replay's index of lease IDs is in memory: a reopened store rebuilds it
// from the RUNNING jobs.
func TestLeaseReplayAfterReopen(t *testing.T) {
	dir := t.TempDir()
	h := &harness{t: t, f: openFSM(t, dir, Options{})}
	var ids []string
	for i := range 3 {
		ids = append(ids, queueJob(h, tenant, fmt.Sprintf("r%d", i), "a", tQ).ID)
	}
	l := leaseOf(tenant, 2, tL)
	l.Replay = true
	if got := h.lease(l); !reflect.DeepEqual(got, ids[:2]) {
		t.Fatalf("leased %v", got)
	}
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
	h.f = openFSM(t, dir, Options{})
	l.Now = tIn
	res := h.must(l, OutcomeLeased)
	if !res.Lease.Replayed || len(res.Lease.Jobs) != 2 || res.Lease.Jobs[0].ID != ids[0] || res.Lease.Jobs[1].ID != ids[1] {
		t.Fatalf("after reopening: %+v", res.Lease)
	}
	checkInvariants(t, h.f)
}

func TestFailBackoffAndDead(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		id := queueJob(h, tenant, key, "a", tQ).ID
		now := tL
		for attempt := uint64(1); attempt <= 3; attempt++ {
			res := h.must(leaseOf(tenant, 1, now), OutcomeLeased)
			if len(res.Lease.Jobs) != 1 || res.Lease.Jobs[0].Life.Attempts != attempt {
				t.Fatalf("attempt %d: %+v", attempt, res.Lease.Jobs)
			}
			f := failOf(res.Lease.Jobs[0], res.Lease.Jobs[0].Life.LeaseID, now+sec, true)
			f.MaxAttempts, f.RetryAt = 3, now+sec+int64(attempt*attempt)*sec
			fr := h.must(f, OutcomeFailed)
			if attempt < 3 {
				if fr.Job.State() != JobQueued || fr.Job.Life.RunAt != f.RetryAt {
					t.Fatalf("attempt %d: %+v", attempt, fr.Job)
				}
				// Not leasable before RetryAt.
				if got := h.lease(leaseOf(tenant, 1, f.RetryAt-1)); len(got) != 0 {
					t.Fatalf("leased before RetryAt: %v", got)
				}
				now = f.RetryAt
				continue
			}
			if fr.Job.State() != JobDead || fr.Job.Life.Error != "boom" || fr.Job.ExpiresAt != now+sec+jobTTL {
				t.Fatalf("after the last attempt: %+v", fr.Job)
			}
			// The same Fail again: the same job.
			if again := h.must(f, OutcomeUnchanged); !reflect.DeepEqual(again.Job, fr.Job) {
				t.Fatalf("repeated fail: %+v", again.Job)
			}
		}
		id2 := queueJob(h, tenant, "k2", "a", now).ID
		res := h.must(leaseOf(tenant, 1, now+sec), OutcomeLeased)
		if res.Lease.Jobs[0].ID != id2 {
			t.Fatalf("leased %+v", res.Lease.Jobs)
		}
		if fr := h.must(failOf(res.Lease.Jobs[0], res.Lease.Jobs[0].Life.LeaseID, now+2*sec, false), OutcomeFailed); fr.Job.State() != JobFailed {
			t.Fatalf("fail without retry: %+v", fr.Job)
		}
		if st := h.f.Stats(); st.Dead != 1 || st.Failed != 1 || st.Jobs != 2 {
			t.Fatalf("stats %+v (%s)", st, id)
		}
	})
}

// TestExpireLeases: leases expired at Now go back to the queue (or die),
// earliest first, within Max.
func TestExpireLeases(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		for i := range 5 {
			queueJob(h, tenant, fmt.Sprintf("k%d", i), "a", tQ)
		}
		queueJob(h, "globex", "g", "a", tQ)
		for i := range 5 { // leases expiring at tL+i+leaseTTL
			h.lease(leaseOf(tenant, 1, tL+int64(i)))
		}
		h.lease(leaseOf("globex", 1, tL+10*sec))
		res := h.must(ExpireLeases{Now: tOut + 2, Max: 2, RetryAt: tOut + 5*sec, MaxAttempts: 5}, OutcomeLeasesExpired)
		if res.Lease.Requeued != 2 || !res.More {
			t.Fatalf("max 2: %+v more %v", *res.Lease, res.More)
		}
		res = h.must(ExpireLeases{Now: tOut + 2, RetryAt: tOut + 5*sec, MaxAttempts: 1}, OutcomeLeasesExpired)
		if res.Lease.Dead != 1 || res.Lease.Requeued != 0 || res.More {
			t.Fatalf("the third: %+v more %v", *res.Lease, res.More)
		}
		if n, ok := h.f.NextLeaseExpiry(); !ok || n != tOut+3 {
			t.Fatalf("NextLeaseExpiry %d %v", n, ok)
		}
		j := h.job(tenant, "job-acme-k0")
		if j.State() != JobQueued || j.Life.RunAt != tOut+5*sec || j.Life.LeaseID != "" || j.Life.Error != ErrorLeaseExpired {
			t.Fatalf("requeued %+v", j)
		}
		if got := h.lease(leaseOf(tenant, 5, tOut+2)); len(got) != 0 {
			t.Fatalf("leased before RetryAt: %v", got)
		}
		res = h.must(ExpireLeases{Now: tOut + 20*sec, RetryAt: tOut + 20*sec}, OutcomeLeasesExpired)
		if res.Lease.Requeued != 3 || res.More { // acme's last two and globex's
			t.Fatalf("the rest: %+v", *res.Lease)
		}
		if st := h.f.Stats(); st.Queued != 5 || st.Dead != 1 || st.Running != 0 {
			t.Fatalf("stats %+v", st)
		}
		h.must(ExpireLeases{Now: 5, RetryAt: 4}, OutcomeInvalid)
	})
}

// TestCapacityCountsUnfinishedJobs: MaxJobs bounds queued + running (and
// legacy) jobs; finished jobs do not count.
func TestCapacityCountsUnfinishedJobs(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		capped := func(key string, now int64) Result {
			r := reserve(tenant, key, now)
			c := QueueCommit(commit(r, now))
			c.MaxJobs, c.RejectedExpiresAt, c.CapacityDetail = 3, now+rejectTTL, "full"
			return h.apply(admitWith(r, c))
		}
		legacyJob(h, tenant, "legacy", tQ)
		for _, k := range []string{"a", "b"} {
			if res := capped(k, tQ); res.Outcome != OutcomeCommitted {
				t.Fatalf("%s: %v", k, res.Outcome)
			}
		}
		if res := capped("c", tQ); res.Outcome != OutcomeRejected || res.Entry.Reason != ReasonCapacity {
			t.Fatalf("at the bound: %+v", res)
		}
		ids := h.lease(leaseOf(tenant, 2, tL))
		if res := capped("d", tL); res.Outcome != OutcomeRejected {
			t.Fatalf("running jobs count: %v", res.Outcome)
		}
		h.must(Complete{Tenant: tenant, JobID: ids[0], LeaseID: h.job(tenant, ids[0]).Life.LeaseID, Now: tL + 1}, OutcomeCompleted)
		if res := capped("e", tL+2); res.Outcome != OutcomeCommitted {
			t.Fatalf("a finished job does not count: %v", res.Outcome)
		}
		j := h.job(tenant, ids[1])
		h.must(failOf(j, j.Life.LeaseID, tL+3, false), OutcomeFailed)
		if res := capped("f", tL+4); res.Outcome != OutcomeCommitted {
			t.Fatalf("a failed job does not count: %v", res.Outcome)
		}
		if res := capped("g", tL+5); res.Outcome != OutcomeRejected {
			t.Fatalf("at the bound again: %v", res.Outcome)
		}
	})
}

// TestFinishedJobsExpireUnfinishedDoNot: Expire removes a finished job at
// FinishedAt + retention, and never a queued or running one.
func TestFinishedJobsExpireUnfinishedDoNot(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		queued := queueJob(h, tenant, "q", "a", tQ).ID
		running := queueJob(h, tenant, "r", "a", tQ).ID
		done := queueJob(h, tenant, "d", "a", tQ).ID
		legacy := legacyJob(h, tenant, "l", tQ).ID
		h.lease(leaseOf(tenant, 1, tL))   // q
		h.lease(leaseOf(tenant, 2, tL+1)) // r, d
		h.must(Heartbeat{Tenant: tenant, JobID: queued, LeaseID: h.job(tenant, queued).Life.LeaseID, Now: tL + 2, Expiry: tL + 100*jobTTL}, OutcomeExtended)
		h.must(Heartbeat{Tenant: tenant, JobID: running, LeaseID: h.job(tenant, running).Life.LeaseID, Now: tL + 2, Expiry: tL + 100*jobTTL}, OutcomeExtended)
		h.must(Fail{Tenant: tenant, JobID: queued, LeaseID: h.job(tenant, queued).Life.LeaseID, Retry: true, Now: tL + 3, RetryAt: tL + 10*jobTTL}, OutcomeFailed)
		h.must(Complete{Tenant: tenant, JobID: done, LeaseID: h.job(tenant, done).Life.LeaseID, Now: tL + 5*sec}, OutcomeCompleted)
		res := h.must(Expire{Now: tQ + jobTTL}, OutcomeExpired)
		if res.Removed.Jobs != 1 {
			t.Fatalf("removed %+v", res.Removed)
		}
		if _, ok := h.f.Job(tenant, legacy); ok {
			t.Fatal("the legacy job outlived its retention")
		}
		h.job(tenant, done) // still readable: finished at tL+5s, retained a job TTL from then
		res = h.must(Expire{Now: tL + 5*sec + jobTTL}, OutcomeExpired)
		if res.Removed.Jobs != 1 {
			t.Fatalf("removed %+v", res.Removed)
		}
		if _, ok := h.f.Job(tenant, done); ok {
			t.Fatal("the finished job outlived its retention")
		}
		h.must(Expire{Now: tL + 50*jobTTL}, OutcomeExpired)
		if h.job(tenant, queued).State() != JobQueued || h.job(tenant, running).State() != JobRunning {
			t.Fatal("an unfinished job expired")
		}
		if _, ok := h.f.NextExpiry(); ok {
			t.Fatal("NextExpiry names an unfinished job")
		}
	})
}

// A worker's command on a finished job whose retention has ended (Gone: a
// read answers 404) answers NotFound, as it does once Expire removed the
// job, whether or not an Expire ran since; a moment before, the job
// answers as it is. Before, an unswept job answered Unchanged or LeaseLost
// with a job the ledger counts gone.
func TestWorkerCommandOnGoneJobIsNotFound(t *testing.T) {
	const done = tL + sec // the attempt's end
	id := base.JobID
	commands := []struct {
		name string
		at   func(now int64) Command
	}{
		{"complete", func(now int64) Command {
			return Complete{Tenant: tenant, JobID: id, LeaseID: "L1", Result: []byte(`{"n":1}`), Now: now}
		}},
		{"fail", func(now int64) Command { return failOf(Job{Tenant: tenant, ID: id}, "L1", now, false) }},
		{"heartbeat", func(now int64) Command {
			return Heartbeat{Tenant: tenant, JobID: id, LeaseID: "L1", Now: now, Expiry: now + leaseTTL}
		}},
	}
	finishers := []struct {
		state  string
		cmd    Command
		answer Outcome
	}{
		{"succeeded", commands[0].at(done), OutcomeCompleted},
		{"failed", commands[1].at(done), OutcomeFailed},
	}
	for _, fin := range finishers {
		for _, c := range commands {
			for _, swept := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/swept=%v", fin.state, c.name, swept), func(t *testing.T) {
					onBoth(t, func(t *testing.T, h *harness) {
						setupRunning(h)
						gone := h.must(fin.cmd, fin.answer).Job.ExpiresAt
						if res := h.apply(c.at(gone - 1)); res.Outcome == OutcomeNotFound {
							t.Fatalf("retained job: %v", res.Outcome)
						}
						if swept {
							h.must(Expire{Now: gone}, OutcomeExpired)
						}
						if res := h.apply(c.at(gone)); res.Outcome != OutcomeNotFound {
							t.Fatalf("gone job: %v %+v, want %v", res.Outcome, res.Job, OutcomeNotFound)
						}
					})
				})
			}
		}
	}
}

func TestListJobsByState(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		var want = map[string][]string{}
		for i := range 6 {
			typ := []string{"a", "b"}[i%2]
			id := queueJob(h, tenant, fmt.Sprintf("k%d", i), typ, tQ+int64(i)).ID
			want[api.JobStatusQueued] = append(want[api.JobStatusQueued], id)
		}
		queueJob(h, "globex", "g", "a", tQ)
		want[api.JobStatusCommitted] = []string{legacyJob(h, tenant, "legacy", tQ).ID}
		ids := h.lease(leaseOf(tenant, 3, tL)) // k0 k1 k2
		want[api.JobStatusQueued] = want[api.JobStatusQueued][3:]
		want[api.JobStatusRunning] = ids[1:]
		h.must(Complete{Tenant: tenant, JobID: ids[0], LeaseID: h.job(tenant, ids[0]).Life.LeaseID, Now: tL + 1}, OutcomeCompleted)
		want[api.JobStatusSucceeded] = ids[:1]
		for status, ids := range want {
			got, pages := listAll(t, h.f, tenant, ListOptions{Status: status, Limit: 1})
			if !reflect.DeepEqual(got, ids) || pages != len(ids) {
				t.Fatalf("status %s: %v in %d pages, want %v", status, got, pages, ids)
			}
		}
		got, _ := listAll(t, h.f, tenant, ListOptions{Status: api.JobStatusQueued, Type: "b"})
		if !reflect.DeepEqual(got, []string{"job-acme-k3", "job-acme-k5"}) {
			t.Fatalf("queued of type b: %v", got)
		}
		got, _ = listAll(t, h.f, tenant, ListOptions{Status: api.JobStatusRunning, Type: "a", Limit: 1})
		if !reflect.DeepEqual(got, []string{"job-acme-k2"}) {
			t.Fatalf("running of type a: %v", got)
		}
		for _, status := range []string{api.JobStatusFailed, api.JobStatusDead, "bogus"} {
			if jobs, _, more := h.f.ListJobs(tenant, ListOptions{Status: status}); len(jobs) != 0 || more {
				t.Fatalf("status %s: %v", status, jobs)
			}
		}
		if all, _ := listAll(t, h.f, tenant, ListOptions{}); len(all) != 7 {
			t.Fatalf("every job: %v", all)
		}
	})
}

func TestLifecycleInvalid(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		queueJob(h, tenant, key, "a", tQ)
		ok := leaseOf(tenant, 2, tL)
		for _, c := range []Command{
			Lease{Holder: "w", Max: 1, LeaseIDs: []string{"l"}, Now: 1, Expiry: 2},
			Lease{Tenant: "t", Max: 1, LeaseIDs: []string{"l"}, Now: 1, Expiry: 2},
			Lease{Tenant: "t", Holder: "w", Max: 0, Now: 1, Expiry: 2},
			Lease{Tenant: "t", Holder: "w", Max: MaxLease + 1, LeaseIDs: make([]string, MaxLease+1), Now: 1, Expiry: 2},
			Lease{Tenant: "t", Holder: "w", Max: 2, LeaseIDs: []string{"l"}, Now: 1, Expiry: 2},
			Lease{Tenant: "t", Holder: "w", Max: 2, LeaseIDs: []string{"l", "l"}, Now: 1, Expiry: 2},
			Lease{Tenant: "t", Holder: "w", Max: 1, LeaseIDs: []string{""}, Now: 1, Expiry: 2},
			Lease{Tenant: "t", Holder: "w", Max: 1, LeaseIDs: []string{"l"}, Types: []string{"a", "a"}, Now: 1, Expiry: 2},
			Lease{Tenant: "t", Holder: "w", Max: 1, LeaseIDs: []string{"l"}, Types: []string{""}, Now: 1, Expiry: 2},
			Lease{Tenant: "t", Holder: "w", Max: 1, LeaseIDs: []string{"l"}, Types: make([]string, MaxLeaseTypes+1), Now: 1, Expiry: 2},
			Lease{Tenant: "t", Holder: "w", Max: 1, LeaseIDs: []string{"l"}, Now: 2, Expiry: 2},
			Heartbeat{Tenant: tenant, JobID: base.JobID, Now: 1, Expiry: 2},
			Heartbeat{Tenant: tenant, JobID: base.JobID, LeaseID: "l", Now: 2, Expiry: 2},
			Complete{Tenant: tenant, LeaseID: "l"},
			Fail{JobID: base.JobID, LeaseID: "l"},
			Fail{Tenant: tenant, JobID: base.JobID, LeaseID: "l", Retry: true, Now: 2, RetryAt: 1},
			ExpireLeases{Now: 2, RetryAt: 1},
		} {
			before := dumpTables(h.f)
			res := h.apply(c)
			if res.Outcome != OutcomeInvalid || !errors.Is(res.Err, ErrInvalidCommand) {
				t.Fatalf("%#v: %v %v", c, res.Outcome, res.Err)
			}
			if !reflect.DeepEqual(before, dumpTables(h.f)) {
				t.Fatalf("%#v changed the state", c)
			}
		}
		if h.f.LedgerTime() != tQ {
			t.Fatalf("invalid commands raised the ledger time to %d", h.f.LedgerTime())
		}
		h.lease(ok)
		if h.f.LedgerTime() != tL {
			t.Fatalf("ledger time %d after a lease at %d", h.f.LedgerTime(), tL)
		}
	})
}

// A queued Commit whose retention (JobExpiresAt - Now) does not fit in an
// int64 is invalid. Before, it was committed with the retention wrapped
// negative: a job record no decoder reads back, so the disk store's next
// read of it (a Lease) panicked inside Apply on every replica, and the
// memory store's snapshots were refused by every Restore.
func TestQueueCommitRetentionOverflowIsInvalid(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		now := int64(math.MinInt64 / 2)
		r := reserve(tenant, key, now)
		c := QueueCommit(commit(r, now))
		c.JobExpiresAt = math.MaxInt64/2 + 10 // after now, 2^63 + 9 ns later
		before := dumpTables(h.f)
		if res := h.apply(Admit{Reserve: r, Outcome: c}); res.Outcome != OutcomeInvalid || !errors.Is(res.Err, ErrInvalidCommand) {
			t.Fatalf("admit: %v %v, want invalid", res.Outcome, res.Err)
		}
		if !reflect.DeepEqual(before, dumpTables(h.f)) {
			t.Fatal("an invalid admit changed the state")
		}
		c.JobExpiresAt = now + math.MaxInt64 // the longest retention that fits
		h.must(Admit{Reserve: r, Outcome: c}, OutcomeCommitted)
		h.must(leaseOf(tenant, 1, now+1), OutcomeLeased)
		restore(t, persist(t, h.f))
	})
}

// lifecycleFSM builds, on a backend, a state with jobs in every state and
// every kind of field set.
func lifecycleFSM(t *testing.T, store string) *harness {
	h := newHarnessOn(t, store)
	legacyJob(h, tenant, "legacy", tQ)
	for i := range 8 {
		queueJob(h, tenant, fmt.Sprintf("k%d", i), []string{"a", "b"}[i%2], tQ+int64(i))
	}
	queueJob(h, "globex", "g0", "a", tQ)
	ids := h.lease(leaseOf(tenant, 5, tL)) // k0..k4 running
	lease := func(id string) string { return h.job(tenant, id).Life.LeaseID }
	h.must(Complete{Tenant: tenant, JobID: ids[0], LeaseID: lease(ids[0]), Result: []byte(`{"ok":true}`), Now: tL + 1}, OutcomeCompleted)
	h.must(Fail{Tenant: tenant, JobID: ids[1], LeaseID: lease(ids[1]), Error: "bad", Now: tL + 2}, OutcomeFailed)
	h.must(Fail{Tenant: tenant, JobID: ids[2], LeaseID: lease(ids[2]), Error: "again", Retry: true, Now: tL + 3, RetryAt: tL + 9*sec, MaxAttempts: 1}, OutcomeFailed)
	h.must(Fail{Tenant: tenant, JobID: ids[3], LeaseID: lease(ids[3]), Error: "retry", Retry: true, Now: tL + 4, RetryAt: tL + 9*sec, MaxAttempts: 5}, OutcomeFailed)
	st := h.f.Stats()
	if st.Queued != 5 || st.Running != 1 || st.Succeeded != 1 || st.Failed != 1 || st.Dead != 1 || st.Jobs != 10 {
		t.Fatalf("stats %+v", st)
	}
	return h
}

// TestSnapshotRoundTripLifecycle: jobs in every state survive a snapshot on
// each backend, identically, and go on identically.
func TestSnapshotRoundTripLifecycle(t *testing.T) {
	var snaps [][]byte
	for _, store := range stores {
		h := lifecycleFSM(t, store)
		snap := persist(t, h.f)
		snaps = append(snaps, snap)
		for _, into := range stores {
			g := newHarnessOn(t, into)
			if err := g.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatalf("%s → %s: %v", store, into, err)
			}
			g.idx = h.f.Stats().AppliedIndex
			sameState(t, h.f, g.f)
			checkInvariants(t, g.f)
			for _, status := range []string{"queued", "running", "succeeded", "failed", "dead", "committed"} {
				a, _ := listAll(t, h.f, tenant, ListOptions{Status: status})
				b, _ := listAll(t, g.f, tenant, ListOptions{Status: status})
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("status %s: %v vs %v", status, a, b)
				}
			}
			if !bytes.Equal(persist(t, g.f), snap) {
				t.Fatalf("%s → %s: the restored state persists other bytes", store, into)
			}
			// Both go on alike: the expired lease and the queue.
			for _, c := range []Command{leaseOf(tenant, 10, tOut+10*sec), ExpireLeases{Now: tOut + 50*sec, RetryAt: tOut + 50*sec}} {
				ra, rb := h.apply(c), g.apply(c)
				if !sameResult(ra, rb) {
					t.Fatalf("%T: %+v vs %+v", c, ra, rb)
				}
			}
			if !bytes.Equal(persist(t, h.f), persist(t, g.f)) {
				t.Fatal("the restored state went on otherwise")
			}
			h = lifecycleFSM(t, store) // afresh for the next target
		}
	}
	if !bytes.Equal(snaps[0], snaps[1]) {
		t.Fatal("memory and disk snapshots differ")
	}
}

// TestSnapshotOfLegacyAndLifecycleJobs: legacy jobs, lifecycle jobs, and
// legacy jobs again once the last lifecycle job is gone, each persist and
// restore to the same state and bytes.
func TestSnapshotOfLegacyAndLifecycleJobs(t *testing.T) {
	for _, store := range stores {
		h := newHarnessOn(t, store)
		roundTrip := func(what string) {
			t.Helper()
			snap := persist(t, h.f)
			g := newHarnessOn(t, store)
			if err := g.f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
				t.Fatalf("%s, %s: %v", store, what, err)
			}
			sameState(t, h.f, g.f)
			if !bytes.Equal(persist(t, g.f), snap) {
				t.Fatalf("%s, %s: the snapshot restores to another state", store, what)
			}
		}
		legacyJob(h, tenant, "a", tQ)
		legacyJob(h, "globex", "b", tQ)
		roundTrip("legacy jobs")
		q := queueJob(h, tenant, "q", "a", tQ)
		roundTrip("a queued job")
		h.lease(leaseOf(tenant, 1, tL))
		h.must(Complete{Tenant: tenant, JobID: q.ID, LeaseID: h.job(tenant, q.ID).Life.LeaseID, Now: tL + 1}, OutcomeCompleted)
		h.must(Expire{Now: tL + 1 + jobTTL}, OutcomeExpired)
		if _, ok := h.f.Job(tenant, q.ID); ok {
			t.Fatalf("%s: the finished job outlived its retention", store)
		}
		roundTrip("no lifecycle job left")
	}
}

// TestDiskReopensLegacyAndLifecycleJobs: a store with legacy jobs, with a
// running lifecycle job, and with the lifecycle job gone reopens as the
// state it held, its counters included.
func TestDiskReopensLegacyAndLifecycleJobs(t *testing.T) {
	dir := t.TempDir()
	counters := func(f *FSM) storeMeta {
		t.Helper()
		f.mu.RLock()
		defer f.mu.RUnlock()
		var m storeMeta
		var err error
		if !f.s.store.Get(metaKey, func(v []byte) { m, err = decodeMeta(v) }) || err != nil {
			t.Fatalf("meta: %v", err)
		}
		return m
	}
	reopen := func(f *FSM, idx uint64) *harness {
		t.Helper()
		want, wantStats := persist(t, f), f.Stats()
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		g, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Stats(); got != wantStats || !bytes.Equal(persist(t, g), want) {
			t.Fatalf("reopened: stats %+v, want %+v (snapshots equal: %v)", got, wantStats, bytes.Equal(persist(t, g), want))
		}
		checkInvariants(t, g)
		return &harness{t: t, f: g, idx: idx}
	}
	f, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, f: f}
	legacyJob(h, tenant, "a", tQ)
	r := reserve(tenant, "p", tQ)
	h = reopen(h.f, h.idx)
	h.must(admitWith(r, QueueCommit(commit(r, tL))), OutcomeCommitted)
	h.lease(leaseOf(tenant, 1, tL))
	if m := counters(h.f); m.running != 1 || m.jobs != 2 {
		t.Fatalf("a running job: %+v", m)
	}
	h = reopen(h.f, h.idx)
	if st := h.f.Stats(); st.Running != 1 || st.Jobs != 2 {
		t.Fatalf("stats %+v", st)
	}
	id := "job-acme-p"
	h.must(Complete{Tenant: tenant, JobID: id, LeaseID: h.job(tenant, id).Life.LeaseID, Now: tL + 1}, OutcomeCompleted)
	h.must(Expire{Now: tL + 1 + jobTTL}, OutcomeExpired)
	if m := counters(h.f); m.running != 0 || m.succeeded != 0 || m.jobs != uint64(h.f.Stats().Jobs) {
		t.Fatalf("no lifecycle job left: %+v", m)
	}
	h = reopen(h.f, h.idx)
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLifecycleLogReplays: a log of lifecycle commands applied one by one and
// in batches gives identical results on both backends.
func TestLifecycleLogReplays(t *testing.T) {
	logs := genLog(41, 3000, 4)
	var snaps [][]byte
	outcomes := map[Outcome]int{}
	for _, store := range stores {
		var f *FSM
		if store == "memory" {
			f = New(Options{})
		} else {
			f = openFSM(t, t.TempDir(), Options{})
		}
		for i := 0; i < len(logs); i += 17 {
			for _, r := range f.ApplyBatch(logs[i:min(len(logs), i+17)]) {
				if r != nil && store == "memory" {
					outcomes[r.(Result).Outcome]++
				}
			}
		}
		checkInvariants(t, f)
		snaps = append(snaps, persist(t, f))
	}
	if !bytes.Equal(snaps[0], snaps[1]) {
		t.Fatal("the backends' snapshots differ")
	}
	t.Logf("outcomes %v", outcomes)
	for _, o := range []Outcome{OutcomeLeased, OutcomeExtended, OutcomeLeaseLost, OutcomeCompleted, OutcomeFailed, OutcomeLeasesExpired} {
		if outcomes[o] == 0 {
			t.Errorf("the log never produced %v", o)
		}
	}
}

// TestListByStateThroughChurn: listing by state stays exact while jobs move
// between states, on both backends; on disk the first page of a state keeps
// the group's floor (so later first pages skip the tombstones of the jobs
// that left the state), a job coming back below the floor is still found,
// and a later page neither uses nor moves the floor.
func TestListByStateThroughChurn(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		for i := range 50 {
			queueJob(h, tenant, fmt.Sprintf("k%02d", i), "a", tQ+int64(i))
		}
		ids := h.lease(leaseOf(tenant, 50, tL))
		list := func(status string, limit int) []string {
			t.Helper()
			got, _ := listAll(t, h.f, tenant, ListOptions{Status: status, Limit: limit})
			return got
		}
		idsOf := func(jobs []Job) (out []string) {
			for _, j := range jobs {
				out = append(out, j.ID)
			}
			return out
		}
		if got := list(api.JobStatusQueued, 10); len(got) != 0 {
			t.Fatalf("queued after leasing all: %v", got)
		}
		if got := list(api.JobStatusRunning, 7); !reflect.DeepEqual(got, ids) {
			t.Fatalf("running in pages of 7: %v, want %v", got, ids)
		}
		if d, ok := h.f.s.jobState.(*diskIndex[*Job]); ok {
			g := string(jobStateGroup(nil, &Job{Tenant: tenant, Life: &JobLife{State: JobQueued}}))
			d.mu.Lock()
			_, set := d.floors[g]
			d.mu.Unlock()
			if !set {
				t.Fatal("the first page of queued jobs left no floor")
			}
		}
		for _, id := range ids[:40] {
			h.must(Complete{Tenant: tenant, JobID: id, LeaseID: h.job(tenant, id).Life.LeaseID, Now: tL + 1}, OutcomeCompleted)
		}
		if got := list(api.JobStatusRunning, 3); !reflect.DeepEqual(got, ids[40:]) {
			t.Fatalf("running after 40 completions: %v", got)
		}
		if got := list(api.JobStatusSucceeded, 0); !reflect.DeepEqual(got, ids[:40]) {
			t.Fatalf("succeeded: %v", got)
		}
		// ids[45] back to the queue: its seq is below every later job's.
		back := h.job(tenant, ids[45])
		h.must(failOf(back, back.Life.LeaseID, tL+2, true), OutcomeFailed)
		later := idsOf([]Job{queueJob(h, tenant, "n1", "a", tL+3), queueJob(h, tenant, "n2", "a", tL+4)})
		if got, want := list(api.JobStatusQueued, 1), append([]string{ids[45]}, later...); !reflect.DeepEqual(got, want) {
			t.Fatalf("queued after a retry and two new jobs: %v, want %v", got, want)
		}
		if got := list(api.JobStatusRunning, 2); !reflect.DeepEqual(got, append(append([]string{}, ids[40:45]...), ids[46:]...)) {
			t.Fatalf("running after the retry: %v", got)
		}
	})
}

// HeldLeases answers the tenant's jobs whose current lease ID has the
// prefix, in lease-ID order; readers call it concurrently (each with its own
// lookups: under -race, a shared probe would be a race).
func TestHeldLeases(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		var ids []string
		for i := range 3 {
			ids = append(ids, queueJob(h, tenant, fmt.Sprintf("h%d", i), "a", tQ).ID)
		}
		queueJob(h, "globex", "g1", "a", tQ)
		l := leaseOf(tenant, 2, tL)
		l.LeaseIDs = []string{"req1-0", "req1-1"}
		h.lease(l)
		g := leaseOf("globex", 1, tL)
		g.LeaseIDs = []string{"req1-0"}
		h.lease(g)
		held := func(prefix string, now int64) []string {
			var got []string
			for _, j := range h.f.HeldLeases(tenant, prefix, now) {
				got = append(got, j.ID+"@"+j.Life.LeaseID)
			}
			return got
		}
		if got, want := held("req1-", tIn), []string{ids[0] + "@req1-0", ids[1] + "@req1-1"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("held %v, want %v", got, want)
		}
		if got := held("req2-", tIn); got != nil {
			t.Fatalf("another prefix holds %v", got)
		}
		if got := held("req1-", tOut+1); got != nil {
			t.Fatalf("expired leases hold %v", got)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					if n := len(h.f.HeldLeases(tenant, "req1-", tIn)); n != 2 {
						t.Errorf("a concurrent reader found %d jobs", n)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}
