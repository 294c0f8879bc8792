package manager

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// A leader's memory of lease answers is its term's: a lease retried with its
// key at a manager that leads again, after another manager led meanwhile,
// is answered from the ledger (the leases the key holds now), not with what
// this manager answered in its earlier term. Before, manager A kept its
// answer across terms: the key's jobs were leased at A, their leases
// expired and the key's retry leased the job again at B (attempt 2, a new
// lease); back at A the next retry was given A's old answer, a lease the
// ledger had ended (lease_lost on the worker's first heartbeat), while the
// job's current lease, held for the key, went to no worker until it
// expired.
func TestLeaseMemoryIsTheTerms(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 3, func(c *Config) { c.JobLeaseDefault = time.Minute })
	tc.setNow(clock.Now)
	queueOn(tc)
	ctx := ctxT(t)
	id := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	req := &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1, Request: "lease-1", Fingerprint: "f1",
		WaitNanos: int64(10 * time.Second)}
	lease := func(i int) *rpcpb.LeaseResponse {
		t.Helper()
		var r *rpcpb.LeaseResponse
		tc.lead(ctx, i, func() (err error) {
			r, err = tc.mgrs[i].Lease(ctx, req)
			return err
		})
		if len(r.Leases) != 1 || r.Leases[0].Job.JobId != id {
			t.Fatalf("lease at %s: %+v; want job %s", tc.cfgs[i].NodeID, r, id)
		}
		return r
	}

	first := lease(0)
	// Another manager leads; the first lease expires there, and its job
	// is queued again.
	tc.lead(ctx, 1, func() error { return nil })
	clock.Advance(2 * time.Minute)
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		j, ok := tc.mgrs[1].FSM().Job("acme", id)
		return ok && j.State() == ledger.JobQueued, "the expired lease's job to be queued again"
	})
	clock.Advance(time.Minute) // past its backoff
	second := lease(1)
	if second.Replayed || second.Leases[0].LeaseId == first.Leases[0].LeaseId || second.Leases[0].Attempt != 2 {
		t.Fatalf("the key's retry after its lease expired: %+v; want attempt 2 under a new lease", second)
	}
	// Back at the first manager, the key's retry is given the lease the
	// ledger holds for it.
	third := lease(0)
	if !third.Replayed || !leasesEqual(third.Leases, second.Leases) {
		t.Fatalf("the key's retry at a manager leading again: %+v; want %+v replayed (first term's answer: %+v)",
			third, second.Leases, first.Leases)
	}
}

// A lease waiting on an empty queue while another tenant's lease has
// expired (and waits for the leader's ExpireLeases sweep, as the leases
// that expired during an election wait for the new leader's first sweep)
// does not propose Lease after Lease until the sweep: the expired lease was
// looked at by its Lease already, and is not its to reclaim. Before, the
// wait woke at once for it, every time: one waiting lease proposed some 250
// empty Lease entries in the second before the sweep.
func TestLongPollDoesNotSpinOnAnotherTenantsExpiredLease(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.JobLeaseMin = 100 * time.Millisecond })
	queueOn(tc)
	ctx := ctxT(t)
	if r, err := tc.submitToLeader(ctx, "globex", "host1.dc1:1:1:0123456789abcdef", "fp", "email", `1`, 1000); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("submit: %+v %v", r, err)
	}
	m := tc.mgrs[tc.leader()]
	if r, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "globex", Worker: "w1", MaxJobs: 1, LeaseForNanos: int64(time.Second)}); err != nil || len(r.Leases) != 1 {
		t.Fatalf("globex's lease: %+v %v", r, err)
	}
	last := m.Raft().LastIndex()
	// The wait outlasts globex's lease, its expiry, the sweep and the
	// requeued job (another tenant's) that follow.
	r, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w2", MaxJobs: 1, WaitNanos: int64(4 * time.Second)})
	if err != nil || len(r.Leases) != 0 {
		t.Fatalf("acme's lease, with nothing of acme's queued: %+v %v", r, err)
	}
	leases := 0
	for _, c := range tc.commandsSince(tc.leader(), last) {
		if c == "ledger.Lease" {
			leases++
		}
	}
	// One to begin with, one when globex's lease expired, one when its job
	// was queued again, and one a second while jobs are queued
	// (leaseWaitRetry): a handful, not one per Raft round.
	if leases > 10 {
		t.Fatalf("a lease waiting 4 s proposed %d Lease commands", leases)
	}
}

