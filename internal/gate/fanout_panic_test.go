package gate

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// TestFanOutPanicIsTheDatacentersFailure: a panic in the goroutine that
// forwards a fanned-out submission to one datacenter (a bug in submitTo or
// the rpc client) does not end the gate: it is that datacenter's failure,
// answered 500 internal as a panic of a single datacenter's forward is,
// nothing cached and the key's entry resolved, so the retry of the same key
// is forwarded again and completes what the first attempt admitted. The
// package's goleak check sees no goroutine left behind.
func TestFanOutPanicIsTheDatacentersFailure(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	var panics atomic.Int32
	panics.Store(1)
	f.g1.testHookSubmitTo = func(dc string) {
		if dc == "dc2" && panics.Add(-1) == 0 {
			panic("test panic forwarding to dc2")
		}
	}
	body := `{"type":"x","payload":{"n":1},"datacenters":["dc1","dc2"]}`
	first := f.g1.submit(t, skey(1), body)
	if p := wantProblem(t, first, http.StatusInternalServerError, api.CodeInternal); p.Detail != panicDetail {
		t.Fatalf("detail %q, want %q", p.Detail, panicDetail)
	}
	if panics.Load() != 0 {
		t.Fatal("the fan-out to dc2 never reached the hook")
	}
	if n := f.m2.Submits(); n != 0 {
		t.Fatalf("dc2 saw %d submissions, want none: the panic came before the send", n)
	}

	again := f.g1.submit(t, skey(1), body)
	job := wantJob(t, again, http.StatusCreated)
	if job.Datacenters["dc1"].Status != api.JobStatusCommitted || job.Datacenters["dc2"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v, want dc1 and dc2 committed", job.Datacenters)
	}
	for _, m := range []*testManager{f.m1, f.m2} {
		if n := m.Jobs(); n != 1 {
			t.Fatalf("a datacenter holds %d jobs, want 1", n)
		}
	}
	wantStatus(t, f.g1.submit(t, skey(1), body), http.StatusCreated) // the completed outcome, replayed
}
