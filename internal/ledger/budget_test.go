package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Byte budgets of the job lifecycle: a Lease bounded by the size of the
// jobs it hands out (Lease.MaxBytes), results and errors charged against
// the ledger's and the tenant's budgets and refused past them (Complete and
// Fail version 2), list pages bounded by results too.

// queueSized queues a job of tenant whose payload is n bytes of JSON.
func queueSized(h *harness, tenant, key string, n int, now int64) Job {
	h.t.Helper()
	r := reserve(tenant, key, now)
	r.Request.Payload = jsonOfSize(n)
	return h.must(admitWith(r, QueueCommit(commit(r, now))), OutcomeCommitted).Job
}

// jsonOfSize is a JSON string of exactly n bytes (n >= 2).
func jsonOfSize(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
}

// TestLeaseMaxBytes: a Lease hands out jobs in order only while their
// sizes fit MaxBytes, the first always; the others keep their place and
// their attempts, and the next Lease hands them out.
func TestLeaseMaxBytes(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		var ids []string
		for i := range 5 {
			ids = append(ids, queueSized(h, tenant, fmt.Sprintf("k%d", i), 10_000, tQ+int64(i)).ID)
		}
		// The fourth job is larger than the whole budget.
		one := uint64(ListJobBytes(ptr(h.job(tenant, ids[0]))))
		l := leaseOf(tenant, 5, tL)
		l.MaxBytes = 2*one + one/2 // two jobs fit, not three
		if got := h.lease(l); !slices.Equal(got, ids[:2]) {
			t.Fatalf("leased %v, want %v", got, ids[:2])
		}
		for _, id := range ids[2:] {
			if j := h.job(tenant, id); j.State() != JobQueued || j.Life.Attempts != 0 {
				t.Fatalf("job %s not handed out is %v with %d attempts", id, j.State(), j.Life.Attempts)
			}
		}
		l = leaseOf(tenant, 5, tL+1)
		l.MaxBytes = one / 2 // not even one fits: the first is handed out anyway
		if got := h.lease(l); !slices.Equal(got, ids[2:3]) {
			t.Fatalf("leased %v, want %v", got, ids[2:3])
		}
		// The reclaim of expired leases is bounded alike, in its order.
		l = leaseOf(tenant, 5, tOut+10*sec)
		l.MaxBytes = one + one/2
		if got := h.lease(l); !slices.Equal(got, ids[:1]) {
			t.Fatalf("reclaimed %v, want %v", got, ids[:1])
		}
		if j := h.job(tenant, ids[1]); j.State() != JobRunning || j.Life.Attempts != 1 || j.Life.LeaseExpiresAt > tOut+10*sec {
			t.Fatalf("the expired job not reclaimed: %+v %+v", j, j.Life)
		}
		// Without MaxBytes (a version-1 or -2 Lease), as before: all.
		l = leaseOf(tenant, 5, tOut+11*sec)
		if got := h.lease(l); len(got) != 4 {
			t.Fatalf("leased %v without a budget", got)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// running queues a job with an n-byte payload and leases it under lease
// "L-"+key.
func running(h *harness, key string, n int) Job {
	h.t.Helper()
	j := queueSized(h, tenant, key, n, tQ)
	l := leaseOf(tenant, 1, tL)
	l.LeaseIDs = []string{"L-" + key}
	l.Types = []string{j.Type}
	if got := h.lease(l); len(got) != 1 || got[0] != j.ID {
		h.t.Fatalf("leased %v, want %s", got, j.ID)
	}
	return h.job(tenant, j.ID)
}

// TestCompleteWithinBudgets: a result that would bring the tenant's or the
// ledger's bytes over its budget is refused, nothing changing (the job
// still RUNNING under its lease, the bytes as they were); one that fits is
// charged, and released when the job goes.
func TestCompleteWithinBudgets(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		j := running(h, "k0", 100)
		queueSized(h, "globex", "g0", 100, tQ) // another tenant's bytes
		st := h.f.Stats()
		mine := h.f.s.tenantBytes[tenant]
		c := Complete{Tenant: tenant, JobID: j.ID, LeaseID: "L-k0", Result: jsonOfSize(5000), Now: tL + sec,
			MaxTenantBytes: mine + 4999, MaxBytes: st.Bytes + 1<<20}
		if res := h.must(c, OutcomeTenantBytesFull); res.Job.State() != JobRunning {
			t.Fatalf("refused completion answers %+v", res.Job)
		}
		c.MaxTenantBytes, c.MaxBytes = mine+1<<20, st.Bytes+4999
		h.must(c, OutcomeBytesFull)
		if got := h.job(tenant, j.ID); got.State() != JobRunning || got.Life.Result != nil || h.f.Stats().Bytes != st.Bytes {
			t.Fatalf("a refused completion changed the job %+v or the bytes %d → %d", got.Life, st.Bytes, h.f.Stats().Bytes)
		}
		// It fits exactly: charged.
		c.MaxBytes = st.Bytes + 5000
		res := h.must(c, OutcomeCompleted)
		if got := h.f.Stats().Bytes; got != st.Bytes+5000 || h.f.s.tenantBytes[tenant] != mine+5000 {
			t.Fatalf("bytes %d, want %d", got, st.Bytes+5000)
		}
		// The same completion again answers the job, budgets or not.
		c.MaxBytes = 1
		if again := h.must(c, OutcomeUnchanged); !bytes.Equal(again.Job.Life.Result, res.Job.Life.Result) {
			t.Fatal("the repeated completion answers another job")
		}
		// The job goes after its retention: its bytes with it (must checks
		// the totals against the jobs and entries left).
		before := h.f.Stats().Bytes
		h.must(Expire{Now: res.Job.ExpiresAt}, OutcomeExpired)
		if _, ok := h.f.Job(tenant, j.ID); ok || h.f.Stats().Bytes > before-jobBytes(100)-5000 {
			t.Fatalf("bytes %d after the job went (%d before)", h.f.Stats().Bytes, before)
		}
	})
}

