package manager

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/once-dev/once/internal/gate"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// TestOmittedListWithADatacenterDownPastTheClaimTTL: three datacenters, dc3
// unreachable for longer than the claims live. A job without a datacenters
// list is admitted nowhere while a datacenter cannot hold its claim: the
// first attempt (through dc1) and a retry after its claim expired (through
// dc2, another home) are both 503, and the claims they leave behind expire.
// Once dc3 is reachable, a retry through dc3's gate runs the job in exactly
// one datacenter, and retries through every gate, before and after the
// entries expire, answer that job (docs/multidc.md, "An omitted list in a
// federation"; the last step needs the claim of a job a datacenter retains
// answered with the job: TestOmittedListRetryAfterExpiryThroughAnotherDatacenter).
func TestOmittedListWithADatacenterDownPastTheClaimTTL(t *testing.T) {
	dcs := map[string]*testCluster{}
	fed := gate.StaticFederation{}
	for _, dc := range []string{"dc1", "dc2", "dc3"} {
		tc := newTestCluster(t, 1, func(c *Config) {
			c.Datacenter = dc
			c.RPCAddr = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
			c.RPCAdvertise = c.RPCAddr
		})
		if dc != "dc3" { // dc3's managers are cut off: nothing answers there
			serveRPC(t, tc)
		}
		dcs[dc], fed[dc] = tc, []string{tc.cfgs[0].RPCAdvertise}
	}
	gates := map[string]*httptest.Server{}
	for dc := range dcs {
		gates[dc] = startTestGateAt(t, dc, fed[dc], fed, 2*time.Second)
	}
	const key, body = "order-3dc-1", `{"type":"demo","payload":{"n":1}}`
	send := func(dc string) answer { return post(t, gates[dc], key, body, api.HeaderIdempotencyTTL, "1") }
	jobs := func() (n int) {
		for _, tc := range dcs {
			n += jobsIn(tc)
		}
		return n
	}
	claimsExpire := func() {
		for dc, tc := range dcs {
			fsm := tc.mgrs[0].FSM()
			testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
				_, ok := fsm.Entry("default", key)
				return !ok, dc + "'s claim to expire"
			})
		}
	}

	for _, via := range []string{"dc1", "dc2"} {
		if r := send(via); r.status != http.StatusServiceUnavailable {
			t.Fatalf("through %s with dc3 down: %d %s, want 503", via, r.status, r.body)
		}
		if n := jobs(); n != 0 {
			t.Fatalf("through %s with dc3 down: %d jobs, want none", via, n)
		}
		claimsExpire()
	}

	serveRPC(t, dcs["dc3"])
	first := send("dc3").job(t)
	if len(first.Datacenters) != 1 {
		t.Fatalf("datacenters %+v, want one", first.Datacenters)
	}
	check := func(when string) {
		for _, via := range []string{"dc1", "dc2", "dc3"} {
			r := send(via)
			var j api.Job
			if r.status != http.StatusCreated || json.Unmarshal(r.body, &j) != nil || j.JobID != first.JobID {
				t.Fatalf("%s, through %s: %d %s, want job %s", when, via, r.status, r.body, first.JobID)
			}
		}
		if n := jobs(); n != 1 {
			t.Fatalf("%s: %d jobs in all, want 1", when, n)
		}
	}
	check("retries")
	claimsExpire()
	check("retries after the entries expired")
}
