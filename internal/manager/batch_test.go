package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestBatchedSubmissionsShareEntries: 200 concurrent unique submissions at the
// leader of a 3-manager group all commit, each with its own job, and the
// leader's log grows by far fewer than the 400 entries singles would take.
// The entries are counted under one leader (measureAtOneLeader).
func TestBatchedSubmissionsShareEntries(t *testing.T) {
	tc := newTestCluster(t, 3, stableLeaderTimings)
	ctx := ctxT(t)
	const n = 200
	measureAtOneLeader(t, tc, func(attempt, l int) error {
		r := tc.mgrs[l].Raft()
		last0 := r.LastIndex()
		var wg sync.WaitGroup
		start := make(chan struct{})
		keys := make([]string, n)
		ids := make([]string, n)
		errs := make([]error, n)
		for i := range n {
			keys[i] = fmt.Sprintf("a%d-k%d", attempt, i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resp, err := tc.submit(ctx, l, "t", keys[i], "fp", "demo", `1`, 0)
				if err == nil && resp.Outcome != rpc.OutcomeCommitted {
					err = fmt.Errorf("outcome %s", resp.Outcome)
				}
				if err == nil {
					ids[i] = resp.JobId
				}
				errs[i] = err
			}()
		}
		close(start)
		wg.Wait()
		grew := r.LastIndex() - last0
		seen := map[string]bool{}
		for i := range ids {
			if errs[i] != nil {
				return fmt.Errorf("submission %d: %w", i, errs[i])
			}
			if seen[ids[i]] {
				return fmt.Errorf("job id %s answered twice", ids[i])
			}
			seen[ids[i]] = true
			if j, ok := tc.mgrs[l].FSM().Job("t", ids[i]); !ok || j.Key != keys[i] {
				return fmt.Errorf("submission %d: job %+v %v", i, j, ok)
			}
		}
		t.Logf("200 submissions took %d raft entries (%.3f per submission)", grew, float64(grew)/n)
		// Singles take 400. The bound leaves room for a loaded machine, where
		// fewer submissions overlap, and for the leader's Expire entries.
		if grew > n/4 {
			return fmt.Errorf("200 concurrent submissions added %d raft entries, want at most %d", grew, n/4)
		}
		return nil
	})
}

// TestBatchAnswersEachSubmission: concurrent submissions whose commands share
// batch entries get their own answers: committed, rejected by admission (422)
// and by capacity (429), replayed duplicates, key reuse, and invalid requests.
func TestBatchAnswersEachSubmission(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) {
		c.AllowedJobTypes = []string{"demo"}
		c.MaxQueuedJobs = 12 // the 2 committed first, then 10 of the 20 new ones
	})
	l := tc.leader()
	ctx := ctxT(t)
	prior := map[string]string{}
	for _, k := range []string{"dup", "reused"} {
		resp, err := tc.submit(ctx, l, "t", k, "fp", "demo", `1`, 0)
		if err != nil || resp.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", k, resp, err)
		}
		prior[k] = resp.JobId
	}
	type sub struct{ key, fp, typ string }
	var subs []sub
	for i := 0; i < 20; i++ {
		subs = append(subs, sub{fmt.Sprintf("new-%d", i), "fp", "demo"})
	}
	for i := 0; i < 5; i++ {
		subs = append(subs, sub{fmt.Sprintf("bad-type-%d", i), "fp", "nope"}, sub{"dup", "fp", "demo"},
			sub{"reused", "other", "demo"}, sub{fmt.Sprintf("invalid-%d", i), "fp", ""})
	}
	resps := make([]*rpcpb.SubmitResponse, len(subs))
	errs := make([]error, len(subs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resps[i], errs[i] = tc.submit(ctx, l, "t", s.key, s.fp, s.typ, `1`, 0)
		}()
	}
	close(start)
	wg.Wait()
	committed, capacity := 0, 0
	for i, s := range subs {
		resp, err := resps[i], errs[i]
		switch {
		case s.typ == "":
			if !errors.Is(err, rpc.ErrInvalid) {
				t.Fatalf("%s: want invalid, got %+v %v", s.key, resp, err)
			}
		case err != nil:
			t.Fatalf("%s: %v", s.key, err)
		case s.typ == "nope":
			if resp.Outcome != rpc.OutcomeRejected || resp.Rejection.Status != 422 {
				t.Fatalf("%s: want a 422 rejection, got %+v", s.key, resp)
			}
		case s.key == "dup":
			if resp.Outcome != rpc.OutcomeCommitted || !resp.Replayed || resp.JobId != prior["dup"] {
				t.Fatalf("dup: want the replay of %s, got %+v", prior["dup"], resp)
			}
			if ttl := tc.cfgs[0].Idempotency.CommittedTTL; time.Duration(resp.RemainingNanos) <= 0 || time.Duration(resp.RemainingNanos) > ttl {
				t.Fatalf("dup: remaining lifetime %v, want in (0, %v]", time.Duration(resp.RemainingNanos), ttl)
			}
		case s.key == "reused":
			if resp.Outcome != rpc.OutcomeKeyReused {
				t.Fatalf("reused: want key_reused, got %+v", resp)
			}
		default:
			switch {
			case resp.Outcome == rpc.OutcomeCommitted && !resp.Replayed:
				committed++
				if j, ok := tc.mgrs[l].FSM().Job("t", resp.JobId); !ok || j.Key != s.key {
					t.Fatalf("%s: job %+v %v", s.key, j, ok)
				}
			case resp.Outcome == rpc.OutcomeRejected && resp.Rejection.Status == 429 && resp.Rejection.Reason == ledger.ReasonCapacity:
				capacity++
			default:
				t.Fatalf("%s: %+v", s.key, resp)
			}
		}
	}
	if committed != 10 || capacity != 10 {
		t.Fatalf("%d committed and %d refused for capacity, want 10 and 10", committed, capacity)
	}
}

