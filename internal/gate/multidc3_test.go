package gate

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// federation3 is three datacenters, dc1, dc2 and dc3, each with a real
// manager leader and a gate that knows all three.
type federation3 struct {
	m     [3]*testManager
	g     [3]*testGate
	addrs StaticFederation
}

func startFederation3(t *testing.T, opts [3]managertest.Options, override func(cfg *Config, deps *Deps)) *federation3 {
	t.Helper()
	f := &federation3{addrs: StaticFederation{}}
	names := [3]string{"dc1", "dc2", "dc3"}
	for i, dc := range names {
		opts[i].Datacenter = dc
		m, addr := startManager(t, opts[i])
		f.m[i], f.addrs[dc] = m, []string{addr}
	}
	for i, dc := range names {
		f.g[i] = startGate(t, f.addrs[dc], func(cfg *Config, deps *Deps) {
			cfg.Datacenter = dc
			cfg.NodeName = "gate-" + dc
			deps.Federation = f.addrs
			if override != nil {
				override(cfg, deps)
			}
		})
	}
	return f
}

// jobs is how many jobs each datacenter holds.
func (f *federation3) jobs() [3]int {
	return [3]int{f.m[0].Jobs(), f.m[1].Jobs(), f.m[2].Jobs()}
}

// runOutboxes runs the outboxes of the datacenters at idx until the test
// ends, each reaching the others at their addresses.
func (f *federation3) runOutboxes(t *testing.T, idx ...int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Go(func() {
			f.m[i].RunOutbox(ctx, func() map[string][]string { return f.addrs }, testutil.Logger(t))
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// unavailable is a submit hook answering as a datacenter no one reaches.
func unavailable(context.Context, *rpcpb.SubmitRequest) error {
	return rpc.Errorf(rpc.CodeUnavailable, "the datacenter is unreachable (the test's fault layer)")
}

// TestMultiDC3RacedFirstAttempts: the same key and body naming dc1, dc2 and
// dc3, sent at once through a gate of each, overlapping at every leader,
// makes one job per datacenter under one ID, and every gate answers the same
// bytes.
func TestMultiDC3RacedFirstAttempts(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{}, nil)
	release := make(chan struct{})
	hold := func(ctx context.Context, req *rpcpb.SubmitRequest) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return rpc.Errorf(rpc.CodeUnavailable, "cancelled")
		}
	}
	for _, m := range f.m {
		m.SetSubmitHook(hold)
	}
	bodies := [3]string{
		`{"type":"x","payload":{"n":1},"datacenters":["dc1","dc2","dc3"]}`,
		`{"datacenters":["dc3","dc2","dc1"],"type":"x","payload":{"n":1}}`,
		`{"type":"x","datacenters":["dc2","dc3","dc1","dc2"],"payload":{"n":1}}`,
	}
	var results [3]result
	var errs [3]error
	var wg sync.WaitGroup
	for i, tg := range f.g {
		wg.Go(func() { results[i], errs[i] = tg.trySubmit(skey(1), bodies[i]) })
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		for _, m := range f.m {
			if m.Submits() != 3 {
				return false, "every gate's attempt held at every leader"
			}
		}
		return true, ""
	})
	close(release)
	wg.Wait()
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("gate dc%d: %v", i+1, errs[i])
		}
		job := wantJob(t, res, http.StatusCreated)
		if len(job.Datacenters) != 3 {
			t.Fatalf("gate dc%d: datacenters %+v", i+1, job.Datacenters)
		}
		if !bytes.Equal(res.body, results[0].body) {
			t.Fatalf("answers differ:\n%s\n%s", res.body, results[0].body)
		}
	}
	if n := f.jobs(); n != [3]int{1, 1, 1} {
		t.Fatalf("datacenters hold %v jobs, want one each", n)
	}
	id := wantJob(t, results[0], http.StatusCreated).JobID
	for _, m := range f.m {
		jobIn(t, m, id)
	}
}

