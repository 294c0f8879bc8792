package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// Cancel and retry at the leader, on a three-manager cluster: every answer,
// the replays by key and by state, the refusals, a waiting lease woken by a
// retry, and every manager's ledger agreeing.
func TestCancelRetry(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.JobMaxAttempts = 1 })
	queueOn(tc)
	ctx := ctxT(t)
	a := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	b := submitJob(t, tc, "host1.dc1:1:2:0123456789abcdef", "email")
	l := tc.leader()
	m := tc.mgrs[l]
	act := func(tenant, id, key string) *rpcpb.JobActionRequest {
		return &rpcpb.JobActionRequest{Tenant: tenant, JobId: id, Key: key, Fingerprint: "fp " + key}
	}

	// A follower refuses: the leader proposes.
	if _, err := tc.mgrs[(l+1)%3].Cancel(ctx, act("acme", a, "c1")); !errors.Is(err, rpc.ErrNotLeader) {
		t.Fatalf("cancel at a follower: %v", err)
	}
	c1, err := m.Cancel(ctx, act("acme", a, "c1"))
	if err != nil || c1.Replayed || c1.Job.JobId != a || c1.Job.State != api.JobStatusCancelled || c1.Job.Attempts != 0 {
		t.Fatalf("cancel: %+v %v", c1, err)
	}
	// The same key: a replay; another key: idempotent by state.
	for _, key := range []string{"c1", "c2"} {
		again, err := m.Cancel(ctx, act("acme", a, key))
		if err != nil || !again.Replayed || again.Job.State != api.JobStatusCancelled {
			t.Fatalf("cancel again with %s: %+v %v", key, again, err)
		}
	}
	// The key with another request; another tenant; an unknown job.
	if _, err := m.Retry(ctx, &rpcpb.JobActionRequest{Tenant: "acme", JobId: a, Key: "c1", Fingerprint: "another"}); !errors.Is(err, rpc.ErrRequestReused) {
		t.Fatalf("the key with another request: %v", err)
	}
	if _, err := m.Cancel(ctx, act("globex", b, "g1")); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("another tenant's job: %v", err)
	}
	if _, err := m.Retry(ctx, act("acme", "no-such-job", "r0")); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("an unknown job: %v", err)
	}
	if _, err := m.Retry(ctx, act("acme", a, "r0")); !errors.Is(err, rpc.ErrConflict) {
		t.Fatalf("retry of a cancelled job: %v", err)
	}
	if _, err := m.Cancel(ctx, &rpcpb.JobActionRequest{Tenant: "acme", JobId: a}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("no key: %v", err)
	}

	// The cancelled job is never leased: b is.
	jobs, err := m.leaseNow(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w1", MaxJobs: 10})
	if err != nil || len(jobs) != 1 || jobs[0].ID != b {
		t.Fatalf("lease: %+v %v", jobs, err)
	}
	if _, err := m.Cancel(ctx, act("acme", b, "c3")); !errors.Is(err, rpc.ErrConflict) {
		t.Fatalf("cancel of a running job: %v", err)
	}
	if _, err := m.Retry(ctx, act("acme", b, "r1")); !errors.Is(err, rpc.ErrConflict) {
		t.Fatalf("retry of a running job: %v", err)
	}
	dead, err := m.FailJob(ctx, "acme", b, jobs[0].Life.LeaseID, "boom", true)
	if err != nil || dead.State() != ledger.JobDead {
		t.Fatalf("fail at the last attempt: %+v %v", dead, err)
	}

	// A lease waiting for work takes the retried job at once.
	got := make(chan *rpcpb.LeaseResponse, 1)
	errs := make(chan error, 1)
	go func() {
		r, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w2", MaxJobs: 1, WaitNanos: int64(15 * time.Second)})
		got <- r
		errs <- err
	}()
	r1, err := m.Retry(ctx, act("acme", b, "r1"))
	if err != nil || r1.Replayed || r1.Job.State != api.JobStatusQueued || r1.Job.Attempts != 1 || r1.Job.Error != "boom" {
		t.Fatalf("retry of a dead job: %+v %v", r1, err)
	}
	var lr *rpcpb.LeaseResponse
	select {
	case lr = <-got:
	case <-time.After(20 * time.Second): // past the lease's own 15 s wait: the goroutine has ended
		t.Fatal("the waiting lease was not given the retried job")
	}
	if err := <-errs; err != nil || len(lr.Leases) != 1 || lr.Leases[0].Job.JobId != b || lr.Leases[0].Attempt != 2 {
		t.Fatalf("lease of the retried job: %+v %v", lr, err)
	}
	done, err := m.CompleteJob(ctx, "acme", b, lr.Leases[0].LeaseId, []byte(`{"ok":true}`))
	if err != nil || done.State() != ledger.JobSucceeded {
		t.Fatalf("complete the retried job: %+v %v", done, err)
	}
	// The retry's key again: a replay (the job as it is now), not a retry.
	again, err := m.Retry(ctx, act("acme", b, "r1"))
	if err != nil || !again.Replayed || again.Job.State != api.JobStatusSucceeded {
		t.Fatalf("retry replayed: %+v %v", again, err)
	}
	if _, err := m.Retry(ctx, act("acme", b, "r2")); !errors.Is(err, rpc.ErrConflict) {
		t.Fatalf("retry of a succeeded job: %v", err)
	}

	// Every manager's ledger agrees.
	want := m.fsm.Stats()
	if want.Cancelled != 1 || want.Succeeded != 1 {
		t.Fatalf("stats %+v", want)
	}
	tc.waitFSMsApplied()
	for i, o := range tc.mgrs {
		ja, _ := o.fsm.Job("acme", a)
		if jb, _ := o.fsm.Job("acme", b); ja.State() != ledger.JobCancelled || jb.State() != ledger.JobSucceeded {
			t.Fatalf("manager %d: %v %v", i, ja.State(), jb.State())
		}
	}
}
