package gate

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// unreadView is a federation view the gate has not read yet (a gate that has
// just started): no datacenters until release, FirstView closed then.
type unreadView struct {
	view     StaticFederation
	released atomic.Bool
	read     chan struct{}
	asked    chan struct{} // closed when the gate first waits for the view
	once     sync.Once
}

func newUnreadView(view StaticFederation) *unreadView {
	return &unreadView{view: view, read: make(chan struct{}), asked: make(chan struct{})}
}

func (u *unreadView) Datacenters() map[string][]string {
	if u.released.Load() {
		return u.view
	}
	return nil
}

func (u *unreadView) FirstView() <-chan struct{} {
	u.once.Do(func() { close(u.asked) })
	return u.read
}

func (u *unreadView) release() {
	u.released.Store(true)
	close(u.read)
}

// TestOmittedListAtAGateBeforeItsFirstView: a gate of a federation that has
// not read its first view (it has just restarted) cannot tell whether an
// omitted list is a federation's claim or its own datacenter's job. It waits
// for the view: the same request another datacenter's gate already answered
// gets that job, not 422 idempotency_key_reused against the claim that
// datacenter left here (found by the three-datacenter chaos run, a dc1 gate
// restarted while a dc2 gate answered the key).
func TestOmittedListAtAGateBeforeItsFirstView(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{}, nil)
	const body = `{"type":"x","payload":{"n":3}}`
	job := wantJob(t, f.g[1].submit(t, skey(3), body), http.StatusCreated)

	view := newUnreadView(f.addrs)
	restarted := startGate(t, f.addrs["dc1"], func(cfg *Config, deps *Deps) {
		cfg.Datacenter = "dc1"
		deps.Federation = view
	})
	// The submission's goroutine reports its error rather than failing the
	// test itself (t.Fatal belongs to the test's goroutine).
	type answer struct {
		res result
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := restarted.trySubmit(skey(3), body)
		answered <- answer{res, err}
	}()
	select {
	case <-view.asked:
	case a := <-answered:
		t.Fatalf("answered before the gate read a view: %d %s (%v)", a.res.status, a.res.body, a.err)
	}
	view.release()
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	again := wantJob(t, a.res, http.StatusCreated)
	if again.JobID != job.JobID {
		t.Fatalf("through the restarted dc1 gate: job %s, want dc2's %s", again.JobID, job.JobID)
	}
	if n := f.jobs(); n != [3]int{0, 1, 0} {
		t.Fatalf("datacenters hold %v jobs, want dc2's alone", n)
	}
}

// TestOmittedListWithoutAViewIs503: with no view read within the forward
// timeout (its managers do not answer), an omitted list is 503 unavailable
// with Retry-After, nothing forwarded; a named list is not held up.
func TestOmittedListWithoutAViewIs503(t *testing.T) {
	m, addr := startManager(t, managertest.Options{Datacenter: "dc1"})
	view := newUnreadView(StaticFederation{"dc1": {addr}})
	g := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) {
		cfg.ForwardTimeout = 200 * time.Millisecond
		deps.Federation = view
	})
	res := g.submit(t, skey(1), `{"type":"x"}`)
	wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
	wantHeader(t, res, api.HeaderRetryAfter, "1")
	if n := m.Submits(); n != 0 {
		t.Fatalf("%d submissions forwarded, want 0", n)
	}
	wantJob(t, g.submit(t, skey(2), `{"type":"x","datacenters":["dc1"]}`), http.StatusCreated)
	view.release()
	wantJob(t, g.submit(t, skey(1), `{"type":"x"}`), http.StatusCreated)
}

// TestWriteTimeoutCoversTheFirstViewWait: the HTTP server's WriteTimeout
// must outlast the longest a submission takes, or its answer is cut off and
// the client gets a reset connection instead of it. That longest is an
// omitted datacenters list at a gate that has read no federation view yet:
// it waits for the view (at most GATE_FORWARD_TIMEOUT_SECONDS), then
// forwards (GATE_FORWARD_TIMEOUT_SECONDS plus the pending wait); 10 s of
// slack remain for reading the body and writing the answer. A WriteTimeout
// that counted the forward alone was short by the view's wait.
func TestWriteTimeoutCoversTheFirstViewWait(t *testing.T) {
	for _, fwd := range []time.Duration{100 * time.Millisecond, 10 * time.Second, 30 * time.Second, 600 * time.Second} {
		for _, waitForPending := range []bool{true, false} {
			cfg := DefaultConfig()
			cfg.ForwardTimeout = fwd
			cfg.Idempotency.WaitForPending = waitForPending
			longest := fwd + fwd + cfg.pendingWait() // the first view's wait, then the forward
			if got := cfg.writeTimeout(); got-longest < 10*time.Second {
				t.Errorf("GATE_FORWARD_TIMEOUT_SECONDS %v, waiting for pending %v: WriteTimeout %v, want at least %v + 10s",
					fwd, waitForPending, got, longest)
			}
		}
	}
}

// TestJobReadBeforeTheFirstViewIs503: a gate that has not read its first
// federation view (it has just restarted) cannot look in the datacenters it
// does not know yet: a job its own datacenter does not hold is 503 with
// Retry-After, not 404 (the job may live in another datacenter), and is
// found once the view is read.
func TestJobReadBeforeTheFirstViewIs503(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	job := wantJob(t, f.g2.submit(t, skey(70), `{"type":"x","datacenters":["dc2"]}`), http.StatusCreated)
	view := newUnreadView(StaticFederation{"dc1": f.m1.cluster.Addrs, "dc2": f.m2.cluster.Addrs})
	restarted := startGate(t, f.m1.cluster.Addrs, func(cfg *Config, deps *Deps) {
		cfg.Datacenter, cfg.NodeName = "dc1", "gate-dc1-restarted"
		deps.Federation = view
	})
	res := wantProblemRes(t, restarted.get(t, "/v1/jobs/"+job.JobID), http.StatusServiceUnavailable, api.CodeUnavailable)
	if res.header.Get(api.HeaderRetryAfter) == "" {
		t.Fatalf("503 without Retry-After: %v", res.header)
	}
	view.release()
	if got := wantJob(t, restarted.get(t, "/v1/jobs/"+job.JobID), http.StatusOK); got.JobID != job.JobID {
		t.Fatalf("job %+v, want %s", got, job.JobID)
	}
	wantProblem(t, restarted.get(t, "/v1/jobs/nope"), http.StatusNotFound, api.CodeJobNotFound)
}
