package manager

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const key1 = "host1.dc1:12345:1:0123456789abcdef"

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSubmitCommitReplayReuse(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	r1, err := tc.submitToLeader(ctx, "default", key1, "fp1", "demo", `{"n":1}`, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Outcome != rpc.OutcomeCommitted || r1.Replayed || r1.Job == nil || r1.Job.JobId != r1.JobId {
		t.Fatalf("first submit: %+v", r1)
	}
	if r1.Job.Type != "demo" || string(r1.Job.Payload) != `{"n":1}` || r1.Job.Datacenters["dc1"].Status != "committed" {
		t.Fatalf("job: %+v", r1.Job)
	}
	r2, err := tc.submitToLeader(ctx, "default", key1, "fp1", "demo", `{"n":1}`, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Outcome != rpc.OutcomeCommitted || !r2.Replayed || r2.JobId != r1.JobId || r2.Job.CreatedAt != r1.Job.CreatedAt {
		t.Fatalf("replay: %+v vs %+v", r2, r1)
	}
	r3, err := tc.submitToLeader(ctx, "default", key1, "fp-other", "demo", `{"n":2}`, 1000)
	if err != nil || r3.Outcome != rpc.OutcomeKeyReused {
		t.Fatalf("reuse: %+v %v", r3, err)
	}
	// Another tenant with the same key is another submission.
	r4, err := tc.submitToLeader(ctx, "other", key1, "fp1", "demo", `{"n":1}`, 1000)
	if err != nil || r4.Outcome != rpc.OutcomeCommitted || r4.JobId == r1.JobId || r4.Replayed {
		t.Fatalf("other tenant: %+v %v", r4, err)
	}
	// Reads at the leader.
	job, err := tc.mgrs[tc.leader()].GetJob(ctx, "default", r1.JobId)
	if err != nil || job.JobId != r1.JobId {
		t.Fatalf("get job: %+v %v", job, err)
	}
	if _, err := tc.mgrs[tc.leader()].GetJob(ctx, "other", r1.JobId); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("cross-tenant read must be not found, got %v", err)
	}
	info, err := tc.mgrs[tc.leader()].GetKey(ctx, "default", key1)
	if err != nil || info.State != "committed" || info.JobId == nil || *info.JobId != r1.JobId ||
		info.ClientId != "host1.dc1:12345" || info.Sequence == nil || *info.Sequence != 1 || info.Nonce != "0123456789abcdef" {
		t.Fatalf("key info: %+v %v", info, err)
	}
}

func TestFollowerAnswersNotLeaderWithHint(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	f := (l + 1) % 3
	_, err := tc.submit(ctxT(t), f, "default", key1, "fp", "demo", `1`, 0)
	var e *rpc.Error
	if !errors.As(err, &e) || e.Code != rpc.CodeNotLeader || e.Leader != tc.cfgs[l].RPCAdvertise {
		t.Fatalf("want not_leader naming %s, got %v", tc.cfgs[l].RPCAdvertise, err)
	}
}

func TestConcurrentSubmissionsOfOneKeyShareOneOutcome(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	ctx := ctxT(t)
	l0 := tc.leader()
	term0, last0 := tc.mgrs[l0].Raft().CurrentTerm(), tc.mgrs[l0].Raft().LastIndex()
	const n = 200
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := tc.submitToLeader(ctx, "default", key1, "fp", "demo", `{"x":true}`, 10_000)
			if err == nil && r.Outcome != rpc.OutcomeCommitted {
				err = fmt.Errorf("outcome %s", r.Outcome)
			}
			if err == nil {
				ids[i] = r.JobId
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil {
			t.Fatalf("submission %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("two job ids for one key: %s and %s", ids[0], ids[i])
		}
	}
	l := tc.leader()
	if st := tc.mgrs[l].FSM().Stats(); st.Jobs != 1 || st.Entries != 1 {
		t.Fatalf("want one job and one entry, got %+v", st)
	}
	// Concurrent first submissions coalesce on one proposal: the log grew by
	// exactly one command, the Admit (unless an election added entries). Raft's own entries (a configuration change autopilot makes
	// after an election) do not count.
	if l == l0 && tc.mgrs[l].Raft().CurrentTerm() == term0 {
		if cmds := tc.commandsSince(l, last0); len(cmds) != 1 || cmds[0] != fmt.Sprintf("%T", ledger.Admit{}) {
			t.Fatalf("200 concurrent submissions of one key added commands %v, want one Admit", cmds)
		}
	}
}

// commandsSince names (by Go type) the commands in manager i's log after
// index last; Raft's own entries (a configuration change autopilot makes
// after an election) are not commands.
func (tc *testCluster) commandsSince(i int, last uint64) []string {
	tc.t.Helper()
	var cmds []string
	for n := last + 1; n <= tc.mgrs[i].Raft().LastIndex(); n++ {
		var e raft.Log
		if err := tc.mgrs[i].logStore.GetLog(n, &e); err != nil {
			tc.t.Fatal(err)
		}
		if e.Type == raft.LogCommand {
			cmd, err := ledger.DecodeCommand(e.Data)
			if err != nil {
				tc.t.Fatal(err)
			}
			cmds = append(cmds, fmt.Sprintf("%T", cmd))
		}
	}
	return cmds
}

// A submission looks at its key (no entry), and before it asks to propose
// the key's Admit, another submission of the key admits it, from proposal
// to answer (the window is held open by Knobs.AfterLook). The first then
// owns no proposal in flight; it must look again rather than propose a
// second Admit of the key: it answers the other's job as a replay, and the
// log holds one Admit.
func TestAnAdmitThatEndsBetweenLookAndProposalIsNotProposedTwice(t *testing.T) {
	looked, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool // the first look is held; later ones pass (a sync.Once would hold them too)
	tc := newKnobbedCluster(t, 1, nil, TestingKnobs{AfterLook: func(ctx context.Context, _, _ string) {
		if !held.CompareAndSwap(false, true) {
			return
		}
		close(looked)
		select {
		case <-release:
		case <-ctx.Done():
		}
	}})
	ctx := ctxT(t)
	l := tc.leader()
	last0 := tc.mgrs[l].Raft().LastIndex()
	type answer struct {
		r   *rpcpb.SubmitResponse
		err error
	}
	first := make(chan answer, 1)
	go func() {
		r, err := tc.submit(ctx, l, "default", key1, "fp", "demo", `1`, 10_000)
		first <- answer{r, err}
	}()
	<-looked
	second, err := tc.submit(ctx, l, "default", key1, "fp", "demo", `1`, 10_000)
	if err != nil || second.Outcome != rpc.OutcomeCommitted || second.Replayed {
		t.Fatalf("the submission admitted inside the window: %+v %v", second, err)
	}
	close(release)
	a := <-first
	if a.err != nil || a.r.Outcome != rpc.OutcomeCommitted || !a.r.Replayed || a.r.JobId != second.JobId {
		t.Fatalf("the submission held after its look: %+v %v, want a replay of job %s", a.r, a.err, second.JobId)
	}
	if cmds := tc.commandsSince(l, last0); len(cmds) != 1 || cmds[0] != fmt.Sprintf("%T", ledger.Admit{}) {
		t.Fatalf("two submissions of one key added commands %v, want one Admit", cmds)
	}
}

func TestAdmissionRejections(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) {
		c.MaxQueuedJobs = 1
		c.AllowedJobTypes = []string{"demo"}
	})
	l := tc.leader()
	ctx := ctxT(t)
	r, err := tc.submit(ctx, l, "t", "k-ok", "fp", "demo", `1`, 0)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("first: %+v %v", r, err)
	}
	r, err = tc.submit(ctx, l, "t", "k-type", "fp", "nope", `1`, 0)
	if err != nil || r.Outcome != rpc.OutcomeRejected || r.Rejection.Status != 422 || r.Rejection.Reason != "unknown_job_type" {
		t.Fatalf("type rejection: %+v %v", r, err)
	}
	r, err = tc.submit(ctx, l, "t", "k-cap", "fp", "demo", `1`, 0)
	if err != nil || r.Outcome != rpc.OutcomeRejected || r.Rejection.Status != 429 || r.Rejection.Reason != "capacity" {
		t.Fatalf("capacity rejection: %+v %v", r, err)
	}
	if want := fmt.Sprintf("datacenter %s holds its maximum of 1 queued jobs", tc.mgrs[l].cfg.Datacenter); r.Rejection.Detail != want {
		t.Fatalf("capacity detail %q, want %q", r.Rejection.Detail, want)
	}
	if !respExpiresAt(r).After(time.Now()) {
		t.Fatalf("a rejection carries its expiry (Retry-After): %v", respExpiresAt(r))
	}
	// The rejection is a stored outcome: replayed as is.
	r2, err := tc.submit(ctx, l, "t", "k-cap", "fp", "demo", `1`, 0)
	if err != nil || r2.Outcome != rpc.OutcomeRejected || !r2.Replayed || r2.JobId != r.JobId {
		t.Fatalf("rejection replay: %+v %v", r2, err)
	}
	info, err := tc.mgrs[l].GetKey(ctx, "t", "k-cap")
	if err != nil || info.State != "rejected" || info.JobId != nil || info.ClientId != "" {
		t.Fatalf("rejected key info: %+v %v", info, err)
	}
}

