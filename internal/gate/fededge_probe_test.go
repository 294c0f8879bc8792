package gate

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// TestFedEdgeInProgressElsewhereIsNeverFinal: while a first attempt through
// the dc2 gate is in flight at dc2's leader (dc1 has committed it), the same
// key through the dc1 gate, the set written in another order, is 409, never
// a 201 built from dc1's outcome alone, and its gate caches nothing: once the
// first attempt ends, the retry is the final answer, the first one's bytes.
func TestFedEdgeInProgressElsewhereIsNeverFinal(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, func(cfg *Config, deps *Deps) {
		cfg.Idempotency.WaitForPending = false // leaders answer in_progress at once
	})
	inFlight, release := holdInFlight(t, f.m2)
	var first result
	var firstErr error
	var wg sync.WaitGroup
	wg.Go(func() { first, firstErr = f.g2.trySubmit(skey(1), `{"type":"x","datacenters":["dc1","dc2"]}`) })
	<-inFlight
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) { return f.m1.Jobs() == 1, "dc1 to commit the first attempt" })

	body := `{"datacenters":["dc2","dc1"],"type":"x"}`
	wantProblem(t, f.g1.submit(t, skey(1), body), http.StatusConflict, api.CodeRequestInProgress)
	release()
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	job := wantJob(t, first, http.StatusCreated)
	again := f.g1.submit(t, skey(1), body)
	if got := wantJob(t, again, http.StatusCreated); got.JobID != job.JobID || !bytes.Equal(again.body, first.body) {
		t.Fatalf("the retry through dc1's gate:\n%s\nthe first answer:\n%s", again.body, first.body)
	}
	if n1, n2 := f.m1.Jobs(), f.m2.Jobs(); n1 != 1 || n2 != 1 {
		t.Fatalf("datacenters hold %d and %d jobs, want 1 and 1", n1, n2)
	}
}

// TestFedEdgeTTLSameExpiryThroughEveryGate: a job for three datacenters
// with Idempotency-TTL, dc3 unreachable at first: the retry through another
// gate completes dc3, and every answer, through every gate, carries one
// expiry, the earliest of the datacenters' entries.
func TestFedEdgeTTLSameExpiryThroughEveryGate(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{}, func(cfg *Config, deps *Deps) {
		cfg.ForwardTimeout = 300 * time.Millisecond
		cfg.Idempotency.PendingWaitTimeout = 200 * time.Millisecond
	})
	const body = `{"type":"x","datacenters":["dc3","dc2","dc1"]}`
	ttl := []string{api.HeaderIdempotencyTTL, "120"}
	f.m[2].SetSubmitHook(unavailable)
	wantProblem(t, f.g[0].submit(t, skey(1), body, ttl...), http.StatusServiceUnavailable, api.CodeUnavailable)
	f.m[2].SetSubmitHook(nil)
	e1, _ := f.m[0].FSM().Entry(api.DefaultTenant, skey(1))
	want := api.FormatTime(time.Unix(0, e1.ExpiresAt))
	var firstBody []byte
	for _, tg := range []*testGate{f.g[1], f.g[2], f.g[0], f.g[1]} {
		res := tg.submit(t, skey(1), body, ttl...)
		wantStatus(t, res, http.StatusCreated)
		wantHeader(t, res, api.HeaderIdempotencyExpiresAt, want)
		if firstBody == nil {
			firstBody = res.body
		} else if !bytes.Equal(res.body, firstBody) {
			t.Fatalf("answers differ:\n%s\n%s", res.body, firstBody)
		}
	}
	if n := f.jobs(); n != [3]int{1, 1, 1} {
		t.Fatalf("datacenters hold %v jobs, want one each", n)
	}
}

// TestFedEdgeLateCommitIsCarried: dc2's leader admits the job only after
// the gate's deadline: the answer is 503, and the retry gets the final
// answer from both datacenters' entries, one job each.
func TestFedEdgeLateCommitIsCarried(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, func(cfg *Config, deps *Deps) {
		cfg.ForwardTimeout = 300 * time.Millisecond
		cfg.Idempotency.PendingWaitTimeout = 100 * time.Millisecond
	})
	rel := make(chan struct{})
	released := sync.OnceFunc(func() { close(rel) })
	t.Cleanup(released)
	var once sync.Once
	f.m2.mu.Lock()
	f.m2.admitHook = func(context.Context) { // past the gate's deadline
		once.Do(func() { <-rel })
	}
	f.m2.mu.Unlock()
	const body = `{"type":"x","datacenters":["dc1","dc2"]}`
	wantProblem(t, f.g1.submit(t, skey(1), body), http.StatusServiceUnavailable, api.CodeUnavailable)
	released()
	res := f.g2.submit(t, skey(1), body)
	job := wantJob(t, res, http.StatusCreated)
	if len(job.Datacenters) != 2 {
		t.Fatalf("datacenters %+v", job.Datacenters)
	}
	again := f.g1.submit(t, skey(1), body)
	if !bytes.Equal(again.body, res.body) {
		t.Fatalf("answers differ:\n%s\n%s", again.body, res.body)
	}
	if n1, n2 := f.m1.Jobs(), f.m2.Jobs(); n1 != 1 || n2 != 1 {
		t.Fatalf("datacenters hold %d and %d jobs, want 1 and 1", n1, n2)
	}
}