// TestSingleCommandLogReplaysWithBatches: a log holding single commands and
// batch entries replays after a restart of the
// whole group: every key answers its job, with the Seqs it had.
func TestSingleCommandLogReplaysWithBatches(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	l := tc.leader()
	ctx := ctxT(t)
	m := tc.mgrs[l]
	// Singles, proposed one by one as entries of their own.
	now := m.ledgerNow()
	for i := 0; i < 5; i++ {
		k := fmt.Sprintf("single-%d", i)
		res, err := m.apply(ctx, ledger.Admit{
			Reserve: ledger.Reserve{Tenant: "t", Key: k, Fingerprint: "fp", JobID: "job-" + k,
				Now: now.UnixNano(), MaxEntries: 100,
				Request: ledger.Request{Type: "demo", Payload: []byte(`1`)}},
			Outcome: ledger.Commit{Tenant: "t", Key: k, JobID: "job-" + k, Now: now.UnixNano(),
				ExpiresAt: now.Add(m.cfg.Idempotency.CommittedTTL).UnixNano(), JobExpiresAt: now.Add(m.cfg.JobRetention).UnixNano()}})
		if err != nil || res.Outcome != ledger.OutcomeCommitted {
			t.Fatalf("admit %s: %+v %v", k, res, err)
		}
	}
	// Then batched submissions.
	var wg sync.WaitGroup
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := tc.submit(ctx, l, "t", fmt.Sprintf("batched-%d", i), "fp", "demo", `1`, 0); err != nil || resp.Outcome != rpc.OutcomeCommitted {
				t.Errorf("batched-%d: %+v %v", i, resp, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	before, _, _ := m.FSM().ListJobs("t", ledger.ListOptions{Limit: 100})
	tc.closeAll()
	tc.start(0)
	l = tc.leader()
	after, _, _ := tc.mgrs[l].FSM().ListJobs("t", ledger.ListOptions{Limit: 100})
	if len(after) != 35 || len(before) != 35 {
		t.Fatalf("jobs before %d, after the restart %d, want 35", len(before), len(after))
	}
	for i := range before {
		if before[i].ID != after[i].ID || before[i].Seq != after[i].Seq {
			t.Fatalf("job %d: before %+v, after %+v", i, before[i], after[i])
		}
	}
	for i := 0; i < 5; i++ {
		k := fmt.Sprintf("single-%d", i)
		resp, err := tc.submit(ctx, l, "t", k, "fp", "demo", `1`, 0)
		if err != nil || !resp.Replayed || resp.JobId != "job-"+k {
			t.Fatalf("%s after the restart: %+v %v", k, resp, err)
		}
	}
}

// TestBatched64Clients: 64 clients submitting unique keys back to back at the
// leader of a 3-manager group take well under 0.2 Raft entries per submission
// (singles take 2), counted under one leader (measureAtOneLeader).
func TestBatched64Clients(t *testing.T) {
	tc := newTestCluster(t, 3, stableLeaderTimings)
	ctx := ctxT(t)
	const clients, each = 64, 8
	measureAtOneLeader(t, tc, func(attempt, l int) error {
		r := tc.mgrs[l].Raft()
		last0 := r.LastIndex()
		var wg sync.WaitGroup
		errs := make(chan error, clients*each)
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					resp, err := tc.submit(ctx, l, "t", fmt.Sprintf("a%d-c%d-%d", attempt, c, i), "fp", "demo", `1`, 0)
					if err == nil && resp.Outcome != rpc.OutcomeCommitted {
						err = fmt.Errorf("outcome %s", resp.Outcome)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		grew := r.LastIndex() - last0
		if err := <-errs; err != nil {
			return err
		}
		per := float64(grew) / (clients * each)
		t.Logf("%d submissions by %d clients took %d raft entries (%.3f per submission)", clients*each, clients, grew, per)
		if per >= 0.2 {
			return fmt.Errorf("%.3f raft entries per submission, want under 0.2", per)
		}
		return nil
	})
}

// TestBatchSubmitterGivesUp: a submitter whose context ends stops waiting at
// once; its command still applies (the ledger makes the retry safe).
func TestBatchSubmitterGivesUp(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	l := tc.leader()
	m := tc.mgrs[l]
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	now := m.ledgerNow()
	_, err := m.admits.apply(ctx, ledger.Admit{
		Reserve: ledger.Reserve{Tenant: "t", Key: "gave-up", Fingerprint: "fp", JobID: "job-gave-up",
			Now: now.UnixNano(), MaxEntries: 100,
			Request: ledger.Request{Type: "demo", Payload: []byte(`1`)}},
		Outcome: ledger.Commit{Tenant: "t", Key: "gave-up", JobID: "job-gave-up", Now: now.UnixNano(),
			ExpiresAt: now.Add(time.Minute).UnixNano(), JobExpiresAt: now.Add(time.Hour).UnixNano()}})
	if !errors.Is(err, rpc.ErrUnavailable) {
		t.Fatalf("a submitter that gave up: %v, want unavailable", err)
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		e, ok := m.FSM().Entry("t", "gave-up")
		return ok && e.JobID == "job-gave-up", "the abandoned Admit to apply"
	})
}
