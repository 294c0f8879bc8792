package ledger

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/once-dev/once/pkg/api"
)

// Cancel and Retry (actions.go): every transition and refusal, on both
// backends, which must agree byte for byte.

// actionOf is a JobAction of the tenant's job base.JobID under key k at now.
func actionOf(tn, k string, now int64) JobAction {
	return JobAction{Tenant: tn, JobID: base.JobID, Key: k, Fingerprint: "fp-" + k, Now: now,
		ExpiresAt: now + commitTTL, MaxEntries: 1000}
}

func cancelOf(k string, now int64) Cancel { return Cancel{actionOf(tenant, k, now)} }
func retryOf(k string, now int64) Retry   { return Retry{actionOf(tenant, k, now)} }

func TestCancelRetryByState(t *testing.T) {
	states := append(jobStates[:len(jobStates):len(jobStates)], struct {
		name  string
		setup func(h *harness)
		now   int64
	}{"cancelled", func(h *harness) {
		queueJob(h, tenant, key, "send_invoice", tQ)
		h.must(cancelOf("c0", tQ+1), OutcomeCancelled)
	}, tIn})
	const (
		NF = OutcomeNotFound
		CF = OutcomeConflict
	)
	type want struct {
		outcome Outcome
		state   JobState
	}
	rows := []struct {
		name string
		cmd  func(now int64) Command
		want []want // by state, in states' order
	}{
		{"cancel", func(now int64) Command { return cancelOf("k-action", now) }, []want{
			{OutcomeCancelled, JobCancelled}, {CF, JobRunning}, {CF, JobRunning}, {CF, JobSucceeded},
			{CF, JobFailed}, {CF, JobDead}, {CF, JobLegacy}, {NF, 0}, {OutcomeUnchanged, JobCancelled}}},
		{"retry", func(now int64) Command { return retryOf("k-action", now) }, []want{
			{CF, JobQueued}, {CF, JobRunning}, {CF, JobRunning}, {CF, JobSucceeded},
			{OutcomeRetried, JobQueued}, {OutcomeRetried, JobQueued}, {CF, JobLegacy}, {NF, 0}, {CF, JobCancelled}}},
		{"cancel, other tenant", func(now int64) Command { return Cancel{actionOf("globex", "k-action", now)} }, []want{
			{NF, JobQueued}, {NF, JobRunning}, {NF, JobRunning}, {NF, JobSucceeded},
			{NF, JobFailed}, {NF, JobDead}, {NF, JobLegacy}, {NF, 0}, {NF, JobCancelled}}},
		{"retry, other tenant", func(now int64) Command { return Retry{actionOf("globex", "k-action", now)} }, []want{
			{NF, JobQueued}, {NF, JobRunning}, {NF, JobRunning}, {NF, JobSucceeded},
			{NF, JobFailed}, {NF, JobDead}, {NF, JobLegacy}, {NF, 0}, {NF, JobCancelled}}},
	}
	for _, row := range rows {
		for i, st := range states {
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
					changed := res.Outcome == OutcomeCancelled || res.Outcome == OutcomeRetried
					if after := dumpTables(h.f); changed == reflect.DeepEqual(before, after) {
						t.Fatalf("%s: %v: the state changed: %v", store, res.Outcome, !changed)
					}
					j, ok := h.f.Job(tenant, base.JobID)
					if ok != (st.name != "unknown") || (ok && j.State() != w.state) {
						t.Fatalf("%s: job after %+v (%v), want state %v", store, j, ok, w.state)
					}
					if res.Job.ID != "" && !reflect.DeepEqual(res.Job, j) {
						t.Fatalf("%s: result's job %+v, stored %+v", store, res.Job, j)
					}
					if e, ok := h.f.Entry(tenant, "k-action"); ok != changed || (ok && (e.State != StateCommitted || e.JobID != base.JobID || e.Fingerprint != "fp-k-action")) {
						t.Fatalf("%s: the key's entry %+v (%v) after %v", store, e, ok, res.Outcome)
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

func TestCancelNeverLeased(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		queueJob(h, tenant, key, "send_invoice", tQ)
		res := h.must(cancelOf("c1", tIn), OutcomeCancelled)
		j := res.Job
		if j.State().String() != api.JobStatusCancelled || j.Life.FinishedAt != tIn || j.ExpiresAt != tIn+jobTTL || j.Life.Attempts != 0 {
			t.Fatalf("cancelled job %+v %+v", j, *j.Life)
		}
		if s := h.f.Stats(); s.Queued != 0 || s.Cancelled != 1 || s.Committed != 2 {
			t.Fatalf("stats %+v", s)
		}
		if ids := h.lease(leaseOf(tenant, 10, tIn+sec)); len(ids) != 0 {
			t.Fatalf("a cancelled job was leased: %v", ids)
		}
		// Listed by its state, and gone with its retention like any finished job.
		if jobs, _, _ := h.f.ListJobs(tenant, ListOptions{Status: api.JobStatusCancelled, Limit: 10}); len(jobs) != 1 || jobs[0].ID != base.JobID {
			t.Fatalf("list cancelled: %+v", jobs)
		}
		h.must(Expire{Now: tIn + jobTTL + commitTTL}, OutcomeExpired)
		if _, ok := h.f.Job(tenant, base.JobID); ok {
			t.Fatal("a cancelled job outlived its retention")
		}
		checkInvariants(t, h.f)
	})
}

// TestCancelRetryKeys: the key records the action; its repeat is a
// replay (never a second action), the key with another action is reused,
// another key on a cancelled job is idempotent by state.
func TestCancelRetryKeys(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		setupRunning(h)
		f := failOf(Job{Tenant: tenant, ID: base.JobID}, "L1", tL+sec, true)
		f.MaxAttempts = 1
		h.must(f, OutcomeFailed) // dead at its first attempt
		r := h.must(retryOf("r1", tIn), OutcomeRetried)
		if l := r.Job.Life; r.Job.State() != JobQueued || l.Attempts != 1 || l.RunAt != tIn || l.FinishedAt != 0 || r.Job.ExpiresAt != 0 ||
			l.LeaseID != "" || l.Error != "boom" {
			t.Fatalf("retried job %+v %+v", r.Job, *l)
		}
		// The repeat is a replay, whatever the job's state now.
		if rr := h.must(retryOf("r1", tIn+sec), OutcomeExists); !reflect.DeepEqual(rr.Job, r.Job) {
			t.Fatalf("replay %+v", rr.Job)
		}
		l := leaseOf(tenant, 1, tIn+2*sec)
		l.MaxAttempts = 1
		if ids := h.lease(l); len(ids) != 1 {
			t.Fatalf("the retried job was not leased: %v", ids)
		}
		f2 := failOf(Job{Tenant: tenant, ID: base.JobID}, l.LeaseIDs[0], tIn+3*sec, true)
		f2.MaxAttempts = 1
		if res := h.must(f2, OutcomeFailed); res.Job.State() != JobDead || res.Job.Life.Attempts != 2 {
			t.Fatalf("a retried dead job gets one more attempt: %+v", res.Job)
		}
		// The first retry's key again: a replay, not a second retry.
		if rr := h.must(retryOf("r1", tIn+4*sec), OutcomeExists); rr.Job.State() != JobDead {
			t.Fatalf("replay retried again: %+v", rr.Job)
		}
		// The key with another action: reused; a new key retries.
		c := cancelOf("r1", tIn+4*sec)
		c.Fingerprint = "cancel r1" // the gate's fingerprint names the action
		h.must(c, OutcomeKeyReused)
		h.must(retryOf("r2", tIn+5*sec), OutcomeRetried)
		// Submission with an action's key: reused, never a job.
		rs := reserve(tenant, "r2", tIn+6*sec)
		rs.Fingerprint = "submit r2"
		h.must(admit(rs), OutcomeKeyReused)

		// Cancel: replay by key, and by state with another key.
		h.must(cancelOf("c1", tIn+7*sec), OutcomeCancelled)
		h.must(cancelOf("c1", tIn+8*sec), OutcomeExists)
		h.must(cancelOf("c2", tIn+8*sec), OutcomeUnchanged)
		h.must(retryOf("r3", tIn+9*sec), OutcomeConflict)
		// The key's entry expires with its TTL; the job is still cancelled.
		h.must(Expire{Now: tIn + 8*sec + commitTTL}, OutcomeExpired)
		if _, ok := h.f.Entry(tenant, "c1"); ok {
			t.Fatal("the action's key outlived its TTL")
		}
		h.must(cancelOf("c1", tIn+commitTTL+9*sec), OutcomeUnchanged)
		checkInvariants(t, h.f)
	})
}

