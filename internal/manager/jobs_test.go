package manager

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// queueOn turns the worker lifecycle on for every manager of tc (what the
// switch, queueJobs, will do for all).
func queueOn(tc *testCluster) {
	for _, m := range tc.mgrs {
		if m != nil {
			m.queueJobs.Store(true)
		}
	}
}

// submitJob submits a job and returns its ID.
func submitJob(t *testing.T, tc *testCluster, key, typ string) string {
	t.Helper()
	r, err := tc.submitToLeader(ctxT(t), "acme", key, "fp-"+key, typ, `{"k":"`+key+`"}`, 1000)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("submit %s: %+v %v", key, r, err)
	}
	return r.JobId
}

// TestWorkerLifecycle runs a job's life through the leader's calls on a
// three-manager cluster, and checks every manager's ledger agrees.
func TestWorkerLifecycle(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	queueOn(tc)
	ctx := ctxT(t)
	a := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	b := submitJob(t, tc, "host1.dc1:1:2:0123456789abcdef", "resize")
	c := submitJob(t, tc, "host1.dc1:1:3:0123456789abcdef", "email")
	l := tc.leader()
	m := tc.mgrs[l]
	if j, _ := m.fsm.Job("acme", a); j.State() != ledger.JobQueued {
		t.Fatalf("a submitted job is %v", j.State())
	}
	// A follower refuses: the lifecycle's commands are the leader's.
	f := (l + 1) % 3
	if _, err := tc.mgrs[f].leaseNow(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w1"}); !errors.Is(err, rpc.ErrNotLeader) {
		t.Fatalf("lease at a follower: %v", err)
	}
	jobs, err := m.leaseNow(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w1", Types: []string{"email"}, MaxJobs: 5})
	if err != nil || len(jobs) != 2 || jobs[0].ID != a || jobs[1].ID != c {
		t.Fatalf("lease of email jobs: %+v %v", jobs, err)
	}
	for _, j := range jobs {
		if j.Life.LeaseExpiresAt <= time.Now().UnixNano() || len(j.Life.LeaseID) != 32 || j.Life.Holder != "w1" || j.Life.Attempts != 1 {
			t.Fatalf("leased job %+v", j.Life)
		}
	}
	ja, jc := jobs[0], jobs[1]
	hb, err := m.HeartbeatJob(ctx, "acme", a, ja.Life.LeaseID, 2*time.Minute)
	if err != nil || hb.Life.LeaseExpiresAt <= ja.Life.LeaseExpiresAt {
		t.Fatalf("heartbeat: %+v %v", hb.Life, err)
	}
	done, err := m.CompleteJob(ctx, "acme", a, ja.Life.LeaseID, []byte(`{"sent":true}`))
	if err != nil || done.State() != ledger.JobSucceeded || string(done.Life.Result) != `{"sent":true}` {
		t.Fatalf("complete: %+v %v", done, err)
	}
	// Applied once: the same call again answers the same job.
	again, err := m.CompleteJob(ctx, "acme", a, ja.Life.LeaseID, []byte(`{"other":1}`))
	if err != nil || string(again.Life.Result) != `{"sent":true}` || again.Life.FinishedAt != done.Life.FinishedAt {
		t.Fatalf("complete again: %+v %v", again, err)
	}
	// A stale lease, an unknown job, a bad call.
	if _, err := m.HeartbeatJob(ctx, "acme", a, ja.Life.LeaseID, 0); !errors.Is(err, rpc.ErrLeaseLost) {
		t.Fatalf("heartbeat of a finished job: %v", err)
	}
	if _, err := m.CompleteJob(ctx, "acme", c, "not-the-lease", nil); !errors.Is(err, rpc.ErrLeaseLost) {
		t.Fatalf("complete with another lease: %v", err)
	}
	if _, err := m.FailJob(ctx, "acme", "no-such-job", "x", "e", true); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("fail of an unknown job: %v", err)
	}
	for _, bad := range []*rpcpb.LeaseRequest{{Worker: "w"}, {Tenant: "acme"}, {Tenant: "acme", Worker: "w", MaxJobs: ledger.MaxLease + 1},
		{Tenant: "acme", Worker: "w", Types: []string{"a", "a"}}, {Tenant: "acme", Worker: "w", LeaseForNanos: int64(time.Millisecond)},
		{Tenant: "acme", Worker: "w", LeaseForNanos: int64(2 * time.Hour)}} {
		if _, err := m.leaseNow(ctx, bad); !errors.Is(err, rpc.ErrInvalid) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	if _, err := m.CompleteJob(ctx, "acme", c, jc.Life.LeaseID, []byte(`not json`)); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("a result that is not JSON: %v", err)
	}
	// A failed attempt: queued again after the backoff (1s, with jitter: 0.5-1s).
	before := m.ledgerNow()
	fj, err := m.FailJob(ctx, "acme", c, jc.Life.LeaseID, "smtp down", true)
	if err != nil || fj.State() != ledger.JobQueued || fj.Life.Error != "smtp down" {
		t.Fatalf("fail: %+v %v", fj, err)
	}
	if d := time.Duration(fj.Life.RunAt - before.UnixNano()); d < 500*time.Millisecond || d > time.Second+time.Second/2 {
		t.Fatalf("retry after %v, want the first backoff (0.5-1s)", d)
	}
	if jobs, err := m.leaseNow(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w2", Types: []string{"email"}}); err != nil || len(jobs) != 0 {
		t.Fatalf("leased before the retry: %+v %v", jobs, err)
	}
	// Without retry: failed.
	jobs, err = m.leaseNow(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w2", Types: []string{"resize"}})
	if err != nil || len(jobs) != 1 || jobs[0].ID != b {
		t.Fatalf("lease of resize: %+v %v", jobs, err)
	}
	if fb, err := m.FailJob(ctx, "acme", b, jobs[0].Life.LeaseID, "bad image", false); err != nil || fb.State() != ledger.JobFailed {
		t.Fatalf("fail without retry: %+v %v", fb, err)
	}
	// The retry is leased once due.
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		jobs, err := m.leaseNow(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w3"})
		return err == nil && len(jobs) == 1 && jobs[0].ID == c && jobs[0].Life.Attempts == 2, fmt.Sprintf("the retry leased (%v)", err)
	})
	// Every manager holds the same jobs.
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		for _, mm := range tc.mgrs {
			for id, want := range map[string]ledger.JobState{a: ledger.JobSucceeded, b: ledger.JobFailed, c: ledger.JobRunning} {
				if j, ok := mm.fsm.Job("acme", id); !ok || j.State() != want {
					return false, fmt.Sprintf("job %s %v on %s", id, want, mm.cfg.NodeID)
				}
			}
		}
		return true, ""
	})
	if st := m.fsm.Stats(); st.Succeeded != 1 || st.Failed != 1 || st.Running != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The list by state, as the gate's GET /v1/jobs?state=S asks it (status stays committed).
	for status, want := range map[string]string{"succeeded": a, "failed": b, "running": c} {
		resp, err := m.ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "acme", Status: status})
		if err != nil || len(resp.Jobs) != 1 || resp.Jobs[0].JobId != want || resp.Jobs[0].State != status || resp.Jobs[0].Status != "committed" {
			t.Fatalf("list of %s: %+v %v", status, resp, err)
		}
	}
	if resp, err := m.ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "acme", Status: "queued"}); err != nil || len(resp.Jobs) != 0 {
		t.Fatalf("list of queued: %+v %v", resp, err)
	}
}