// Coverage (passes on main): leases across leaders whose clocks are 10
// minutes ahead and 10 minutes behind the group's. Each leader stamps a
// heartbeat's expiry with the group's clock (the lease lasts what the
// worker asked, in real time, whoever leads), and no leader's ExpireLeases
// sweep ends a live lease early, while a lease that did expire is ended
// (docs/ledger.md, "Ledger time"; docs/workers.md, "Clock skew").
func TestSkewedLeadersKeepLiveLeases(t *testing.T) {
	skews := []time.Duration{0, 10 * time.Minute, -10 * time.Minute}
	tc := newSkewedCluster(t, skews, func(c *Config) { c.JobLeaseMin = 100 * time.Millisecond })
	queueOn(tc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		for _, m := range tc.mgrs {
			if v := m.ClockState().View; !v.Known || v.Measured != 3 {
				return false, "every manager to measure its group"
			}
		}
		return true, ""
	})
	live := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	short := submitJob(t, tc, "host1.dc1:2:1:0123456789abcdef", "email")
	// lease leases the oldest queued job at manager i for d.
	lease := func(i int, d time.Duration) *rpcpb.Lease {
		var r *rpcpb.LeaseResponse
		tc.lead(ctx, i, func() (err error) {
			r, err = tc.mgrs[i].Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1, LeaseForNanos: int64(d)})
			return err
		})
		if len(r.Leases) != 1 {
			t.Fatalf("lease at %s: %+v", tc.cfgs[i].NodeID, r)
		}
		return r.Leases[0]
	}
	l := lease(0, time.Minute)
	if l.Job.JobId != live {
		t.Fatalf("leased %s first, want %s", l.Job.JobId, live)
	}
	for _, i := range []int{1, 2, 0} {
		name := tc.cfgs[i].NodeID
		tc.lead(ctx, i, func() error {
			m := tc.mgrs[i]
			term := m.Raft().CurrentTerm()
			at := time.Now()
			r, err := m.Heartbeat(ctx, &rpcpb.HeartbeatRequest{Tenant: "acme", JobId: live, LeaseId: l.LeaseId, LeaseForNanos: int64(time.Minute)})
			if err != nil {
				return err
			}
			exp, err := time.Parse(api.TimeFormat, r.ExpiresAt)
			if err != nil {
				t.Fatal(err)
			}
			if d := exp.Sub(at.Add(time.Minute)); d < -2*time.Second || d > 2*time.Second {
				t.Fatalf("a heartbeat of a minute at %s (clock %v off) expires at %v, %v from a minute after it", name, skews[i], exp, d)
			}
			// A lease this leader lets expire: its sweep ends it, and not
			// the live one.
			s, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1,
				LeaseForNanos: int64(100 * time.Millisecond), WaitNanos: int64(10 * time.Second)})
			if err != nil {
				return err
			}
			if len(s.Leases) != 1 || s.Leases[0].Job.JobId != short {
				t.Fatalf("the short job's lease at %s: %+v", name, s)
			}
			testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
				j, ok := m.FSM().Job("acme", short)
				return ok && j.State() != ledger.JobRunning, "the expired lease to end"
			})
			if m.CheckLeader() != nil || m.Raft().CurrentTerm() != term {
				return rpc.Errorf(rpc.CodeUnavailable, "%s stopped leading before its sweep was seen", name)
			}
			return nil
		})
		tc.waitFSMsApplied()
		for _, m := range tc.mgrs {
			j, ok := m.FSM().Job("acme", live)
			if !ok || j.State() != ledger.JobRunning || j.Life.LeaseID != l.LeaseId || j.Life.Attempts != 1 {
				t.Fatalf("after %s led, the heartbeated job at %s: %+v", name, m.cfg.NodeID, j.Life)
			}
		}
	}
}