// TestMultiDC3OutboxCarriesToTheUnreachableOne: a job naming dc1, dc2 and
// dc3 while dc3 is unreachable is 503 (nothing cached) and held by dc1 and
// dc2; once dc3 is back both their outboxes carry it there, and dc3 admits
// it once, under the same ID. A direct submission of the key through dc3's
// gate is then the same job (same bytes as through dc1's); another body is
// 422 idempotency_key_reused and makes no job anywhere.
func TestMultiDC3OutboxCarriesToTheUnreachableOne(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{}, func(cfg *Config, deps *Deps) {
		cfg.ForwardTimeout = 300 * time.Millisecond
		cfg.Idempotency.PendingWaitTimeout = 200 * time.Millisecond
	})
	f.m[2].SetSubmitHook(unavailable)
	const body = `{"type":"x","payload":{"n":2},"datacenters":["dc3","dc1","dc2"]}`
	for _, tg := range []*testGate{f.g[0], f.g[1]} {
		p := wantProblem(t, tg.submit(t, skey(2), body), http.StatusServiceUnavailable, api.CodeUnavailable)
		if !bytes.Contains([]byte(p.Detail), []byte(`"dc3"`)) {
			t.Fatalf("detail %q does not name dc3", p.Detail)
		}
	}
	if n := f.jobs(); n != [3]int{1, 1, 0} {
		t.Fatalf("datacenters hold %v jobs, want 1, 1, 0", n)
	}

	f.runOutboxes(t, 0, 1)
	f.m[2].SetSubmitHook(nil)
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		return f.m[0].FSM().OutboxLen() == 0 && f.m[1].FSM().OutboxLen() == 0,
			"dc1 and dc2's outboxes to have dc3's confirmation"
	})
	if n := f.jobs(); n != [3]int{1, 1, 1} {
		t.Fatalf("datacenters hold %v jobs, want one each", n)
	}
	e1, _ := f.m[0].FSM().Entry(api.DefaultTenant, skey(2))
	e3, ok := f.m[2].FSM().Entry(api.DefaultTenant, skey(2))
	if !ok || e3.JobID != e1.JobID || e3.ExpiresAt != e1.ExpiresAt {
		t.Fatalf("dc3's entry %+v, dc1's %+v: want the same job and expiry", e3, e1)
	}

	first := f.g[0].submit(t, skey(2), body)
	job := wantJob(t, first, http.StatusCreated)
	if job.JobID != e1.JobID || len(job.Datacenters) != 3 {
		t.Fatalf("job %+v", job)
	}
	direct := f.g[2].submit(t, skey(2), `{"datacenters":["dc1","dc2","dc3"],"payload":{"n":2},"type":"x"}`)
	wantStatus(t, direct, http.StatusCreated)
	wantHeader(t, direct, api.HeaderReplayed, "true")
	if !bytes.Equal(direct.body, first.body) {
		t.Fatalf("through dc3's gate:\n%s\nthrough dc1's:\n%s", direct.body, first.body)
	}
	for _, other := range []string{
		`{"type":"x","payload":{"n":3},"datacenters":["dc1","dc2","dc3"]}`,
		`{"type":"x","payload":{"n":2},"datacenters":["dc3"]}`,
		`{"type":"x","payload":{"n":2}}`,
	} {
		wantProblem(t, f.g[2].submit(t, skey(2), other), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	}
	if n := f.jobs(); n != [3]int{1, 1, 1} {
		t.Fatalf("datacenters hold %v jobs, want one each", n)
	}
}