func TestCancelRetryBounds(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		queueJob(h, tenant, key, "send_invoice", tQ)
		c := cancelOf("c1", tIn)
		c.MaxEntries = 1 // the job's own key holds it
		h.must(c, OutcomeFull)
		c = cancelOf("c1", tIn)
		c.MaxTenantBytes = 1
		h.must(c, OutcomeTenantBytesFull)
		c = cancelOf("c1", tIn)
		c.MaxBytes = 1
		h.must(c, OutcomeBytesFull)
		if j := h.job(tenant, base.JobID); j.State() != JobQueued {
			t.Fatalf("a refused cancel changed the job: %v", j.State())
		}
		for _, bad := range []Command{
			Cancel{JobAction{JobID: "j", Key: "k", Fingerprint: "f", Now: tIn, ExpiresAt: tIn + 1, MaxEntries: 1}},
			Retry{JobAction{Tenant: "t", JobID: "j", Key: "k", Fingerprint: "f", Now: tIn, ExpiresAt: tIn, MaxEntries: 1}},
			Cancel{JobAction{Tenant: "t", JobID: "j", Key: "k", Fingerprint: "f", Now: tIn, ExpiresAt: tIn + 1}},
			Retry{JobAction{Tenant: "t", JobID: "j", Key: "k", Now: tIn, ExpiresAt: tIn + 1, MaxEntries: 1}},
		} {
			if res := h.apply(bad); res.Outcome != OutcomeInvalid || !errors.Is(res.Err, ErrInvalidCommand) {
				t.Fatalf("%+v: %v %v", bad, res.Outcome, res.Err)
			}
		}
		checkInvariants(t, h.f)
	})
}

