package manager

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// TestSubmissionIsOneRaftEntry: a unique submission is reserved and decided in
// one Raft entry (an Admit): the leader's log holds exactly one admission
// command per submission, none of them in a batch.
func TestSubmissionIsOneRaftEntry(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	const n = 20
	counts := submitSequentially(t, tc, "k", n)
	if counts[ledger.TypeAdmit] != n {
		t.Fatalf("%d admit entries for %d submissions (log: %v)", counts[ledger.TypeAdmit], n, counts)
	}
	if counts[ledger.TypeAdmitBatch] != 0 {
		t.Fatalf("%d admit batches for sequential submissions (log: %v)", counts[ledger.TypeAdmitBatch], counts)
	}
}

// submitSequentially submits n unique keys one after the other to the leader
// (so no two share a batch entry) and counts the ledger commands of the
// entries the leader's log gained meanwhile, by type. A leader change in
// between is no matter: the log that leads at the end holds every
// committed entry.
func submitSequentially(t *testing.T, tc *testCluster, prefix string, n int) map[ledger.CommandType]int {
	t.Helper()
	ctx := ctxT(t)
	first := tc.mgrs[tc.leader()].Raft().AppliedIndex() + 1
	for i := 0; i < n; i++ {
		resp, err := tc.submitToLeader(ctx, "t", fmt.Sprintf("%s%d", prefix, i), "fp", "demo", `1`, 0)
		if err != nil || resp.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("submission %d: %+v %v", i, resp, err)
		}
	}
	m := tc.mgrs[tc.leader()]
	last := m.Raft().LastIndex()
	counts := map[ledger.CommandType]int{}
	for idx := first; idx <= last; idx++ {
		var lg raft.Log
		if err := m.logStore.GetLog(idx, &lg); err != nil {
			t.Fatalf("log %d: %v", idx, err)
		}
		if lg.Type != raft.LogCommand {
			continue
		}
		cmd, err := ledger.DecodeCommand(lg.Data)
		if err != nil {
			t.Fatalf("log %d: %v", idx, err)
		}
		counts[cmd.CommandType()]++
	}
	return counts
}

// TestAdmissionRejectionIsOneRound: a submission admission refuses (a type the
// datacenter does not accept) is recorded REJECTED by the same single entry.
func TestAdmissionRejectionIsOneRound(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.AllowedJobTypes = []string{"demo"} })
	ctx := ctxT(t)
	m := tc.mgrs[tc.leader()]
	before := m.Raft().LastIndex()
	resp, err := tc.submitToLeader(ctx, "t", "k", "fp", "other", `1`, 0)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != rpc.OutcomeRejected {
		t.Fatalf("outcome %s, want rejected", resp.Outcome)
	}
	var lg raft.Log
	found := false
	for idx := before + 1; idx <= m.Raft().LastIndex(); idx++ {
		if err := m.logStore.GetLog(idx, &lg); err != nil || lg.Type != raft.LogCommand {
			continue
		}
		cmd, err := ledger.DecodeCommand(lg.Data)
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := cmd.(ledger.Admit); ok && a.Reserve.Key == "k" {
			if _, isReject := a.Outcome.(ledger.Reject); !isReject {
				t.Fatalf("admit outcome %T, want a reject", a.Outcome)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("no admit entry for the rejected submission")
	}
}

// TestWorkerCommandsShareEntries: 40 workers completing their jobs at once
// take far fewer than 40 Raft entries (WorkerBatch), each completion is
// answered with its own job, and a completion repeated after the batch gets
// the same answer, while a completion under a lease that is not the job's is
// refused (lease fencing holds inside a batch).
func TestWorkerCommandsShareEntries(t *testing.T) {
	tc := newTestCluster(t, 3, nil)
	queueOn(tc)
	ctx := ctxT(t)
	const n = 40
	submitJobs(t, tc, n, "email")
	m := tc.mgrs[tc.leader()]
	lr, err := m.Lease(ctx, &rpcpb.LeaseRequest{Tenant: "acme", Worker: "w", MaxJobs: n, LeaseForNanos: int64(time.Minute)})
	if err != nil || len(lr.Leases) != n {
		t.Fatalf("lease: %d leases, %v", len(lr.Leases), err)
	}
	first := m.Raft().LastIndex() + 1
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, l := range lr.Leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			j, err := m.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "acme", JobId: l.Job.JobId, LeaseId: l.LeaseId, Result: []byte(fmt.Sprintf(`{"i":%d}`, i))})
			switch {
			case err != nil:
				errs[i] = err
			case j.JobId != l.Job.JobId || j.State != api.JobStatusSucceeded || string(j.Result) != fmt.Sprintf(`{"i":%d}`, i):
				errs[i] = fmt.Errorf("completion %d answered %+v", i, j)
			}
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("completion %d: %v", i, err)
		}
	}
	// Count the entries the completions took on the log that leads now.
	m = tc.mgrs[tc.leader()]
	entries, batches := 0, 0
	for idx := first; idx <= m.Raft().LastIndex(); idx++ {
		var lg raft.Log
		if err := m.logStore.GetLog(idx, &lg); err != nil {
			t.Fatalf("log %d: %v", idx, err)
		}
		if lg.Type != raft.LogCommand {
			continue
		}
		cmd, err := ledger.DecodeCommand(lg.Data)
		if err != nil {
			t.Fatal(err)
		}
		switch c := cmd.(type) {
		case ledger.Complete:
			entries++
		case ledger.WorkerBatch:
			entries++
			batches += len(c.Items)
		}
	}
	t.Logf("%d completions took %d entries (%d completions batched)", n, entries, batches)
	if batches == 0 || entries >= n {
		t.Fatalf("%d concurrent completions took %d entries, %d of them in batches: nothing was batched", n, entries, batches)
	}
	// Recorded once: the same completion again gets the same job; another
	// lease's ID is refused.
	l := lr.Leases[0]
	j, err := m.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "acme", JobId: l.Job.JobId, LeaseId: l.LeaseId, Result: []byte(`{"i":0}`)})
	if err != nil || j.State != api.JobStatusSucceeded || string(j.Result) != `{"i":0}` {
		t.Fatalf("a repeated completion: %+v %v", j, err)
	}
	if _, err := m.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "acme", JobId: l.Job.JobId, LeaseId: lr.Leases[1].LeaseId}); !errors.Is(err, &rpc.Error{Code: rpc.CodeLeaseLost}) {
		t.Fatalf("a completion under another job's lease: %v, want lease_lost", err)
	}
}