// TestMultiDC3SetOrderAndUnknown: {dc3,dc1} and {dc1,dc3} are one request
// (the same job, the same bytes through gates of either datacenter, dc2
// never asked); a list naming a datacenter outside the federation is 400
// and reaches no datacenter, with or without duplicates.
func TestMultiDC3SetOrderAndUnknown(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{}, nil)
	first := f.g[0].submit(t, skey(3), `{"type":"x","datacenters":["dc3","dc1"]}`)
	job := wantJob(t, first, http.StatusCreated)
	again := f.g[2].submit(t, skey(3), `{"type":"x","datacenters":["dc1","dc3","dc1"]}`)
	wantHeader(t, again, api.HeaderReplayed, "true")
	if !bytes.Equal(again.body, first.body) {
		t.Fatalf("{dc1,dc3} through dc3:\n%s\n{dc3,dc1} through dc1:\n%s", again.body, first.body)
	}
	// dc2's gate forwards to dc1 and dc3 only.
	via2 := f.g[1].submit(t, skey(3), `{"type":"x","datacenters":["dc1","dc3"]}`)
	if !bytes.Equal(via2.body, first.body) {
		t.Fatalf("through dc2:\n%s\nthrough dc1:\n%s", via2.body, first.body)
	}
	if n := f.jobs(); n != [3]int{1, 0, 1} {
		t.Fatalf("datacenters hold %v jobs, want 1, 0, 1 (job %s)", n, job.JobID)
	}
	if n := f.m[1].Submits(); n != 0 {
		t.Fatalf("dc2 saw %d submissions of a job for dc1 and dc3", n)
	}

	before := [3]int64{f.m[0].Submits(), f.m[1].Submits(), f.m[2].Submits()}
	for _, body := range []string{
		`{"type":"x","datacenters":["dc1","dc2","dc9"]}`,
		`{"type":"x","datacenters":["dc9","dc1","dc9"]}`,
		`{"type":"x","datacenters":["dc1","DC2"]}`,
	} {
		for _, tg := range f.g {
			wantProblem(t, tg.submit(t, skey(4), body), http.StatusBadRequest, api.CodeInvalidRequest)
		}
	}
	if after := [3]int64{f.m[0].Submits(), f.m[1].Submits(), f.m[2].Submits()}; after != before {
		t.Fatalf("a job naming an unknown datacenter was forwarded: submissions %v, were %v", after, before)
	}
	// The key is free: nothing was recorded for it anywhere.
	wantJob(t, f.g[1].submit(t, skey(4), `{"type":"x","datacenters":["dc1","dc2","dc3"]}`), http.StatusCreated)
}

// TestMultiDC3CancelWithOneDown: a job naming dc1, dc2 and dc3 reached dc1
// and dc2 while dc3 was unreachable (503), and is cancelled through a dc1
// gate meanwhile: the cancel acts on dc1's copy alone, as docs/api.md says
// (each datacenter's copy is cancelled through a gate of that datacenter),
// and the answer says so (dc1's copy, cancelled). It is not carried: once dc3
// is back the outbox delivers the job there, queued, as it does dc2's.
func TestMultiDC3CancelWithOneDown(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{}, func(cfg *Config, deps *Deps) {
		cfg.ForwardTimeout = 300 * time.Millisecond
		cfg.Idempotency.PendingWaitTimeout = 200 * time.Millisecond
	})
	f.m[2].SetSubmitHook(unavailable)
	wantProblem(t, f.g[0].submit(t, skey(5), `{"type":"x","datacenters":["dc1","dc2","dc3"]}`),
		http.StatusServiceUnavailable, api.CodeUnavailable)
	e1, ok := f.m[0].FSM().Entry(api.DefaultTenant, skey(5))
	if !ok {
		t.Fatal("dc1 holds no entry of the key")
	}
	res := f.g[0].post(t, "/v1/jobs/"+e1.JobID+"/cancel", `{}`, api.HeaderIdempotencyKey, skey(6))
	cancelled := wantJob(t, res, http.StatusOK)
	if cancelled.State != api.JobStatusCancelled || len(cancelled.Datacenters) != 1 || cancelled.Datacenters["dc1"].Status == "" {
		t.Fatalf("cancel answered %s, want dc1's copy, cancelled", res.body)
	}
	if j := jobIn(t, f.m[1], e1.JobID); j.State == api.JobStatusCancelled {
		t.Fatal("dc2's copy was cancelled through dc1's gate")
	}

	f.runOutboxes(t, 0, 1)
	f.m[2].SetSubmitHook(nil)
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		_, err := f.m[2].GetJob(context.Background(), api.DefaultTenant, e1.JobID)
		return err == nil, "dc3 to hold the job"
	})
	if j := jobIn(t, f.m[2], e1.JobID); j.State != api.JobStatusQueued {
		t.Fatalf("dc3's copy is %s, want queued", j.State)
	}
	if j := jobIn(t, f.m[0], e1.JobID); j.State != api.JobStatusCancelled {
		t.Fatalf("dc1's copy is %s, want cancelled", j.State)
	}
}

