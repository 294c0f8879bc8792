package gate

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// TestKeyedCallOutlivesTheCallerWhoStartedIt: two lease calls with one
// Idempotency-Key at once run once, and the second waits for the first's
// answer. When the first caller hangs up (its HTTP client timed out, and it
// retries with the key, as a worker does), the call goes on for the one still
// waiting: the waiter gets the long poll's jobs, not a 503 it did nothing to
// cause.
func TestKeyedCallOutlivesTheCallerWhoStartedIt(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, nil)
	const key, body = "lease-hang-up", `{"wait_seconds":20}`

	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/v1/leases", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(api.HeaderIdempotencyKey, key)
	firstDone := make(chan error, 1)
	go func() {
		resp, err := g.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		firstDone <- err
	}()
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return mgr.leases.Load() == 1, fmt.Sprintf("the first lease to reach the manager (%d leases)", mgr.leases.Load())
	})
	second := make(chan result, 1)
	go func() {
		res, err := g.try(http.MethodPost, "/v1/leases", strings.NewReader(body), api.HeaderIdempotencyKey, key)
		if err != nil {
			res = result{status: -1, body: []byte(err.Error())}
		}
		second <- res
	}()
	waitCallers(t, g, key, 2)
	hangUp()
	if err := <-firstDone; err == nil {
		t.Fatal("the first lease was answered before any job was queued")
	}
	job := wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	res := <-second
	leases := decodeLeases(t, res)
	if len(leases) != 1 || leases[0].Job.JobID != job.JobID {
		t.Fatalf("the waiting lease got %s, want job %s", res.body, job.JobID)
	}
	if n := mgr.leases.Load(); n != 1 {
		t.Fatalf("the manager saw %d leases, want 1: the calls with one key run once", n)
	}
}

// TestKeyedCallTransientAnswerIsNoReplay: a caller that waited for another
// caller's run of its key, which ended in a 503 (no leader), gets the 503 as
// it is: not marked Idempotent-Replayed, since nothing was decided or kept.
func TestKeyedCallTransientAnswerIsNoReplay(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.ForwardTimeout = 5 * time.Second })
	mgr.SetLeader(false)
	const key = "lease-no-leader"
	call := func() <-chan result {
		ch := make(chan result, 1)
		go func() {
			res, err := g.try(http.MethodPost, "/v1/leases", strings.NewReader(`{}`), api.HeaderIdempotencyKey, key)
			if err != nil {
				res = result{status: -1, body: []byte(err.Error())}
			}
			ch <- res
		}()
		return ch
	}
	first := call()
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return mgr.leases.Load() >= 1, "the first lease to reach the manager"
	})
	second := call()
	waitCallers(t, g, key, 2)
	for _, ch := range []<-chan result{first, second} {
		res := <-ch
		wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
		wantNoHeader(t, res, api.HeaderReplayed)
	}
}

// TestKeyedCallJoinedByAnotherRequestRunsItsOwn: a call that joins the run
// of another request under its key (the key reused with another body) gets
// nothing of that run unless the run's answer was kept, and then a 422.
// Here the other request's run is refused by the leader, which keeps the
// key's answer for this very request (sent earlier through another gate):
// this request must run on its own and get its replay, not the other's 422.
func TestKeyedCallJoinedByAnotherRequestRunsItsOwn(t *testing.T) {
	mgr, addr := startManager(t, managertest.Options{})
	first := startGate(t, []string{addr}, nil)
	// The other request's run must outlast the wait for a leader below on
	// a slow machine: a 503 would decide nothing either, but the test wants
	// the leader's 422.
	g := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) { cfg.ForwardTimeout = 30 * time.Second })
	wantJob(t, first.submit(t, skey(1), `{"type":"email"}`), http.StatusCreated)
	const key, mine, other = "lease-joined", `{"max_jobs":1}`, `{"max_jobs":2}`
	leases := decodeLeases(t, first.post(t, "/v1/leases", mine, api.HeaderIdempotencyKey, key))
	if len(leases) != 1 {
		t.Fatalf("the first lease got %d leases, want 1", len(leases))
	}

	call := func(body string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			res, err := g.try(http.MethodPost, "/v1/leases", strings.NewReader(body), api.HeaderIdempotencyKey, key)
			if err != nil {
				res = result{status: -1, body: []byte(err.Error())}
			}
			ch <- res
		}()
		return ch
	}
	mgr.SetLeader(false) // the run waits for a leader
	reuse := call(other)
	waitCallers(t, g, key, 1)
	retry := call(mine)
	waitCallers(t, g, key, 2)
	mgr.SetLeader(true)

	wantProblem(t, <-reuse, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	res := <-retry
	if got := decodeLeases(t, res); len(got) != 1 || got[0].LeaseID != leases[0].LeaseID {
		t.Fatalf("the retry got %s, want lease %s", res.body, leases[0].LeaseID)
	}
	wantHeader(t, res, api.HeaderReplayed, "true")
}

// waitCallers waits until n callers of the default tenant's worker call with
// Idempotency-Key key share its run.
func waitCallers(t *testing.T, g *testGate, key string, n int) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		got := g.workerReplays.Callers(keyedCall(api.DefaultTenant, key))
		return got == n, fmt.Sprintf("%d callers of key %s to share its run (%d do)", n, key, got)
	})
}
