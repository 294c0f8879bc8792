package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
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

	empty, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1, WaitNanos: int64(200 * time.Millisecond)})
	if err != nil || len(empty.Leases) != 0 {
		t.Fatalf("a lease with nothing queued: %+v %v", empty, err)
	}

	got := make(chan *rpcpb.LeaseResponse, 1)
	errs := make(chan error, 1)
	go func() {
		r, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 2, WaitNanos: int64(30 * time.Second)})
		got <- r
		errs <- err
	}()
	id := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	var r *rpcpb.LeaseResponse
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting lease was not answered when a job was committed")
	}
	if err := <-errs; err != nil || len(r.Leases) != 1 {
		t.Fatalf("long poll: %+v %v", r, err)
	}
	l := r.Leases[0]
	if l.Job.JobId != id || l.Job.State != api.JobStatusRunning || l.Job.Status != api.JobStatusCommitted || l.Attempt != 1 || l.LeaseId == "" {
		t.Fatalf("lease %+v", l)
	}
	job, err := m.GetJob(ctx, "acme", id)
	if err != nil || job.State != api.JobStatusRunning || job.Attempts != 1 {
		t.Fatalf("read of a running job: %+v %v", job, err)
	}
	done, err := m.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "acme", JobId: id, LeaseId: l.LeaseId, Result: []byte(`{"ok":1}`)})
	if err != nil || done.State != api.JobStatusSucceeded || string(done.Result) != `{"ok":1}` {
		t.Fatalf("complete: %+v %v", done, err)
	}
	again, err := m.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "acme", JobId: id, LeaseId: l.LeaseId, Result: []byte(`{"ok":1}`)})
	if err != nil || again.State != api.JobStatusSucceeded {
		t.Fatalf("the same completion again: %+v %v", again, err)
	}
	if _, err := m.Heartbeat(ctx, &rpcpb.HeartbeatRequest{Tenant: "acme", JobId: id, LeaseId: l.LeaseId}); err == nil || !isCode(err, rpc.CodeLeaseLost) {
		t.Fatalf("heartbeat of a finished job: %v", err)
	}
	list, err := m.ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "acme", Status: api.JobStatusSucceeded, Limit: 10})
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].JobId != id {
		t.Fatalf("succeeded jobs: %+v %v", list, err)
	}
	list, err = m.ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "acme", Status: api.JobStatusCommitted, Limit: 10})
	if err != nil || len(list.Jobs) != 1 {
		t.Fatalf("status=committed lists every job: %+v %v", list, err)
	}
}

func isCode(err error, code rpc.Code) bool {
	var e *rpc.Error
	return errors.As(err, &e) && e.Code == code
}

