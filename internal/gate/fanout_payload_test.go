package gate

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// answeredPayloads counts, per datacenter of f, the payload bytes of the
// jobs its manager answers submissions with.
type answeredPayloads struct {
	mu    sync.Mutex
	bytes map[string]int
}

func countAnsweredPayloads(f *federation3) *answeredPayloads {
	a := &answeredPayloads{bytes: map[string]int{}}
	for i, dc := range []string{"dc1", "dc2", "dc3"} {
		f.m[i].SetAnswerHook(func(_ *rpcpb.SubmitRequest, resp *rpcpb.SubmitResponse) {
			a.mu.Lock()
			a.bytes[dc] += len(resp.GetJob().GetPayload())
			a.mu.Unlock()
		})
	}
	return a
}

// take returns the counts so far, as text, and starts again from none.
func (a *answeredPayloads) take() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	got := fmt.Sprint(a.bytes)
	a.bytes = map[string]int{}
	return got
}

// TestFanOutAnswersCarryOnePayload: a job of 1 MiB payload naming dc1, dc2
// and dc3 is answered by each, but the gate renders its answer from dc1's
// (the first by name): dc2 and dc3 answer without the payload (2 MiB less
// on the WAN), and every gate still answers the same bytes, the job whole,
// to the first attempt, its retries through the other gates, and reads.
func TestFanOutAnswersCarryOnePayload(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{}, func(cfg *Config, deps *Deps) {
		cfg.MaxBodyBytes = 2 << 20
	})
	answered := countAnsweredPayloads(f)
	payload := fmt.Sprintf("%q", strings.Repeat("a", 1<<20-64))
	body := `{"type":"x","payload":` + payload + `,"datacenters":["dc1","dc2","dc3"]}`
	first := f.g[1].submit(t, skey(1), body)
	job := wantJob(t, first, http.StatusCreated)
	if string(job.Payload) != payload || len(job.Datacenters) != 3 {
		t.Fatalf("the job's payload is %d bytes (want %d), its datacenters %+v", len(job.Payload), len(payload), job.Datacenters)
	}
	want := fmt.Sprint(map[string]int{"dc1": len(payload), "dc2": 0, "dc3": 0})
	if got := answered.take(); got != want {
		t.Fatalf("payload bytes answered per datacenter: %s, want %s", got, want)
	}
	for i, tg := range f.g {
		res := tg.submit(t, skey(1), body)
		wantStatus(t, res, http.StatusCreated)
		wantHeader(t, res, api.HeaderReplayed, "true")
		if !bytes.Equal(res.body, first.body) {
			t.Fatalf("the retry through dc%d's gate differs:\n%.200s\n%.200s", i+1, res.body, first.body)
		}
		read := tg.get(t, "/v1/jobs/"+job.JobID)
		wantStatus(t, read, http.StatusOK)
		if got := wantJob(t, read, http.StatusOK); string(got.Payload) != payload {
			t.Fatalf("the read through dc%d's gate has a payload of %d bytes, want %d", i+1, len(got.Payload), len(payload))
		}
	}
	// dc2's gate replays from its cache; dc1's and dc3's ask again.
	want = fmt.Sprint(map[string]int{"dc1": 2 * len(payload), "dc2": 0, "dc3": 0})
	if got := answered.take(); got != want {
		t.Fatalf("payload bytes answered to the retries: %s, want %s", got, want)
	}
	other := `{"type":"x","payload":{"n":1},"datacenters":["dc1","dc2","dc3"]}`
	for _, tg := range f.g {
		wantProblem(t, tg.submit(t, skey(1), other), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	}
	if n := f.jobs(); n != [3]int{1, 1, 1} {
		t.Fatalf("datacenters hold %v jobs, want one each", n)
	}
}

// TestFanOutRejectionCarriesNoPayload: a job dc1 rejects and dc2 and dc3
// commit is answered with dc1's rejection, which shows no payload: none
// comes back from any datacenter, and every gate answers the same bytes.
func TestFanOutRejectionCarriesNoPayload(t *testing.T) {
	onlyY := managertest.Options{Config: func(cfg *manager.Config) { cfg.AllowedJobTypes = []string{"y"} }}
	f := startFederation3(t, [3]managertest.Options{onlyY, {}, {}}, func(cfg *Config, deps *Deps) {
		cfg.MaxBodyBytes = 2 << 20
	})
	answered := countAnsweredPayloads(f)
	payload := fmt.Sprintf("%q", strings.Repeat("a", 1<<20-64))
	body := `{"type":"x","payload":` + payload + `,"datacenters":["dc1","dc2","dc3"]}`
	first := f.g[0].submit(t, skey(1), body)
	wantStatus(t, first, http.StatusUnprocessableEntity)
	if !bytes.Contains(first.body, []byte(`"code":"job_rejected"`)) || !bytes.Contains(first.body, []byte("dc2: committed")) {
		t.Fatalf("the answer: %s", first.body)
	}
	for i, tg := range f.g[1:] {
		res := tg.submit(t, skey(1), body)
		wantStatus(t, res, http.StatusUnprocessableEntity)
		if !bytes.Equal(res.body, first.body) {
			t.Fatalf("the retry through dc%d's gate differs:\n%s\n%s", i+2, res.body, first.body)
		}
	}
	want := fmt.Sprint(map[string]int{"dc1": 0, "dc2": 0, "dc3": 0})
	if got := answered.take(); got != want {
		t.Fatalf("payload bytes answered per datacenter: %s, want %s", got, want)
	}
}