// TestFedEdgeLeaderLostMidFanout: dc2 has no leader when the fan-out
// reaches it, and one again before the deadline: one answer, 201.
func TestFedEdgeLeaderLostMidFanout(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	f.m2.SetLeader(false)
	var res result
	var err error
	var wg sync.WaitGroup
	wg.Go(func() { res, err = f.g1.trySubmit(skey(1), `{"type":"x","datacenters":["dc1","dc2"]}`) })
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) { return f.m1.Jobs() == 1, "dc1 to commit" })
	f.m2.SetLeader(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	wantJob(t, res, http.StatusCreated)
	if n1, n2 := f.m1.Jobs(), f.m2.Jobs(); n1 != 1 || n2 != 1 {
		t.Fatalf("datacenters hold %d and %d jobs, want 1 and 1", n1, n2)
	}
}

// TestFedEdgeOmittedAtOnceThroughBothGates: an omitted list sent at once
// through the dc1 and dc2 gates, overlapping at both leaders: one job, and
// both gates answer its bytes.
func TestFedEdgeOmittedAtOnceThroughBothGates(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	release := make(chan struct{})
	hold := func(ctx context.Context, req *rpcpb.SubmitRequest) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	f.m1.SetSubmitHook(hold)
	f.m2.SetSubmitHook(hold)
	const body = `{"type":"x","payload":{"n":1}}`
	var results [2]result
	var errs [2]error
	var wg sync.WaitGroup
	for i, tg := range []*testGate{f.g1, f.g2} {
		wg.Go(func() { results[i], errs[i] = tg.trySubmit(skey(7), body) })
	}
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return f.m1.Submits() >= 1 && f.m2.Submits() >= 1, "both gates' claims held"
	})
	close(release)
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	if n := f.m1.Jobs() + f.m2.Jobs(); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	// Either answer may be 422 idempotency_key_claimed (documented); the
	// retries through both gates are the job's bytes.
	a := f.g1.submit(t, skey(7), body)
	b := f.g2.submit(t, skey(7), body)
	wantStatus(t, a, http.StatusCreated)
	if !bytes.Equal(a.body, b.body) {
		t.Fatalf("answers differ:\n%s\n%s", a.body, b.body)
	}
	for i, res := range results {
		if res.status == http.StatusCreated && !bytes.Equal(res.body, a.body) {
			t.Fatalf("gate %d's first answer differs:\n%s\n%s", i+1, res.body, a.body)
		}
	}
}

// TestFedEdgeDatacenterAddedBetweenAttempts: an omitted list answered in a
// federation of dc1 and dc2 (home dc1, a claim in dc2), retried through a
// gate of dc3, which joined since: the first answer's bytes, one job.
func TestFedEdgeDatacenterAddedBetweenAttempts(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{}, nil)
	two := startGate(t, f.addrs["dc1"], func(cfg *Config, deps *Deps) {
		cfg.Datacenter, cfg.NodeName = "dc1", "gate-dc1-two"
		deps.Federation = StaticFederation{"dc1": f.addrs["dc1"], "dc2": f.addrs["dc2"]}
	})
	const body = `{"type":"x","payload":{"n":1}}`
	first := two.submit(t, skey(1), body)
	wantJob(t, first, http.StatusCreated)
	for _, tg := range []*testGate{f.g[2], f.g[1], f.g[0]} {
		res := tg.submit(t, skey(1), body)
		wantStatus(t, res, http.StatusCreated)
		if !bytes.Equal(res.body, first.body) {
			t.Fatalf("answers differ:\n%s\n%s", res.body, first.body)
		}
	}
	if n := f.jobs(); n != [3]int{1, 0, 0} {
		t.Fatalf("datacenters hold %v jobs, want 1, 0, 0", n)
	}
}