// A waiting lease is answered when a lease it could take over expires (its
// job reclaimed at once), and, empty, when this manager stops leading; the
// wait is woken by those events, not by polling the ledger.
func TestLongPollWakesOnLeaseExpiryAndLeadershipEnd(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.JobLeaseMin, c.JobLeaseDefault = 100*time.Millisecond, 10*time.Minute })
	queueOn(tc)
	ctx := ctxT(t)
	id := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	m := tc.mgrs[tc.leader()]
	first, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w1", MaxJobs: 1, LeaseForNanos: int64(300 * time.Millisecond)})
	if err != nil || len(first.Leases) != 1 {
		t.Fatalf("first lease: %+v %v", first, err)
	}

	// A context that outlives the test's waits below (ctxT's does not).
	lctx, lcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer lcancel()
	expired := make(chan leaseReply, 1)
	wg.Go(func() {
		r, err := m.Lease(lctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w2", MaxJobs: 1, WaitNanos: int64(time.Minute)})
		expired <- leaseReply{r, err}
	})
	select {
	case a := <-expired:
		if a.err != nil || len(a.r.Leases) != 1 || a.r.Leases[0].Job.JobId != id || a.r.Leases[0].Attempt != 2 {
			t.Fatalf("the waiting lease after w1's lease expired: %+v %v", a.r, a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a lease waiting a minute was not given the job whose lease expired")
	}

	waiting := waitingLease(t, m, time.Minute)
	l := tc.leader()
	next := (l + 1) % 3
	if err := tc.mgrs[l].raft.LeadershipTransferToServer(raft.ServerID(tc.cfgs[next].NodeID), raft.ServerAddress(tc.cfgs[next].RaftAdvertise)).Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	select {
	case a := <-waiting:
		if a.err != nil || len(a.r.Leases) != 0 {
			t.Fatalf("a lease waiting at a former leader: %+v %v", a.r, a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a lease waiting a minute at a manager that stopped leading was not answered")
	}
}

// A lease asked with an idempotency key is answered once at the leader: a
// repeat of the key (a retry through any gate) gets the same leases, marked
// replayed, and leases nothing more; the key with another request is
// request_reused; keys are per tenant. A caller that leaves while its lease
// is applied does not lose it: the retry is given its jobs.
func TestLeaseWithIdempotencyKeyIsAnsweredOnce(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	m := tc.mgrs[tc.leader()]
	ctx := ctxT(t)
	submitJobs(t, tc, 4, "email")
	req := &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 2, Request: "lease-1", Fingerprint: "f1"}
	first, err := m.Lease(ctx, req)
	if err != nil || len(first.Leases) != 2 || first.Replayed {
		t.Fatalf("first lease: %+v %v", first, err)
	}
	again, err := m.Lease(ctx, req)
	if err != nil || !again.Replayed || !leasesEqual(again.Leases, first.Leases) {
		t.Fatalf("the same key again: %+v %v; want %+v replayed", again, err, first.Leases)
	}
	other := proto.Clone(req).(*rpcpb.LeaseRequest)
	other.Fingerprint = "f2"
	if _, err := m.Lease(ctx, other); !isCode(err, rpc.CodeRequestReused) {
		t.Fatalf("the key with another request: %v, want request_reused", err)
	}
	elsewhere := proto.Clone(req).(*rpcpb.LeaseRequest)
	elsewhere.Tenant = "globex"
	if r, err := m.Lease(ctx, elsewhere); err != nil || r.Replayed || len(r.Leases) != 0 {
		t.Fatalf("the key in a tenant without jobs: %+v %v", r, err)
	}

	// The caller has gone before the answer: the lease is applied all the
	// same and its retry is given it.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	lost := rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1, Request: "lease-2", Fingerprint: "f"}
	if _, err := m.Lease(gone, &lost); err == nil {
		t.Log("the lease was answered before the cancelled caller noticed")
	}
	retry, err := m.Lease(ctx, &lost)
	if err != nil || len(retry.Leases) != 1 || !retry.Replayed {
		t.Fatalf("the retry of a lease whose caller left: %+v %v; want its one job, replayed", retry, err)
	}

	// Two jobs were leased by "lease-1" and one by "lease-2": one is left.
	rest, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 10})
	if err != nil || len(rest.Leases) != 1 {
		t.Fatalf("after the replays, %+v %v; want the one job no lease took", rest, err)
	}
	if n := promtest.ToFloat64(m.metrics.leaseReplays); n != 2 {
		t.Fatalf("once_manager_lease_replays_total %v, want 2", n)
	}
	leasedOnce(t, first.Leases, retry.Leases, rest.Leases)
}

// leasedOnce fails the test when a job is in two of the answers' leases.
func leasedOnce(t *testing.T, answers ...[]*rpcpb.Lease) {
	t.Helper()
	seen := map[string]bool{}
	for _, ls := range answers {
		for _, l := range ls {
			if seen[l.Job.JobId] {
				t.Fatalf("job %s leased twice", l.Job.JobId)
			}
			seen[l.Job.JobId] = true
		}
	}
}

// submitJobs submits n jobs of type typ for the tenant acme.
func submitJobs(t *testing.T, tc *testCluster, n int, typ string) {
	t.Helper()
	for i := range n {
		submitJob(t, tc, fmt.Sprintf("host1.dc1:%d:1:0123456789abcdef", i+1), typ)
	}
}

// A lease asked with an idempotency key whose leader dies before the answer
// reaches the worker: the retry, at the next leader (which never saw the
// first attempt), is given the same jobs under the same leases, from the
// ledger, and no job is leased twice.
func TestLeaseRetriedAfterLeaderChange(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	ctx := ctxT(t)
	submitJobs(t, tc, 4, "email")
	req := rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 2, Request: "lease-1", Fingerprint: "f1"}
	first, err := tc.mgrs[l].Lease(ctx, &req)
	if err != nil || len(first.Leases) != 2 || first.Replayed {
		t.Fatalf("first lease: %+v %v", first, err)
	}
	tc.stop(l) // the answer is lost with it
	nl := tc.leader()
	retry, err := tc.mgrs[nl].Lease(ctx, &req)
	if err != nil || !retry.Replayed || !leasesEqual(retry.Leases, first.Leases) {
		t.Fatalf("the retry at the next leader: %+v %v; want %+v replayed", retry, err, first.Leases)
	}
	if n := promtest.ToFloat64(tc.mgrs[nl].metrics.leaseReplays); n != 1 {
		t.Fatalf("once_manager_lease_replays_total %v, want 1", n)
	}
	// The two jobs the first attempt did not lease are left to others.
	rest, err := tc.mgrs[nl].Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 10})
	if err != nil || len(rest.Leases) != 2 {
		t.Fatalf("after the replay, %+v %v; want the two jobs no lease took", rest, err)
	}
	leasedOnce(t, first.Leases, rest.Leases)
}