// TestLeaderExpiresLeases: a worker that stops heartbeating loses its job to
// the queue, by the leader's ExpireLeases loop, and the job dies once it used
// its attempts.
func TestLeaderExpiresLeases(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) {
		c.JobLeaseMin = 100 * time.Millisecond
		c.JobMaxAttempts = 2
		c.JobBackoffMin = 10 * time.Millisecond
		c.JobBackoffMax = 10 * time.Millisecond
	})
	queueOn(tc)
	ctx := ctxT(t)
	id := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	m := tc.mgrs[tc.leader()]
	for attempt := uint64(1); attempt <= 2; attempt++ {
		var jobs []ledger.Job
		testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
			var err error
			jobs, err = m.leaseNow(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", LeaseForNanos: int64(200 * time.Millisecond)})
			return err == nil && len(jobs) == 1, fmt.Sprintf("attempt %d leased (%v)", attempt, err)
		})
		if jobs[0].ID != id || jobs[0].Life.Attempts != attempt {
			t.Fatalf("attempt %d: %+v", attempt, jobs[0])
		}
		// No heartbeat: the leader's loop ends the lease.
		want := ledger.JobQueued
		if attempt == 2 {
			want = ledger.JobDead
		}
		testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
			j, _ := m.fsm.Job("acme", id)
			return j.State() == want, fmt.Sprintf("attempt %d's job %v (is %v)", attempt, want, j.State())
		})
		j, _ := m.fsm.Job("acme", id)
		if j.Life.Error != ledger.ErrorLeaseExpired || j.Life.LeaseID != "" {
			t.Fatalf("after the lease expired: %+v", j.Life)
		}
		if _, err := m.CompleteJob(ctx, "acme", id, jobs[0].Life.LeaseID, nil); !errors.Is(err, rpc.ErrLeaseLost) {
			t.Fatalf("complete after the lease expired: %v", err)
		}
	}
	if _, ok := m.fsm.NextLeaseExpiry(); ok {
		t.Fatal("a lease is left")
	}
}