func TestLedgerFullRefusesWithoutDropping(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.LedgerMaxEntries = 2 })
	l := tc.leader()
	ctx := ctxT(t)
	for _, k := range []string{"a", "b"} {
		if r, err := tc.submit(ctx, l, "t", k, "fp", "demo", `1`, 0); err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", k, r, err)
		}
	}
	if _, err := tc.submit(ctx, l, "t", "c", "fp", "demo", `1`, 0); !errors.Is(err, rpc.ErrLedgerFull) {
		t.Fatalf("want ledger_full, got %v", err)
	}
	for _, k := range []string{"a", "b"} {
		if r, err := tc.submit(ctx, l, "t", k, "fp", "demo", `1`, 0); err != nil || !r.Replayed {
			t.Fatalf("live entry %s must survive: %+v %v", k, r, err)
		}
	}
}

func TestExpiryAndWatermark(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 1, func(c *Config) {
		c.Idempotency.CommittedTTL = 10 * time.Second
		c.Idempotency.CleanupInterval = time.Second
		c.JobRetention = time.Hour
	})
	tc.setNow(clock.Now)
	l := tc.leader()
	ctx := ctxT(t)
	k5 := "c1:5:0123456789abcdef"
	r, err := tc.submit(ctx, l, "t", k5, "fp", "demo", `1`, 0)
	if err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("%+v %v", r, err)
	}
	job5 := r.JobId
	// An out-of-order first attempt with a lower sequence is fine while 5 is live.
	if r, err := tc.submit(ctx, l, "t", "c1:3:0123456789abcdef", "fp", "demo", `1`, 0); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("seq 3 while 5 live: %+v %v", r, err)
	}
	clock.Advance(time.Minute)
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return tc.mgrs[l].FSM().Stats().Entries == 0, "expiry of the committed entries"
	})
	if _, err := tc.mgrs[l].GetKey(ctx, "t", k5); !errors.Is(err, rpc.ErrNotFound) {
		t.Fatalf("expired key must be not found: %v", err)
	}
	r, err = tc.submit(ctx, l, "t", k5, "fp", "demo", `1`, 0)
	if err != nil || r.Outcome != rpc.OutcomeKeyExpired {
		t.Fatalf("late retry of an expired key: want key_expired, got %+v %v", r, err)
	}
	if r.JobId != "" || r.Job != nil {
		t.Fatalf("key_expired must name no job: %+v", r)
	}
	// The job is not executed again: the original is still readable (its
	// retention outlives the key's TTL) and the tenant has exactly the two
	// jobs of sequences 5 and 3.
	if j, err := tc.mgrs[l].GetJob(ctx, "t", job5); err != nil || j.IdempotencyKey != k5 {
		t.Fatalf("original job %s: %+v %v", job5, j, err)
	}
	if n := tc.mgrs[l].FSM().Stats().Jobs; n != 2 {
		t.Fatalf("jobs after the late retry: %d, want 2", n)
	}
	// A new sequence is admitted.
	if r, err := tc.submit(ctx, l, "t", "c1:6:0123456789abcdef", "fp", "demo", `1`, 0); err != nil || r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("seq 6: %+v %v", r, err)
	}
}

