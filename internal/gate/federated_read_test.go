package gate

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// readLayer is a manager as a gate reaches it, counting the job reads that
// reach it; before, when set, runs before the manager sees a job read (it
// may block, honouring ctx), after once the manager has answered it.
type readLayer struct {
	*manager.Manager
	reads         atomic.Int64
	before, after atomic.Pointer[func(ctx context.Context)]
}

func (l *readLayer) GetJob(ctx context.Context, tenant, id string) (*rpcpb.Job, error) {
	l.reads.Add(1)
	if h := l.before.Load(); h != nil {
		(*h)(ctx)
	}
	job, err := l.Manager.GetJob(ctx, tenant, id)
	if h := l.after.Load(); h != nil {
		(*h)(ctx)
	}
	return job, err
}

// startReadManager starts datacenter dc's manager behind a readLayer and
// returns the layer and the manager's address.
func startReadManager(t *testing.T, dc string) (*readLayer, string) {
	t.Helper()
	l := &readLayer{}
	c := managertest.Start(t, managertest.Options{Datacenter: dc, Serve: func(m *manager.Manager) rpc.Service {
		l.Manager = m
		return l
	}})
	return l, c.Addrs[0]
}

// silentManager is the address of a manager that accepts connections and
// never answers (a partitioned or hung datacenter).
func silentManager(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// closedPort is the address of a port nothing listens on (a datacenter
// whose managers are down).
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// federatedGate starts dc's gate, whose own managers are at own, in the
// federation fed, with a read bound of bound.
func federatedGate(t *testing.T, dc, own string, fed StaticFederation, bound time.Duration) *testGate {
	t.Helper()
	return startGate(t, []string{own}, func(cfg *Config, deps *Deps) {
		cfg.Datacenter, cfg.NodeName = dc, "gate-"+dc
		cfg.ForwardTimeout = bound
		deps.Federation = fed
	})
}

// TestFederatedReadOwnSilentJobElsewhere: when the gate's own datacenter
// accepts connections and never answers, GET /v1/jobs/{id} still finds a job
// of another datacenter, before the read's bound ends (a job of dc2 alone
// cannot be in dc1: the answer does not wait for dc1).
func TestFederatedReadOwnSilentJobElsewhere(t *testing.T) {
	_, a2 := startReadManager(t, "dc2")
	silent := silentManager(t)
	fed := StaticFederation{"dc1": {silent}, "dc2": {a2}}
	only2 := wantJob(t, federatedGate(t, "dc2", a2, nil, 5*time.Second).submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)

	const bound = 2 * time.Second
	g1 := federatedGate(t, "dc1", silent, fed, bound)
	start := time.Now()
	got := wantJob(t, g1.get(t, "/v1/jobs/"+only2.JobID), http.StatusOK)
	if took := time.Since(start); took >= bound {
		t.Fatalf("the read took %v, not within its bound %v", took, bound)
	}
	if got.JobID != only2.JobID || len(got.Datacenters) != 1 || got.Datacenters["dc2"].Status != api.JobStatusCommitted {
		t.Fatalf("job %+v, want dc2's copy of %s", got, only2.JobID)
	}
}

// TestFederatedReadOwnDownNobodyHasIt: when the gate's own datacenter is
// down (nothing listens on its port), a job no other datacenter holds is 503
// with Retry-After, never 404 (the own datacenter may hold it), and the
// other datacenters were asked.
func TestFederatedReadOwnDownNobodyHasIt(t *testing.T) {
	m2, a2 := startReadManager(t, "dc2")
	down := closedPort(t)
	g1 := federatedGate(t, "dc1", down, StaticFederation{"dc1": {down}, "dc2": {a2}}, time.Second)
	res := g1.get(t, "/v1/jobs/01a20087-00af-7408-a87b-1180decbaa77")
	wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
	if res.header.Get(api.HeaderRetryAfter) == "" {
		t.Fatal("503 without Retry-After")
	}
	if m2.reads.Load() == 0 {
		t.Fatal("dc2 was never asked")
	}
}

// TestFederatedReadOwnLateAnswerWins: a job of dc1 and dc2 read through the
// dc1 gate whose datacenter answers late (only once dc2 has answered, after
// the hedge delay) but within the bound is dc1's copy, not dc2's.
func TestFederatedReadOwnLateAnswerWins(t *testing.T) {
	m1, a1 := startReadManager(t, "dc1")
	m2, a2 := startReadManager(t, "dc2")
	fed := StaticFederation{"dc1": {a1}, "dc2": {a2}}
	g1 := federatedGate(t, "dc1", a1, fed, 5*time.Second)
	both := wantJob(t, g1.submit(t, skey(1), `{"type":"x","datacenters":["dc1","dc2"]}`), http.StatusCreated)

	answered := make(chan struct{})
	closeAnswered := sync.OnceFunc(func() { close(answered) })
	after := func(context.Context) { closeAnswered() }
	m2.after.Store(&after)
	before := func(ctx context.Context) {
		select {
		case <-answered:
		case <-ctx.Done():
		}
	}
	m1.before.Store(&before)

	got := wantJob(t, g1.get(t, "/v1/jobs/"+both.JobID), http.StatusOK)
	if got.JobID != both.JobID || len(got.Datacenters) != 1 || got.Datacenters["dc1"].Status != api.JobStatusCommitted {
		t.Fatalf("job %+v, want dc1's copy of %s", got, both.JobID)
	}
}

// TestFederatedReadOwnSilentJobInBoth: a job of dc1 and dc2 read through the
// dc1 gate whose datacenter never answers is dc2's copy, once the bound
// ends (dc1 may hold its own copy: its answer is awaited until then). dc2 is
// asked at the hedge delay (a second) and must have answered by the bound:
// the bound leaves it three seconds, so that a machine under load does not
// make its answer one the bound cut off.
func TestFederatedReadOwnSilentJobInBoth(t *testing.T) {
	m1, a1 := startReadManager(t, "dc1")
	_, a2 := startReadManager(t, "dc2")
	fed := StaticFederation{"dc1": {a1}, "dc2": {a2}}
	g1 := federatedGate(t, "dc1", a1, fed, 4*time.Second)
	both := wantJob(t, g1.submit(t, skey(1), `{"type":"x","datacenters":["dc1","dc2"]}`), http.StatusCreated)

	// dc1 answers no read until the test ends, whatever its call's context
	// (the manager's own bound on a read would let it answer before the
	// gate's bound); released before the managers stop.
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	never := func(context.Context) { <-release }
	m1.before.Store(&never)
	got := wantJob(t, g1.get(t, "/v1/jobs/"+both.JobID), http.StatusOK)
	if got.JobID != both.JobID || len(got.Datacenters) != 1 || got.Datacenters["dc2"].Status != api.JobStatusCommitted {
		t.Fatalf("job %+v, want dc2's copy of %s", got, both.JobID)
	}
}

// TestFederatedReadOwnFailsJobElsewhere: when the gate's own datacenter
// fails a job read (neither with the job, nor not found, nor invalid), the
// other datacenters are asked and the one that has the job answers; a read
// the own datacenter refuses as invalid is that refusal.
func TestFederatedReadOwnFailsJobElsewhere(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	only2 := wantJob(t, f.g2.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
	f.m1.SetReadError(rpc.Errorf(rpc.CodeInternal, "boom"))
	got := wantJob(t, f.g1.get(t, "/v1/jobs/"+only2.JobID), http.StatusOK)
	if got.JobID != only2.JobID || got.Datacenters["dc2"].Status != api.JobStatusCommitted {
		t.Fatalf("job %+v, want dc2's copy of %s", got, only2.JobID)
	}
	f.m1.SetReadError(rpc.Errorf(rpc.CodeInvalid, "bad id"))
	wantProblem(t, f.g1.get(t, "/v1/jobs/"+only2.JobID), http.StatusBadRequest, api.CodeInvalidRequest)
}