// TestQueueJobsOffCommitsLegacyJobs: until the switch, submissions make jobs
// outside the lifecycle, as before, and nothing leases them.
func TestQueueJobsOffCommitsLegacyJobs(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.QueueJobs = false })
	id := submitJob(t, tc, "host1.dc1:1:1:0123456789abcdef", "email")
	m := tc.mgrs[tc.leader()]
	if j, ok := m.fsm.Job("acme", id); !ok || j.Life != nil || j.State().String() != "committed" {
		t.Fatalf("job %+v %v", j, ok)
	}
	if jobs, err := m.leaseNow(ctxT(t), &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w"}); err != nil || len(jobs) != 0 {
		t.Fatalf("leased a legacy job: %+v %v", jobs, err)
	}
}

func TestBackoff(t *testing.T) {
	m := &Manager{cfg: Config{JobBackoffMin: time.Second, JobBackoffMax: 10 * time.Second}}
	for _, tt := range []struct {
		attempt uint64
		lo, hi  time.Duration
	}{{1, 500 * time.Millisecond, time.Second}, {2, time.Second, 2 * time.Second}, {3, 2 * time.Second, 4 * time.Second},
		{4, 4 * time.Second, 8 * time.Second}, {5, 5 * time.Second, 10 * time.Second}, {60, 5 * time.Second, 10 * time.Second}} {
		if lo := m.backoff(tt.attempt, 0); lo != tt.lo {
			t.Errorf("attempt %d, no jitter: %v, want %v", tt.attempt, lo, tt.lo)
		}
		if hi := m.backoff(tt.attempt, 0.999999); hi < tt.hi-time.Millisecond || hi > tt.hi {
			t.Errorf("attempt %d, most jitter: %v, want about %v", tt.attempt, hi, tt.hi)
		}
	}
	m.cfg.JobBackoffMin, m.cfg.JobBackoffMax = 0, 0
	if d := m.backoff(3, 0.5); d != 0 {
		t.Errorf("no backoff: %v", d)
	}
}

func TestJobStateGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(jobStateGauges(func() ledger.Stats {
		return ledger.Stats{Queued: 3, Running: 2, Succeeded: 7, Failed: 1, Dead: 4, Cancelled: 5}
	})...)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "once_manager_jobs_by_state" {
		t.Fatalf("gathered %v %v", mfs, err)
	}
	got := map[string]float64{}
	for _, m := range mfs[0].GetMetric() {
		got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
	}
	want := map[string]float64{"queued": 3, "running": 2, "succeeded": 7, "failed": 1, "dead": 4, "cancelled": 5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("gauges %v, want %v", got, want)
	}
}

// leaseNow leases for req.Worker without a wait: the jobs leaseJobs hands out.
func (m *Manager) leaseNow(ctx context.Context, req *rpcpb.LeaseRequest) ([]ledger.Job, error) {
	lr, err := m.leaseJobs(ctx, req, req.Worker)
	if err != nil {
		return nil, err
	}
	return lr.Jobs, nil
}
