package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
)

// TestClientExactlyOnceThroughKills is the pkg/client example as a program:
// 1,000 jobs submitted through both gates while a gate and then the manager
// leader are killed with SIGKILL; listing them afterwards through the client
// finds every job exactly once, with the id its submission returned.
func TestClientExactlyOnceThroughKills(t *testing.T) {
	c := startCluster(t, 3, 2, nil)
	ctx := ctxFor(t, 3*time.Minute)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	ks, err := client.OpenKeys(filepath.Join(t.TempDir(), "keys.json"), client.KeysOptions{ClientID: "e2e.client"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.GateURLs(), client.Options{Keys: ks, MaxAttempts: 60, InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, AttemptTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	const total, workers = 1000, 8
	jobType := "client-e2e"
	var next atomic.Int64
	var mu sync.Mutex
	ids := map[string]string{} // job id -> key
	killGate, killLeader := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				switch i {
				case total * 3 / 10:
					close(killGate)
				case total * 6 / 10:
					close(killLeader)
				}
				res, err := cl.Submit(ctx, api.JobRequest{Type: jobType, Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
				if err != nil {
					t.Errorf("job %d: %v", i, err)
					return
				}
				mu.Lock()
				if k, dup := ids[res.Job.JobID]; dup {
					t.Errorf("job id %s returned for keys %s and %s", res.Job.JobID, k, res.Key)
				}
				ids[res.Job.JobID] = res.Key
				mu.Unlock()
			}
		}()
	}
	<-killGate
	if err := c.Gates[0].Kill(); err != nil {
		t.Fatal(err)
	}
	<-killLeader
	// On a loaded machine an election may be under way: the leader to kill is
	// the one every manager agrees on once it is over.
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(ids) != total {
		t.Fatalf("%d distinct job ids for %d submissions", len(ids), total)
	}
	listed := 0
	for j, err := range cl.ListJobs(ctx, client.ListOptions{Type: jobType, Limit: 250}) {
		if err != nil {
			t.Fatal(err)
		}
		listed++
		key, ok := ids[j.JobID]
		if !ok {
			t.Fatalf("listed job %s was never returned by a submission", j.JobID)
		}
		if key != j.IdempotencyKey {
			t.Fatalf("job %s has key %s, its submission used %s", j.JobID, j.IdempotencyKey, key)
		}
		delete(ids, j.JobID) // a second listing of the same id fails above
	}
	if listed != total || len(ids) != 0 {
		t.Fatalf("listed %d jobs, want %d; %d submitted jobs not listed", listed, total, len(ids))
	}
}
