package ledger

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// appendJobWithStatus writes j in the job record's earlier layout, which
// stored the job's status (its state's name) as a string after datacenters
// and had no life flag.
func appendJobWithStatus(b []byte, j *Job) []byte {
	b = appendString(b, j.Tenant)
	b = appendString(b, j.ID)
	b = appendString(b, j.Key)
	b = appendString(b, j.Type)
	b = appendBytes(b, j.Payload)
	b = appendStrings(b, j.Datacenters)
	b = appendString(b, j.State().String())
	b = appendInt64(b, j.CreatedAt)
	b = appendUvarint(b, j.Seq)
	b = appendInt64(b, j.ExpiresAt)
	l := j.Life
	if l == nil {
		return b
	}
	b = appendUvarint(b, uint64(l.State))
	b = appendUvarint(b, l.Attempts)
	b = appendInt64(b, l.RunAt)
	b = appendString(b, l.LeaseID)
	b = appendString(b, l.Holder)
	b = appendInt64(b, l.LeaseExpiresAt)
	b = appendInt64(b, l.Retention)
	b = appendInt64(b, l.FinishedAt)
	b = appendBytes(b, l.Result)
	return appendString(b, l.Error)
}

// A job record of the layout that stored the status fails to decode, in a
// snapshot (ErrBadSnapshot) and in the store (ErrStore), for a legacy job
// and a job in every lifecycle state: never read as a job of this layout.
// The same jobs in this layout decode as they were.
func TestJobRecordWithStatusIsRefused(t *testing.T) {
	jobs := []*Job{{Tenant: tenant, ID: "legacy", Key: "k0", Type: "demo", Payload: []byte(`{"n":1}`),
		Datacenters: []string{"dc1"}, CreatedAt: t0, Seq: 7, ExpiresAt: t0 + jobTTL}}
	for st := JobQueued; st <= JobCancelled; st++ {
		l := &JobLife{State: st, Attempts: 1, RunAt: t0, Retention: jobTTL}
		j := &Job{Tenant: tenant, ID: st.String(), Key: "k-" + st.String(), Type: "demo", Payload: []byte(`{"n":2}`),
			Datacenters: []string{"dc1", "dc2"}, CreatedAt: t0, Seq: 8 + uint64(st), Life: l}
		switch {
		case st == JobRunning:
			l.LeaseID, l.Holder, l.LeaseExpiresAt = "lease-1", "worker-1", t0+leaseTTL
		case st.Finished():
			l.FinishedAt, j.ExpiresAt, l.Error = t0+sec, t0+sec+jobTTL, "boom"
		}
		jobs = append(jobs, j)
	}
	for _, j := range jobs {
		for _, base := range []error{ErrBadSnapshot, ErrStore} {
			d := &decoder{b: appendJob(nil, j), base: base}
			if got := decodeJob(d); d.finish() != nil || !reflect.DeepEqual(got, j) {
				t.Fatalf("job %s: the record decodes as %+v (%v), want %+v", j.ID, got, d.err, j)
			}
			d = &decoder{b: appendJobWithStatus(nil, j), base: base}
			if got := decodeJob(d); !errors.Is(d.finish(), base) {
				t.Fatalf("job %s: the record with its status decodes as %+v (%v), want %v", j.ID, got, d.err, base)
			}
		}
		if _, err := storeValue(decodeJob)(appendJobWithStatus(nil, j)); !errors.Is(err, ErrStore) {
			t.Fatalf("job %s: the store's value with its status: %v, want ErrStore", j.ID, err)
		}
	}
}

// A snapshot whose job records have the layout that stored the status is
// refused by Restore (ErrBadSnapshot), the FSM's state kept; the same
// snapshot in this layout restores.
func TestSnapshotWithStatusInJobRecordsIsRefused(t *testing.T) {
	h := newHarnessOn(t, "memory")
	legacyJob(h, tenant, "legacy", tQ)
	queueJob(h, tenant, "done", "demo", tQ)
	queueJob(h, tenant, "queued", "demo", tQ+1)
	l := leaseOf(tenant, 1, tL)
	done := h.lease(l)
	h.must(Complete{Tenant: tenant, JobID: done[0], LeaseID: l.LeaseIDs[0], Result: []byte(`{}`), Now: tL + 1}, OutcomeCompleted)
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	s := snap.(*Snapshot)
	var good, old bytes.Buffer
	if err := s.PersistTo(&good); err != nil {
		t.Fatal(err)
	}
	s.jobs = treeRecords[*Job]{s.jobs.(treeRecords[*Job]).tree, appendJobWithStatus}
	if err := s.PersistTo(&old); err != nil {
		t.Fatal(err)
	}
	f := newHarnessOn(t, "memory").f
	if err := f.Restore(io.NopCloser(bytes.NewReader(old.Bytes()))); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("restore of job records with their status: %v, want ErrBadSnapshot", err)
	}
	if st := f.Stats(); st.Jobs != 0 {
		t.Fatalf("a refused restore left %d jobs", st.Jobs)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(good.Bytes()))); err != nil {
		t.Fatalf("restore of the same snapshot in this layout: %v", err)
	}
	if st := f.Stats(); st.Jobs != 3 || st.Queued != 1 || st.Succeeded != 1 {
		t.Fatalf("restored %+v", st)
	}
}