func TestLeaderFailoverKeepsJobs(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	l := tc.leader()
	ctx := ctxT(t)
	committed := map[string]string{}
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("c:%d:0123456789abcdef", i+1)
		r, err := tc.submit(ctx, l, "t", k, "fp", "demo", fmt.Sprint(i), 0)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", k, r, err)
		}
		committed[k] = r.JobId
	}
	tc.stop(l)
	nl := tc.leader()
	if nl == l {
		t.Fatal("stopped manager still leads")
	}
	// Every committed key answers with the same job id at the new leader.
	for k, id := range committed {
		r, err := tc.submit(ctx, nl, "t", k, "fp", "demo", "0", 0)
		if err != nil || r.JobId != id || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("after failover %s: %+v %v (want %s)", k, r, err, id)
		}
	}
	// Restart the stopped manager; it catches up.
	tc.start(l)
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return tc.mgrs[l].FSM().Stats().Jobs == 20, "the restarted manager to catch up"
	})
}

func TestRestartAllFromDataDirsLosesNothing(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.SnapshotThreshold = 16; c.TrailingLogs = 4 })
	tc.leader()
	ctx := ctxT(t)
	ids := map[string]string{}
	for i := 0; i < 60; i++ {
		k := fmt.Sprintf("k%d", i)
		r, err := tc.submitToLeader(ctx, "t", k, "fp", "demo", `1`, 0)
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", k, r, err)
		}
		ids[k] = r.JobId
	}
	if err := tc.mgrs[tc.leader()].Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	tc.closeAll()
	for i := range tc.cfgs {
		tc.start(i)
	}
	tc.leader()
	for k, id := range ids {
		r, err := tc.submitToLeader(ctx, "t", k, "fp", "demo", `1`, 0)
		if err != nil || r.JobId != id || !r.Replayed {
			t.Fatalf("after restart %s: %+v %v (want %s)", k, r, err, id)
		}
	}
	if st := tc.mgrs[tc.leader()].FSM().Stats(); st.Jobs != 60 {
		t.Fatalf("jobs after restart: %+v", st)
	}
}