// leasesEqual reports whether a and b are the same leases, in order.
func leasesEqual(a, b []*rpcpb.Lease) bool {
	return slices.EqualFunc(a, b, func(x, y *rpcpb.Lease) bool { return proto.Equal(x, y) })
}

// A job failed with a retry goes back to the queue: a lease waiting on an
// empty queue is given it once its backoff ends, not when its own wait ends
// (the job is queued as a commit queues one, and the waiting lease must
// hear of it).
func TestLongPollTakesAJobFailedWithARetry(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.JobBackoffMin, c.JobBackoffMax = 10*time.Millisecond, 10*time.Millisecond })
	queueOn(tc)
	ctx := ctxT(t)
	id := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	m := tc.mgrs[tc.leader()]
	first, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w1", MaxJobs: 1, LeaseForNanos: int64(10 * time.Minute)})
	if err != nil || len(first.Leases) != 1 {
		t.Fatalf("first lease: %+v %v", first, err)
	}

	// On a leader that does not hear of the failed job, the wait ends empty.
	waiting := waitingLease(t, m, 15*time.Second)
	failed, err := m.Fail(ctx, &rpcpb.FailRequest{Tenant: "acme", JobId: id, LeaseId: first.Leases[0].LeaseId, Error: "smtp timeout", Retry: true})
	if err != nil || failed.State != api.JobStatusQueued {
		t.Fatalf("fail with a retry: %+v %v", failed, err)
	}
	a := <-waiting
	if a.err != nil || len(a.r.Leases) != 1 || a.r.Leases[0].Job.JobId != id || a.r.Leases[0].Attempt != 2 {
		t.Fatalf("the lease waiting while the job failed with a retry: %+v %v; want the job, attempt 2", a.r, a.err)
	}
}

// A lease with a key and another body that comes while the key's run (the
// first body's) is in flight, and joins it, is refused as the key reused,
// whatever that run answers: its error (a retryable one, not kept) says
// nothing of this call, which must not be told to retry with the body the
// key is not free for.
func TestLeaseJoiningAnotherBodysFailedRunIsRefused(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	m := tc.mgrs[tc.leader()]
	ctx := ctxT(t)
	key := m.leaseReplayKey("acme", "lease-1")
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	first, other := make(chan error, 1), make(chan error, 1)
	var wg sync.WaitGroup
	t.Cleanup(func() { releaseOnce(); wg.Wait() }) // a failed wait below still ends both calls
	wg.Go(func() {
		// The first body's run, held until released, then failing as a
		// lease does when the leader cannot apply it.
		_, _, err := m.leaseReplays.Do(ctx, key, func(context.Context) (leaseAnswer, bool) {
			<-release
			return leaseAnswer{fingerprint: "f1", err: rpc.Errorf(rpc.CodeUnavailable, "lease: not applied")}, false
		})
		first <- err
	})
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return m.leaseReplays.Callers(key) == 1, "the first run is not in flight"
	})
	wg.Go(func() {
		_, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1, Request: "lease-1", Fingerprint: "f2"})
		other <- err
	})
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return m.leaseReplays.Callers(key) == 2, "the other body's lease did not join the run"
	})
	releaseOnce()
	if err := <-first; err != nil {
		t.Fatalf("the first run: %v", err)
	}
	if err := <-other; !isCode(err, rpc.CodeRequestReused) {
		t.Fatalf("a lease with another body joining the key's failed run: %v, want request_reused", err)
	}
	// Nothing was kept: the key is free, and the other body, asked again,
	// runs.
	submitJobs(t, tc, 1, "email")
	r, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1, Request: "lease-1", Fingerprint: "f2"})
	if err != nil || len(r.Leases) != 1 || r.Replayed {
		t.Fatalf("the other body asked again once the key's run failed: %+v %v", r, err)
	}
}

