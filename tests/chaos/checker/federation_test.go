package checker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/chaos/history"
)

func TestJudgeEverywhere(t *testing.T) {
	cfgs := []Config{{Datacenter: "dc1"}, {Datacenter: "dc2"}}
	k := tk{"acme", key("1")}
	a, b := committedKey("1", "job-a"), committedKey("1", "job-b")
	rejected := api.KeyInfo{Key: key("1"), State: api.KeyStateRejected}
	pendingEntry := api.KeyInfo{Key: key("1"), State: api.KeyStatePending}
	for _, tc := range []struct {
		name          string
		dc1, dc2      *api.KeyInfo
		want, pending bool
	}{
		{"the same job in both", &a, &a, false, false},
		{"different jobs", &a, &b, true, false},
		{"committed in one, nothing in the other", &a, nil, true, true},
		{"committed in one, pending in the other", nil, &a, true, true},
		{"committed in one, rejected in the other (each ledger decides)", &a, &rejected, false, false},
		{"nowhere", nil, nil, false, false},
		{"pending in one, nothing in the other", &pendingEntry, nil, false, false},
	} {
		v, pending := judgeEverywhere(k, named([]*api.KeyInfo{tc.dc1, tc.dc2}, cfgs, []string{"dc1", "dc2"}))
		if (v != nil) != tc.want || pending != tc.pending {
			t.Errorf("%s: violation %v, pending %v; want %v, %v", tc.name, v, pending, tc.want, tc.pending)
		}
		if v != nil && v.Rule != RuleEverywhere {
			t.Errorf("%s: rule %s", tc.name, v.Rule)
		}
	}
}

// both names dc1 and dc2 in every op, as a two-datacenter run sends them.
func both(ops ...history.Op) []history.Op {
	for i := range ops {
		ops[i].Datacenters = []string{"dc1", "dc2"}
	}
	return ops
}

// federationGate serves GET /v1/idempotency-keys/{key}?datacenter= from a
// table per datacenter that the test changes while CheckFederation reads.
type federationGate struct {
	mu   sync.Mutex
	keys map[string]map[string]api.KeyInfo // dc → key → entry
	srv  *httptest.Server
}

func newFederationGate(t *testing.T) *federationGate {
	g := &federationGate{keys: map[string]map[string]api.KeyInfo{"dc1": {}, "dc2": {}, "dc3": {}}}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := strings.TrimPrefix(r.URL.Path, "/v1/idempotency-keys/")
		g.mu.Lock()
		e, ok := g.keys[r.URL.Query().Get("datacenter")][k]
		g.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(api.Problem{Code: api.CodeIdempotencyKeyNotFound})
			return
		}
		_ = json.NewEncoder(w).Encode(e)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *federationGate) set(dc, k string, e api.KeyInfo) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keys[dc][k] = e
}

// A key committed in dc1 that reaches dc2 while the check waits passes; one
// that never reaches dc2 is a violation once the wait is over; two
// different jobs are a violation.
func TestCheckFederationWaitsForTheOutbox(t *testing.T) {
	g := newFederationGate(t)
	cfgs := []Config{{GateURL: g.srv.URL, Datacenter: "dc1"}, {GateURL: g.srv.URL, Datacenter: "dc2"}}
	ops := both(
		sub("1", gateA, 1, false, 0, 1, history.Outcome{Status: 503}),
		sub("2", gateA, 1, false, 2, 3, history.Outcome{Status: 503}),
		sub("3", gateA, 1, false, 4, 5, created("job-3", "h", false)),
		sub("4", gateA, 1, false, 6, 7, history.Outcome{Status: 503}),
	)
	g.set("dc1", key("1"), committedKey("1", "job-1")) // reaches dc2 later
	g.set("dc1", key("2"), committedKey("2", "job-2")) // never reaches dc2
	g.set("dc1", key("3"), committedKey("3", "job-3"))
	g.set("dc2", key("3"), committedKey("3", "job-3x"))
	go func() {
		time.Sleep(300 * time.Millisecond)
		g.set("dc2", key("1"), committedKey("1", "job-1"))
	}()
	res, err := CheckFederation(context.Background(), cfgs, ops, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 2 {
		t.Fatalf("want 2 violations (keys 2 and 3):\n%s", res.Summary())
	}
	if v := res.Violations[0]; v.Key != key("2") || !strings.Contains(v.Detail, "not in dc2") {
		t.Errorf("first violation %s", v)
	}
	if v := res.Violations[1]; v.Key != key("3") || len(v.JobIDs) != 2 {
		t.Errorf("second violation %s", v)
	}
}
