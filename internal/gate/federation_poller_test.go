package gate

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// A view without a datacenter that earlier views named (a manager that has
// just restarted and not rejoined the WAN pool) does not make the gate forget
// it: the datacenter stays known with its last addresses, until no view has
// named it for federationForget.
func TestFederationPollerKeepsDatacentersAViewOmits(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := newFederationPoller(nil, "", nil, slog.New(slog.DiscardHandler))
	p.now = func() time.Time { return now }

	p.store(map[string][]string{"dc1": {"a:1"}, "dc2": {"b:1", "b:2"}})
	now = now.Add(5 * time.Second)
	p.store(map[string][]string{"dc1": {"a:1"}}) // a restarted manager's view
	if got := fmt.Sprint(p.Datacenters()); got != "map[dc1:[a:1] dc2:[b:1 b:2]]" {
		t.Fatalf("after a view without dc2: %s", got)
	}
	now = now.Add(5 * time.Second)
	p.store(map[string][]string{"dc1": {"a:1"}, "dc2": {}}) // dc2 named, its managers down
	if got := fmt.Sprint(p.Datacenters()); got != "map[dc1:[a:1] dc2:[]]" {
		t.Fatalf("dc2 with no alive manager: %s", got)
	}
	now = now.Add(federationForget)
	p.store(map[string][]string{"dc1": {"a:1"}})
	if got := fmt.Sprint(p.Datacenters()); got != "map[dc1:[a:1]]" {
		t.Fatalf("after federationForget: %s", got)
	}
}

// The federation forms when the set of datacenters the views name has not
// changed for the settle window: a view read before the managers' WAN gossip
// converged (dc2 not heard of yet) does not form it, and a change makes it
// forming again, without taking back the first formation (readiness).
func TestFederationPollerFormsAfterTheSettleWindow(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := newFederationPoller(nil, "", nil, slog.New(slog.DiscardHandler))
	p.now = func() time.Time { return now }
	p.settle = time.Second
	state := func() string { return fmt.Sprintf("forming=%v formed_once=%v", p.Forming(), p.FormedOnce()) }
	if got := state(); got != "forming=true formed_once=false" {
		t.Fatalf("before any view: %s", got)
	}
	p.store(map[string][]string{"dc1": {"a:1"}}) // before dc2's managers were heard of
	now = now.Add(600 * time.Millisecond)
	p.store(map[string][]string{"dc1": {"a:1"}})
	if got := state(); got != "forming=true formed_once=false" {
		t.Fatalf("within the window: %s", got)
	}
	now = now.Add(600 * time.Millisecond)
	p.store(map[string][]string{"dc1": {"a:1"}, "dc2": {"b:1"}}) // dc2 appears: the window starts again
	if got := state(); got != "forming=true formed_once=false" {
		t.Fatalf("after dc2 appeared: %s", got)
	}
	now = now.Add(time.Second)
	p.store(map[string][]string{"dc1": {"a:2"}, "dc2": {"b:1"}}) // addresses change, datacenters do not
	if got := state(); got != "forming=false formed_once=true" {
		t.Fatalf("after the window: %s", got)
	}
	now = now.Add(time.Second)
	p.store(map[string][]string{"dc1": {"a:2"}, "dc2": {"b:1"}, "dc3": {"c:1"}})
	if got := state(); got != "forming=true formed_once=true" {
		t.Fatalf("after dc3 joined: %s", got)
	}
}

// formingView is a Federation whose formation a test sets.
type formingView struct {
	StaticFederation
	forming, formedOnce atomic.Bool
}

func (f *formingView) Forming() bool    { return f.forming.Load() }
func (f *formingView) FormedOnce() bool { return f.formedOnce.Load() }

// While the federation forms, a datacenter the gate does not know may still
// appear: a job or a read naming it is 503 with Retry-After (nothing
// forwarded), and /readyz is 503 until the first formation. Once formed, the
// same name is a client error (400).
func TestGateAnswersUnknownDatacenter503WhileForming(t *testing.T) {
	m1, a1 := startManager(t, managertest.Options{Datacenter: "dc1"})
	fed := &formingView{StaticFederation: StaticFederation{"dc1": {a1}}}
	fed.forming.Store(true)
	g := startGate(t, []string{a1}, func(cfg *Config, deps *Deps) { deps.Federation = fed })
	body := `{"type":"x","datacenters":["dc1","dc2"]}`

	res := g.submit(t, skey(1), body)
	wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
	if res.header.Get(api.HeaderRetryAfter) == "" {
		t.Fatal("503 without Retry-After")
	}
	read := g.get(t, "/v1/jobs/job-1?datacenter=dc2")
	wantProblem(t, read, http.StatusServiceUnavailable, api.CodeUnavailable)
	if read.header.Get(api.HeaderRetryAfter) == "" {
		t.Fatal("read: 503 without Retry-After")
	}
	wantProblem(t, g.get(t, "/readyz"), http.StatusServiceUnavailable, api.CodeUnavailable)
	if n := m1.Submits(); n != 0 {
		t.Fatalf("%d submissions forwarded, want 0", n)
	}
	wantJob(t, g.submit(t, skey(2), `{"type":"x"}`), http.StatusCreated)

	fed.forming.Store(false)
	fed.formedOnce.Store(true)
	wantStatus(t, g.get(t, "/readyz"), http.StatusOK)
	wantProblem(t, g.submit(t, skey(3), body), http.StatusBadRequest, api.CodeInvalidRequest)
	wantProblem(t, g.get(t, "/v1/jobs/job-1?datacenter=dc2"), http.StatusBadRequest, api.CodeInvalidRequest)
}