// The leader's memory of lease answers counts what an answer holds: a job
// leased again after a failed attempt carries that attempt's error, which
// counts as its payload does. Before, only payloads and results (which a
// leased job never has) counted: up to 100 errors of 4 KiB an answer
// (api.MaxJobErrorBytes at the gate, none at the manager) went past
// leaseReplayBytes uncounted.
func TestLeaseMemoryCountsTheJobsErrors(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.JobBackoffMin, c.JobBackoffMax = time.Millisecond, time.Millisecond })
	queueOn(tc)
	m := tc.mgrs[tc.leader()]
	ctx := ctxT(t)
	id := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	first, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1})
	if err != nil || len(first.Leases) != 1 {
		t.Fatalf("first lease: %+v %v", first, err)
	}
	long := strings.Repeat("e", 1<<20)
	if _, err := m.FailJob(ctx, "acme", id, first.Leases[0].LeaseId, long, true); err != nil {
		t.Fatalf("fail: %v", err)
	}
	// Past the backoff the job is leased again, with the first attempt's
	// error.
	r, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1, Request: "lease-1", Fingerprint: "f1",
		WaitNanos: int64(10 * time.Second)})
	if err != nil || len(r.Leases) != 1 || r.Leases[0].Job.Error != long {
		t.Fatalf("the lease of the failed job: %v; want it with its error", err)
	}
	if got := m.leaseReplays.Bytes(); got < int64(len(long)) {
		t.Fatalf("the kept answer counts %d bytes; it holds an error of %d", got, len(long))
	}
}

// A job queued again by a call whose caller left before its answer (a
// fail with a retry, a tenant's retry: the command applies all the same)
// is handed to a lease waiting at the leader on an empty queue at once,
// not when the lease's wait ends. Before, only the call's answer woke the
// waiting leases: a caller that had left woke none, and a retry of the
// action, answered as a replay, did not either.
func TestLongPollTakesAJobQueuedByACallWhoseCallerLeft(t *testing.T) {
	for _, action := range []string{"fail", "retry"} {
		t.Run(action, func(t *testing.T) {
			tc := newTestCluster(t, 1, func(c *Config) {
				c.JobBackoffMin, c.JobBackoffMax = time.Millisecond, time.Millisecond
				if action == "retry" {
					c.JobMaxAttempts = 1 // a failure with a retry is dead: the tenant's retry queues it
				}
			})
			queueOn(tc)
			ctx := ctxT(t)
			id := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
			m := tc.mgrs[tc.leader()]
			first, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w1", MaxJobs: 1, LeaseForNanos: int64(10 * time.Minute)})
			if err != nil || len(first.Leases) != 1 {
				t.Fatalf("first lease: %+v %v", first, err)
			}
			if action == "retry" {
				if j, err := m.FailJob(ctx, "acme", id, first.Leases[0].LeaseId, "boom", true); err != nil || j.State() != ledger.JobDead {
					t.Fatalf("fail at the last attempt: %+v %v", j, err)
				}
			}

			waiting := waitingLease(t, m, 30*time.Second)

			// The caller has left before the answer: the call returns at
			// once, and its command applies after.
			gone, cancel := context.WithCancel(ctx)
			cancel()
			switch action {
			case "fail":
				_, err = m.FailJob(gone, "acme", id, first.Leases[0].LeaseId, "smtp timeout", true)
			case "retry":
				_, err = m.Retry(gone, &rpcpb.JobActionRequest{Tenant: "acme", JobId: id, Key: "r1", Fingerprint: "fp r1"})
			}
			if err == nil {
				t.Log("the call was answered before its cancelled caller noticed")
			}
			select {
			case a := <-waiting:
				if a.err != nil || len(a.r.Leases) != 1 || a.r.Leases[0].Job.JobId != id || a.r.Leases[0].Attempt != 2 {
					t.Fatalf("the lease waiting while the job was queued again: %+v %v; want the job, attempt 2", a.r, a.err)
				}
			case <-time.After(15 * time.Second): // half the lease's wait
				t.Fatal("the lease waiting while a call whose caller left queued the job again was not given it")
			}
		})
	}
}

// leaseReply is a lease call's answer.
type leaseReply struct {
	r   *rpcpb.LeaseResponse
	err error
}

// waitingLease starts a lease of one job by worker w2 of tenant acme at m,
// waiting up to wait on an empty queue, and returns once it waits (m's
// jobsQueued holds the channel it waits on); its answer comes on the
// channel returned. Its context outlives ctxT's, so that the wait, not the
// test's deadline, ends it; it is cancelled and waited for at cleanup.
func waitingLease(t *testing.T, m *Manager, wait time.Duration) <-chan leaseReply {
	t.Helper()
	m.jobsQueued.fire() // no one else waits: a channel is the new waiter's
	ch := make(chan leaseReply, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		r, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w2", MaxJobs: 1, WaitNanos: int64(wait)})
		ch <- leaseReply{r, err}
	})
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		m.jobsQueued.mu.Lock()
		defer m.jobsQueued.mu.Unlock()
		return m.jobsQueued.ch != nil, "the lease is not waiting"
	})
	return ch
}