// TestFailWithinBudgets: a failure's error is charged and bounded as a
// result is; an error that does not grow the job is never refused.
func TestFailWithinBudgets(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		j := running(h, "k0", 100)
		st := h.f.Stats()
		f := failOf(j, "L-k0", tL+sec, true)
		f.Error = strings.Repeat("e", 3000)
		f.MaxTenantBytes = h.f.s.tenantBytes[tenant] + 2999
		h.must(f, OutcomeTenantBytesFull)
		f.MaxTenantBytes, f.MaxBytes = 0, st.Bytes+2999
		h.must(f, OutcomeBytesFull)
		if got := h.job(tenant, j.ID); got.State() != JobRunning || got.Life.Error != "" || h.f.Stats().Bytes != st.Bytes {
			t.Fatalf("a refused failure changed the job %+v or the bytes", got.Life)
		}
		f.MaxBytes = st.Bytes + 3000
		if res := h.must(f, OutcomeFailed); res.Job.State() != JobQueued || h.f.Stats().Bytes != st.Bytes+3000 {
			t.Fatalf("failure: %v, bytes %d", res.Job.State(), h.f.Stats().Bytes)
		}
		// Leased again (its error kept, charged), then failed with a
		// shorter error on a ledger over its budget: accepted, released.
		l := leaseOf(tenant, 1, f.RetryAt)
		l.LeaseIDs = []string{"L2"}
		h.lease(l)
		f2 := failOf(j, "L2", f.RetryAt+sec, false)
		f2.Error, f2.MaxBytes, f2.MaxTenantBytes = "short", 1, 1
		if res := h.must(f2, OutcomeFailed); res.Job.State() != JobFailed || h.f.Stats().Bytes != st.Bytes+5 {
			t.Fatalf("failure: %v, bytes %d, want %d", res.Job.State(), h.f.Stats().Bytes, st.Bytes+5)
		}
	})
}

// TestListJobsBoundedByResults: a page's bytes count results and errors,
// so a page of jobs with large results ends early with a cursor.
func TestListJobsBoundedByResults(t *testing.T) {
	onBoth(t, func(t *testing.T, h *harness) {
		var ids []string
		for i := range 3 {
			j := running(h, fmt.Sprintf("k%d", i), 100)
			h.must(Complete{Tenant: tenant, JobID: j.ID, LeaseID: "L-" + j.Key, Result: jsonOfSize(50_000), Now: tL + sec}, OutcomeCompleted)
			ids = append(ids, j.ID)
		}
		opts := ListOptions{Status: "succeeded", MaxBytes: 120_000}
		jobs, _, more := h.f.ListJobs(tenant, opts)
		if len(jobs) != 2 || !more {
			t.Fatalf("a page of %d jobs (more %v) within %d bytes of 50 kB results", len(jobs), more, opts.MaxBytes)
		}
		got, pages := listAll(t, h.f, tenant, opts)
		if !slices.Equal(got, ids) || pages != 2 {
			t.Fatalf("listed %v in %d pages", got, pages)
		}
	})
}