// Coverage (passes on main): worker calls applied at a leader that dies
// before answering, retried at the next leader (which never saw them): a
// completion answers the job as it was completed, with the first result (not
// the retry's) and the first finish; a failure with a retry answers the job
// queued as the first failure left it (its backoff not drawn again); a
// heartbeat extends the lease again. Nothing is applied twice, and no lease
// is lost.
func TestWorkerCallsRetriedAfterLeaderDies(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	queueOn(tc)
	ctx := ctxT(t)
	submitJobs(t, tc, 3, "email")
	l := tc.leader()
	m := tc.mgrs[l]
	r, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 3, LeaseForNanos: int64(time.Minute)})
	if err != nil || len(r.Leases) != 3 {
		t.Fatalf("lease: %+v %v", r, err)
	}
	done, fail, beat := r.Leases[0], r.Leases[1], r.Leases[2]
	completed, err := m.CompleteJob(ctx, "acme", done.Job.JobId, done.LeaseId, []byte(`{"first":true}`))
	if err != nil || completed.State() != ledger.JobSucceeded {
		t.Fatalf("complete: %+v %v", completed, err)
	}
	failed, err := m.FailJob(ctx, "acme", fail.Job.JobId, fail.LeaseId, "smtp down", true)
	if err != nil || failed.State() != ledger.JobQueued {
		t.Fatalf("fail: %+v %v", failed, err)
	}
	beaten, err := m.HeartbeatJob(ctx, "acme", beat.Job.JobId, beat.LeaseId, time.Minute)
	if err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	tc.stop(l) // every answer is lost with it

	retry := func(call func(m *Manager) error) {
		t.Helper()
		for {
			err := call(tc.mgrs[tc.leader()])
			if !errors.Is(err, rpc.ErrNotLeader) && !errors.Is(err, rpc.ErrUnavailable) {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
		}
	}
	retry(func(m *Manager) error {
		j, err := m.CompleteJob(ctx, "acme", done.Job.JobId, done.LeaseId, []byte(`{"retry":true}`))
		if err == nil && (j.State() != ledger.JobSucceeded || string(j.Life.Result) != `{"first":true}` || j.Life.FinishedAt != completed.Life.FinishedAt) {
			t.Fatalf("the completion retried at the next leader: %+v; want %+v", j.Life, completed.Life)
		}
		return err
	})
	retry(func(m *Manager) error {
		j, err := m.FailJob(ctx, "acme", fail.Job.JobId, fail.LeaseId, "smtp down", true)
		if err == nil && (j.State() != ledger.JobQueued || j.Life.RunAt != failed.Life.RunAt || j.Life.Attempts != 1) {
			t.Fatalf("the failure retried at the next leader: %+v; want %+v", j.Life, failed.Life)
		}
		return err
	})
	retry(func(m *Manager) error {
		j, err := m.HeartbeatJob(ctx, "acme", beat.Job.JobId, beat.LeaseId, time.Minute)
		if err == nil && (j.State() != ledger.JobRunning || j.Life.LeaseID != beat.LeaseId || j.Life.LeaseExpiresAt < beaten.Life.LeaseExpiresAt) {
			t.Fatalf("the heartbeat retried at the next leader: %+v; after %+v", j.Life, beaten.Life)
		}
		return err
	})
}

// Coverage (passes on main): a heartbeat stamped a nanosecond before its
// lease's expiry extends it; one stamped at the expiry instant is refused
// (lease_lost: a lease lasts until, not through, its expiry, as the sweep and
// a reclaim judge it). The leader is then killed and the next leader's clock
// is 6 s behind the stamps of the last: the expired lease is not live again
// there (its heartbeat refused, its sweep ends it), and ledger time does not
// go back.
func TestExpiredLeaseStaysExpiredUnderALeaderBehind(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 3, nil)
	tc.setNow(clock.Now)
	queueOn(tc)
	ctx := ctxT(t)
	id := submitJob(t, tc, "k1", "email")
	l := tc.leader()
	m := tc.mgrs[l]
	r, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: 1, LeaseForNanos: int64(10 * time.Second)})
	if err != nil || len(r.Leases) != 1 {
		t.Fatalf("lease: %+v %v", r, err)
	}
	leaseID := r.Leases[0].LeaseId
	expiry := func() int64 { j, _ := m.FSM().Job("acme", id); return j.Life.LeaseExpiresAt }
	clock.Advance(time.Unix(0, expiry()-1).Sub(clock.Now()))
	if _, err := m.HeartbeatJob(ctx, "acme", id, leaseID, 10*time.Second); err != nil {
		t.Fatalf("a heartbeat a nanosecond before the expiry: %v", err)
	}
	clock.Advance(time.Unix(0, expiry()).Sub(clock.Now()))
	if _, err := m.HeartbeatJob(ctx, "acme", id, leaseID, 10*time.Second); !errors.Is(err, rpc.ErrLeaseLost) {
		t.Fatalf("a heartbeat at the expiry instant: %v, want lease_lost", err)
	}
	lt := m.FSM().LedgerTime()
	tc.stop(l)
	clock.Advance(-6 * time.Second)
	for {
		_, err = tc.mgrs[tc.leader()].HeartbeatJob(ctx, "acme", id, leaseID, time.Minute)
		if !errors.Is(err, rpc.ErrNotLeader) && !errors.Is(err, rpc.ErrUnavailable) {
			break
		}
	}
	if !errors.Is(err, rpc.ErrLeaseLost) {
		t.Fatalf("the expired lease's heartbeat at a leader whose clock is behind: %v, want lease_lost", err)
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		j, _ := tc.mgrs[tc.leader()].FSM().Job("acme", id)
		return j.State() == ledger.JobQueued && j.Life.LeaseID == "", "the new leader's sweep to end the expired lease"
	})
	if got := tc.mgrs[tc.leader()].FSM().LedgerTime(); got < lt {
		t.Fatalf("ledger time went back from %d to %d", lt, got)
	}
}
