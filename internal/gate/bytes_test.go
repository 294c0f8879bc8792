package gate

import (
	"net/http"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/pkg/api"
)

// leaseOne submits a job and leases it through g.
func leaseOne(t *testing.T, g *testGate) api.Lease {
	t.Helper()
	wantJob(t, g.submit(t, skey(1), `{"type":"email"}`), http.StatusCreated)
	leases := decodeLeases(t, g.post(t, "/v1/leases", `{"lease_seconds":60}`))
	if len(leases) != 1 {
		t.Fatalf("leases %+v", leases)
	}
	return leases[0]
}

// A completion the ledger's byte budget cannot hold is 507 budget_exceeded
// to the worker, the job still running under its lease, which it may fail.
func TestCompleteOverBudgetThroughTheGate(t *testing.T) {
	_, addr := startManager(t, managertest.Options{Config: func(c *manager.Config) {
		// The job fits (its payload is "null"); 100 bytes more do not.
		c.LedgerTenantMaxBytes = int64(ledger.EntryOverhead + ledger.JobOverhead + 2*len("null") + 100)
	}})
	g := startGate(t, []string{addr}, nil)
	l := leaseOne(t, g)
	path := "/v1/jobs/" + l.Job.JobID
	big := `"` + strings.Repeat("r", 200) + `"`
	wantProblem(t, g.post(t, path+"/complete", `{"lease_id":"`+l.LeaseID+`","result":`+big+`}`),
		http.StatusInsufficientStorage, api.CodeBudgetExceeded)
	if j := wantJob(t, g.get(t, path), http.StatusOK); j.State != api.JobStatusRunning {
		t.Fatalf("the refused job is %s", j.State)
	}
	if j := wantJob(t, g.post(t, path+"/fail", `{"lease_id":"`+l.LeaseID+`","error":"result too large","retry":false}`), http.StatusOK); j.State != api.JobStatusFailed {
		t.Fatalf("failed job %+v", j)
	}
}

// A result that encoding/json's escapes lengthen past GATE_MAX_BODY_BYTES
// is 413, never forwarded; a lease ID longer than any the manager gives is
// 400. (The RPC's worker limit admits the largest body: rpc's
// TestWorkerBodyLimitAdmitsTheGatesLargest.)
func TestCompleteResultLimits(t *testing.T) {
	if MaxBodyBytes > rpc.MaxBodyBytes {
		t.Fatalf("GATE_MAX_BODY_BYTES's bound %d is over the RPC's %d", MaxBodyBytes, rpc.MaxBodyBytes)
	}
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, nil)
	l := leaseOne(t, g)
	path := "/v1/jobs/" + l.Job.JobID + "/complete"
	limit := int(DefaultConfig().MaxBodyBytes)
	escaped := `{"lease_id":"` + l.LeaseID + `","result":"` + strings.Repeat("<", limit/5) + `"}`
	wantProblem(t, g.post(t, path, escaped), http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge)
	wantProblem(t, g.post(t, path, `{"lease_id":"`+strings.Repeat("l", api.MaxTypeLen+1)+`"}`), http.StatusBadRequest, api.CodeInvalidRequest)
	fits := `{"lease_id":"` + l.LeaseID + `","result":"` + strings.Repeat("<", limit/7) + `"}`
	if j := wantJob(t, g.post(t, path, fits), http.StatusOK); j.State != api.JobStatusSucceeded || len(j.Result) != 6*(limit/7)+2 {
		t.Fatalf("completed job %s with a result of %d bytes", j.State, len(j.Result))
	}
}
