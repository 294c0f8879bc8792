package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
	"github.com/once-dev/once/tests/localcluster"
)

// TestCancelAndRetry: real processes, two tenants. A queued job is
// cancelled and a worker never leases it; a job that fails on its last
// attempt (dead) is retried (through oncectl) and the worker completes it
// at its next attempt; each action's key replayed through the other gate
// is the same answer, never a second action; the other tenant gets 404
// for both jobs.
func TestCancelAndRetry(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("tok-alpha alpha\ntok-beta beta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3, 2, func(o *localcluster.Options) {
		o.GateEnv = append(o.GateEnv, "GATE_TOKEN_FILE="+tokens)
		o.ManagerEnv = append(o.ManagerEnv, "MANAGER_JOB_MAX_ATTEMPTS=1")
	})
	ctx := ctxFor(t, 3*time.Minute)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	gates := c.GateURLs()
	newClient := func(token string, gates []string) *client.Client {
		t.Helper()
		ks, err := client.OpenKeys(filepath.Join(t.TempDir(), "keys.json"), client.KeysOptions{ClientID: "e2e.actions"})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(gates, client.Options{Keys: ks, Token: token, MaxAttempts: 60,
			InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, AttemptTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	alpha, alpha2 := newClient("tok-alpha", gates[:1]), newClient("tok-alpha", gates[1:])
	beta := newClient("tok-beta", gates)

	const cancelType, retryType = "cancel-e2e", "retry-e2e"
	submit := func(typ string) string {
		res, err := alpha.Submit(ctx, api.JobRequest{Type: typ, Payload: json.RawMessage(`{"n":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		return res.Job.JobID
	}
	cancelled, retried := submit(cancelType), submit(retryType)

	// Cancel, then the same key through the other gate: the same answer.
	const cancelKey = "e2e.actions:1000:0123456789abcdef"
	first, err := alpha.Cancel(ctx, cancelled, cancelKey)
	if err != nil || first.Job.State != api.JobStatusCancelled || first.Replayed {
		t.Fatalf("cancel: %+v %v", first, err)
	}
	again, err := alpha2.Cancel(ctx, cancelled, cancelKey)
	if err != nil || !again.Replayed || !reflect.DeepEqual(again.Job, first.Job) {
		t.Fatalf("the cancel's key through the other gate: %+v %v, want %+v replayed", again, err, first.Job)
	}
	// Another tenant: 404 for both jobs, whatever the action.
	for _, id := range []string{cancelled, retried} {
		if _, err := beta.Cancel(ctx, id, ""); !errors.Is(err, client.ErrJobNotFound) {
			t.Fatalf("another tenant's cancel of %s: %v", id, err)
		}
		if _, err := beta.Retry(ctx, id, ""); !errors.Is(err, client.ErrJobNotFound) {
			t.Fatalf("another tenant's retry of %s: %v", id, err)
		}
	}

	// A worker of both types: the retried job fails its first (and last)
	// attempt, and succeeds after the retry.
	var mu sync.Mutex
	seen := map[string][]int{}
	handler := func(_ context.Context, job api.Job, attempt int) (any, error) {
		mu.Lock()
		seen[job.JobID] = append(seen[job.JobID], attempt)
		mu.Unlock()
		if attempt == 1 {
			return nil, errors.New("the first attempt fails")
		}
		return map[string]int{"attempt": attempt}, nil
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := alpha.Run(wctx, client.WorkerOptions{Types: []string{cancelType, retryType}, LeaseFor: 10 * time.Second,
			Wait: 2 * time.Second}, handler); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	t.Cleanup(func() { stop(); wg.Wait() })
	waitState := func(id, state string) api.Job {
		t.Helper()
		var j *api.Job
		testutil.WaitFor(t, left(ctx), func() (bool, string) {
			var err error
			j, err = alpha.GetJob(ctx, id)
			if err != nil {
				return false, "job " + id + ": " + err.Error()
			}
			return j.State == state, "job " + id + " " + state + ", now " + j.State
		})
		return *j
	}
	if dead := waitState(retried, api.JobStatusDead); dead.Attempts != 1 || dead.Error == "" {
		t.Fatalf("dead job %+v", dead)
	}
	if _, err := alpha.Cancel(ctx, retried, ""); !errors.Is(err, client.ErrJobStateConflict) {
		t.Fatalf("cancel of a dead job: %v", err)
	}

	// The retry, through oncectl, under a key; its repeat through the other
	// gate is a replay, never a second retry.
	const retryKey = "e2e.actions:1001:0123456789abcdef"
	out, code := oncectl(t, "--gates", gates[0], "--token", "tok-alpha", "-o", "json", "job", "retry", retried, "--key", retryKey)
	var r client.Result
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Job.State != api.JobStatusQueued || r.Job.Attempts != 1 {
		t.Fatalf("oncectl job retry: exit %d: %s (%v)", code, out, err)
	}
	done := waitState(retried, api.JobStatusSucceeded)
	if done.Attempts != 2 || string(done.Result) != `{"attempt":2}` {
		t.Fatalf("the retried job: %+v", done)
	}
	replay, err := alpha2.Retry(ctx, retried, retryKey)
	if err != nil || !replay.Replayed || replay.Job.State != api.JobStatusSucceeded || replay.Job.Attempts != 2 {
		t.Fatalf("the retry's key again: %+v %v", replay, err)
	}
	if _, err := alpha.Retry(ctx, retried, ""); !errors.Is(err, client.ErrJobStateConflict) {
		t.Fatalf("retry of a succeeded job: %v", err)
	}
	// The cancel's key used for a retry: reused.
	if _, err := alpha.Retry(ctx, cancelled, cancelKey); !errors.Is(err, client.ErrKeyReused) {
		t.Fatalf("the cancel's key for a retry: %v", err)
	}

	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if runs := seen[cancelled]; len(runs) != 0 {
		t.Fatalf("the cancelled job was run: attempts %v", runs)
	}
	if runs := seen[retried]; !reflect.DeepEqual(runs, []int{1, 2}) {
		t.Fatalf("the retried job ran at attempts %v, want [1 2]", runs)
	}
	if j, err := alpha.GetJob(ctx, cancelled); err != nil || j.State != api.JobStatusCancelled || j.Attempts != 0 {
		t.Fatalf("the cancelled job at the end: %+v %v", j, err)
	}
	list, err := alpha.ListPage(ctx, client.ListOptions{State: api.JobStatusCancelled}, "")
	if err != nil || len(list.Jobs) != 1 || list.Jobs[0].JobID != cancelled || !strings.Contains(string(list.Jobs[0].Payload), "n") {
		t.Fatalf("cancelled jobs: %+v %v", list, err)
	}
}