func TestCancelRetryEncoding(t *testing.T) {
	for _, c := range []Command{cancelOf("k", tIn), retryOf("k2", tIn+1),
		Cancel{JobAction{Tenant: "t", JobID: "j", Key: "k", Fingerprint: "f", Now: -5, ExpiresAt: 7, MaxEntries: 1, MaxBytes: 9, MaxTenantBytes: 10}}} {
		b := Encode(c)
		if b[0] != byte(c.CommandType()) || b[1] != 1 {
			t.Fatalf("header % x", b[:2])
		}
		got, err := DecodeCommand(b)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip %+v: %+v %v", c, got, err)
		}
		if _, err := DecodeCommand(b[:len(b)-1]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated: %v", err)
		}
		v2 := append([]byte{b[0], 2}, b[2:]...)
		if _, err := DecodeCommand(v2); !errors.Is(err, ErrUnsupportedVersion) { // another version
			t.Fatalf("version 2: %v", err)
		}
	}
	if TypeCancel != 0x11 || TypeRetry != 0x12 || TypeCancel.String() != "cancel" || TypeRetry.String() != "retry" {
		t.Fatal("the command types are part of the log format")
	}
}

// TestSnapshotCancelled: a snapshot with cancelled and retried jobs
// restores to the same state (and the same bytes), on both backends.
func TestSnapshotCancelled(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		setupRunning(h)
		h.must(failOf(Job{Tenant: tenant, ID: base.JobID}, "L1", tL+sec, false), OutcomeFailed)
		h.must(retryOf("r1", tIn), OutcomeRetried)
		j2 := queueJob(h, tenant, "key-2", "send_invoice", tIn)
		h.must(Cancel{JobAction{Tenant: tenant, JobID: j2.ID, Key: "c2", Fingerprint: "f", Now: tIn + sec, ExpiresAt: tIn + commitTTL, MaxEntries: 100}}, OutcomeCancelled)
		snap := persist(t, h.f)
		g := restore(t, snap)
		if !bytes.Equal(persist(t, g), snap) {
			t.Fatal("a restored FSM persists different bytes")
		}
		if !reflect.DeepEqual(dumpTables(g), dumpTables(h.f)) {
			t.Fatal("the restored tables differ")
		}
		if s := g.Stats(); s.Cancelled != 1 || s.Queued != 1 {
			t.Fatalf("restored stats %+v", s)
		}
		checkInvariants(t, g)
	})
}

// TestDiskReopenCancelled: a store holding cancelled jobs reopens with
// them counted (its counters record the cancelled jobs after the claims).
func TestDiskReopenCancelled(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, f: f}
	queueJob(h, tenant, key, "send_invoice", tQ)
	h.must(cancelOf("c1", tIn), OutcomeCancelled)
	before := persist(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := openFSM(t, dir, Options{})
	if !bytes.Equal(before, persist(t, g)) {
		t.Fatal("reopened state differs")
	}
	if s := g.Stats(); s.Cancelled != 1 || s.Jobs != 1 || s.Queued != 0 {
		t.Fatalf("reopened stats %+v", s)
	}
	checkInvariants(t, g)
}

// TestActionKeyOutlivesTheJob: a key that outlives its job's retention
// answers not found, never a replay of a job that is gone.
func TestActionKeyOutlivesTheJob(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		queueJob(h, tenant, key, "send_invoice", tQ)
		c := cancelOf("c1", tIn)
		c.ExpiresAt = tIn + 2*jobTTL
		h.must(c, OutcomeCancelled)
		h.must(cancelOf("c1", tIn+jobTTL), OutcomeNotFound) // retention ended, not yet removed
		h.must(Expire{Now: tIn + jobTTL}, OutcomeExpired)
		h.must(cancelOf("c1", tIn+jobTTL+1), OutcomeNotFound)
		if _, ok := h.f.Entry(tenant, "c1"); !ok {
			t.Fatal("the key's entry went with the job")
		}
		checkInvariants(t, h.f)
	})
}
