package manager

import (
	"errors"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// The worker routes at the leader: a lease that waits is answered as soon as
// a job is committed (long poll), with the job in the API's form; reads
// show its state; the same completion again answers the same job; an empty
// wait ends with no lease.
func TestWorkersLongPollAndReads(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	m := tc.mgrs[tc.leader()]
	ctx := ctxT(t)

	empty, err := m.Lease(ctx, &rpc.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1, Wait: 200 * time.Millisecond})
	if err != nil || len(empty.Leases) != 0 {
		t.Fatalf("a lease with nothing queued: %+v %v", empty, err)
	}

	got := make(chan *rpc.LeaseResponse, 1)
	errs := make(chan error, 1)
	go func() {
		r, err := m.Lease(ctx, &rpc.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 2, Wait: 30 * time.Second})
		got <- r
		errs <- err
	}()
	id := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	var r *rpc.LeaseResponse
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting lease was not answered when a job was committed")
	}
	if err := <-errs; err != nil || len(r.Leases) != 1 {
		t.Fatalf("long poll: %+v %v", r, err)
	}
	l := r.Leases[0]
	if l.Job.JobID != id || l.Job.State != api.JobStatusRunning || l.Job.Status != api.JobStatusCommitted || l.Attempt != 1 || l.LeaseID == "" {
		t.Fatalf("lease %+v", l)
	}
	job, err := m.GetJob(ctx, "acme", id)
	if err != nil || job.State != api.JobStatusRunning || job.Attempts != 1 {
		t.Fatalf("read of a running job: %+v %v", job, err)
	}
	done, err := m.Complete(ctx, &rpc.CompleteRequest{Tenant: "acme", JobID: id, LeaseID: l.LeaseID, Result: []byte(`{"ok":1}`)})
	if err != nil || done.State != api.JobStatusSucceeded || string(done.Result) != `{"ok":1}` {
		t.Fatalf("complete: %+v %v", done, err)
	}
	again, err := m.Complete(ctx, &rpc.CompleteRequest{Tenant: "acme", JobID: id, LeaseID: l.LeaseID, Result: []byte(`{"ok":1}`)})
	if err != nil || again.State != api.JobStatusSucceeded {
		t.Fatalf("the same completion again: %+v %v", again, err)
	}
	if _, err := m.Heartbeat(ctx, &rpc.HeartbeatRequest{Tenant: "acme", JobID: id, LeaseID: l.LeaseID}); err == nil || !isCode(err, rpc.CodeLeaseLost) {
		t.Fatalf("heartbeat of a finished job: %v", err)
	}
	list, err := m.ListJobs(ctx, &rpc.ListJobsRequest{Tenant: "acme", Status: api.JobStatusSucceeded, Limit: 10})
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].JobID != id {
		t.Fatalf("succeeded jobs: %+v %v", list, err)
	}
	list, err = m.ListJobs(ctx, &rpc.ListJobsRequest{Tenant: "acme", Status: api.JobStatusCommitted, Limit: 10})
	if err != nil || len(list.Jobs) != 1 {
		t.Fatalf("status=committed lists every job: %+v %v", list, err)
	}
}

func isCode(err error, code rpc.Code) bool {
	var e *rpc.Error
	return errors.As(err, &e) && e.Code == code
}