func TestListJobsPagesWithCursor(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	l := tc.leader()
	ctx := ctxT(t)
	for i := 0; i < 7; i++ {
		typ := "a"
		if i%2 == 1 {
			typ = "b"
		}
		if _, err := tc.submit(ctx, l, "t", fmt.Sprintf("k%d", i), "fp", typ, `1`, 0); err != nil {
			t.Fatal(err)
		}
	}
	pages := func(desc bool) (got []string, cursors []string) {
		after := ""
		for {
			page, err := tc.mgrs[l].ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "t", Type: "a", Limit: 2, After: after, Desc: desc})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page.Jobs {
				got = append(got, j.IdempotencyKey)
			}
			if page.Next == "" {
				return got, cursors
			}
			after = page.Next
			cursors = append(cursors, after)
		}
	}
	got, ascCursors := pages(false)
	if fmt.Sprint(got) != "[k0 k2 k4 k6]" {
		t.Fatalf("pages: %v", got)
	}
	got, descCursors := pages(true)
	if fmt.Sprint(got) != "[k6 k4 k2 k0]" {
		t.Fatalf("pages newest first: %v", got)
	}
	if _, err := tc.mgrs[l].ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "t", After: "garbage"}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("bad cursor: %v", err)
	}
	// A cursor pages only in the order of the page that returned it.
	if _, err := tc.mgrs[l].ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "t", Type: "a", After: ascCursors[0], Desc: true}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("oldest-first cursor newest first: %v", err)
	}
	if _, err := tc.mgrs[l].ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "t", Type: "a", After: descCursors[0]}); !errors.Is(err, rpc.ErrInvalid) {
		t.Fatalf("newest-first cursor oldest first: %v", err)
	}
}

// A cursor names its page's order; anything else is not a cursor.
func TestCursorRoundTrip(t *testing.T) {
	for _, seq := range []uint64{0, 1, 12345, ^uint64(0)} {
		for _, desc := range []bool{false, true} {
			if got, gotDesc, ok := decodeCursor(encodeCursor(seq, desc)); !ok || got != seq || gotDesc != desc {
				t.Fatalf("cursor %d desc %v: %d %v %v", seq, desc, got, gotDesc, ok)
			}
		}
	}
	for _, raw := range []string{"v1:", "v1:d", "v1:-1", "v1:d-1", "v1:x1", "v2:1", "v1:1a"} {
		if _, _, ok := decodeCursor(base64.RawURLEncoding.EncodeToString([]byte(raw))); ok {
			t.Fatalf("%q decoded", raw)
		}
	}
}

// respExpiresAt is when r's entry expires, as the gate reads it.
func respExpiresAt(r *rpcpb.SubmitResponse) time.Time {
	return time.Unix(0, r.ExpiresAtUnixNano)
}

// TestSubmitRefusesADatacenterListThatIsNoSet: the ledger keeps a job's
// datacenters as a set (the outbox counts what it owes each one by it), so a
// list out of order or naming a datacenter twice is refused before anything
// is recorded.
func TestSubmitRefusesADatacenterListThatIsNoSet(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	ctx := ctxT(t)
	for _, dcs := range [][]string{{"dc1", "dc1"}, {"dc2", "dc1"}, {"dc1", "dc2", "dc2"}} {
		req := &rpcpb.SubmitRequest{Tenant: "default", Key: key1, Fingerprint: "fp1", WaitMillis: 1000,
			Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: dcs}}
		if resp, err := tc.mgrs[tc.leader()].Submit(ctx, req); !errors.Is(err, rpc.ErrInvalid) {
			t.Fatalf("datacenters %v: %+v, %v; want invalid", dcs, resp, err)
		}
	}
	if _, ok := tc.mgrs[tc.leader()].fsm.Entry("default", key1); ok {
		t.Fatal("a refused submission left an entry")
	}
}