// TestMultiDC3RejectedInOne: dc2 rejects for capacity what dc1 and dc3
// admit: the answer is dc2's 429, naming every datacenter's outcome, cached
// and replayed as a rejection through every gate, never as a 201.
func TestMultiDC3RejectedInOne(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{{}, {Config: func(c *manager.Config) {
		c.MaxQueuedJobs = 1
	}}, {}}, nil)
	wantJob(t, f.g[1].submit(t, skey(8), `{"type":"x"}`), http.StatusCreated) // dc2 is full
	const body = `{"type":"x","datacenters":["dc1","dc2","dc3"]}`
	first := f.g[0].submit(t, skey(9), body)
	wantStatus(t, first, http.StatusTooManyRequests)
	var ext rejectionProblem
	decodeJSON(t, first.body, &ext)
	if ext.Code != api.CodeJobRejected || ext.JobID == "" || len(ext.Datacenters) != 3 ||
		ext.Datacenters["dc1"].Status != api.JobStatusCommitted || ext.Datacenters["dc3"].Status != api.JobStatusCommitted ||
		ext.Datacenters["dc2"].Status != api.KeyStateRejected {
		t.Fatalf("answer %s", first.body)
	}
	if first.header.Get(api.HeaderRetryAfter) == "" {
		t.Fatalf("429 without Retry-After: %s", first)
	}
	for _, tg := range []*testGate{f.g[0], f.g[1], f.g[2]} {
		again := tg.submit(t, skey(9), body)
		wantStatus(t, again, http.StatusTooManyRequests)
		wantHeader(t, again, api.HeaderReplayed, "true")
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay differs:\n%s\n%s", again.body, first.body)
		}
	}
	if n := f.jobs(); n != [3]int{1, 1, 1} {
		t.Fatalf("datacenters hold %v jobs, want 1, 1 (the earlier one), 1", n)
	}
}

// TestMultiDC3OmittedListRetryThroughAnotherHome: an omitted-list submission
// through dc3's gate while dc2 is unreachable is 503 and leaves dc3's claim in
// dc1. Its retry through dc2's gate finds nothing in dc2's ledger, so dc2 is
// its home: dc2's claim replaces dc3's in dc1 (dc2 sorts first) and the job is
// made in dc2, once. Before claims gave way, every retry through every gate
// was 422 idempotency_key_claimed until the claims expired. Every gate then
// answers the same job.
func TestMultiDC3OmittedListRetryThroughAnotherHome(t *testing.T) {
	f := startFederation3(t, [3]managertest.Options{}, func(cfg *Config, deps *Deps) {
		cfg.ForwardTimeout = 300 * time.Millisecond
	})
	const body = `{"type":"x","payload":{"n":7}}`
	f.m[1].SetSubmitHook(unavailable)
	wantProblem(t, f.g[2].submit(t, skey(7), body), http.StatusServiceUnavailable, api.CodeUnavailable)
	if e, ok := f.m[0].FSM().Entry(api.DefaultTenant, skey(7)); !ok || e.Home() != "dc3" {
		t.Fatalf("dc1's entry after the first attempt: %+v, %v; want dc3's claim", e, ok)
	}
	f.m[1].SetSubmitHook(nil)

	first := f.g[1].submit(t, skey(7), body)
	job := wantJob(t, first, http.StatusCreated)
	if _, ok := job.Datacenters["dc2"]; len(job.Datacenters) != 1 || !ok {
		t.Fatalf("job %+v, want one run in dc2", job)
	}
	for i, tg := range f.g {
		again := tg.submit(t, skey(7), body)
		wantStatus(t, again, http.StatusCreated)
		if wantJob(t, again, http.StatusCreated).JobID != job.JobID {
			t.Fatalf("through dc%d's gate: %s; want job %s", i+1, again.body, job.JobID)
		}
	}
	if n := f.jobs(); n != [3]int{0, 1, 0} {
		t.Fatalf("datacenters hold %v jobs, want dc2's alone", n)
	}
	for i, m := range f.m {
		e, ok := m.FSM().Entry(api.DefaultTenant, skey(7))
		if !ok || e.JobID != job.JobID || !slices.Equal(e.Request.Datacenters, []string{"dc2"}) {
			t.Fatalf("dc%d's entry %+v, %v; want dc2's job or claim", i+1, e, ok)
		}
	}
}
