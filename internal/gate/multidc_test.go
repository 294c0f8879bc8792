package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
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

// federation is two fake datacenters, dc1 and dc2, each with a fake manager
// leader and a gate that knows both.
type federation struct {
	m1, m2 *testManager
	g1, g2 *testGate
}

func startFederation(t *testing.T, opts1, opts2 managertest.Options, override func(cfg *Config, deps *Deps)) *federation {
	t.Helper()
	opts1.Datacenter, opts2.Datacenter = "dc1", "dc2"
	m1, a1 := startManager(t, opts1)
	m2, a2 := startManager(t, opts2)
	fed := StaticFederation{"dc1": {a1}, "dc2": {a2}}
	gate := func(dc, addr string) *testGate {
		return startGate(t, []string{addr}, func(cfg *Config, deps *Deps) {
			cfg.Datacenter = dc
			cfg.NodeName = "gate-" + dc
			deps.Federation = fed
			if override != nil {
				override(cfg, deps)
			}
		})
	}
	return &federation{m1: m1, m2: m2, g1: gate("dc1", a1), g2: gate("dc2", a2)}
}

// jobIn returns datacenter m's copy of job id, failing the test when absent.
func jobIn(t *testing.T, m *testManager, id string) *rpcpb.Job {
	t.Helper()
	j, err := m.GetJob(context.Background(), api.DefaultTenant, id)
	if err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	return j
}

// TestMultiDCFanOutAndReplay: a job for dc1 and dc2 through a dc1 gate is
// admitted in both with one job ID; the answer maps both datacenters to
// committed; a retry through the dc2 gate (the set written otherwise) is the
// same bytes with the same expiry, and neither datacenter holds a second job.
func TestMultiDCFanOutAndReplay(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	first := f.g1.submit(t, skey(1), `{"type":"x","payload":{"n":1},"datacenters":["dc2","dc1","dc2"]}`)
	job := wantJob(t, first, http.StatusCreated)
	wantHeader(t, first, api.HeaderReplayed, "false")
	if len(job.Datacenters) != 2 || job.Datacenters["dc1"].Status != api.JobStatusCommitted ||
		job.Datacenters["dc2"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v, want dc1 and dc2 committed", job.Datacenters)
	}
	for _, m := range []*testManager{f.m1, f.m2} {
		if n := m.Jobs(); n != 1 {
			t.Fatalf("a datacenter holds %d jobs, want 1", n)
		}
		jobIn(t, m, job.JobID)
	}
	for _, tg := range []*testGate{f.g2, f.g1, f.g2} {
		again := tg.submit(t, skey(1), `{"datacenters":["dc1","dc2"],"payload":{"n":1},"type":"x"}`)
		wantStatus(t, again, http.StatusCreated)
		wantHeader(t, again, api.HeaderReplayed, "true")
		wantHeader(t, again, api.HeaderIdempotencyExpiresAt, first.header.Get(api.HeaderIdempotencyExpiresAt))
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay differs:\n%s\n%s", again.body, first.body)
		}
	}
	if n1, n2 := f.m1.Jobs(), f.m2.Jobs(); n1 != 1 || n2 != 1 {
		t.Fatalf("datacenters hold %d and %d jobs, want 1 and 1", n1, n2)
	}
	// Both ledgers expire the key at the same instant.
	k1, err1 := f.m1.GetKey(context.Background(), api.DefaultTenant, skey(1))
	k2, err2 := f.m2.GetKey(context.Background(), api.DefaultTenant, skey(1))
	if err1 != nil || err2 != nil || k1.ExpiresAt != k2.ExpiresAt {
		t.Fatalf("key expiries %+v (%v) and %+v (%v), want the same", k1, err1, k2, err2)
	}
}

// TestMultiDCPartialFailureThenRetry: with dc2 unreachable the answer is 503
// and nothing is cached; dc1 keeps its job; a retry through the dc2 gate once
// dc2 is back completes dc2 with the same job ID.
func TestMultiDCPartialFailureThenRetry(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, func(cfg *Config, deps *Deps) {
		// A forward's deadline is the forward timeout plus the pending wait.
		cfg.ForwardTimeout = 300 * time.Millisecond
		cfg.Idempotency.PendingWaitTimeout = 200 * time.Millisecond
	})
	f.m2.SetSubmitHook(func(ctx context.Context, req *rpcpb.SubmitRequest) error {
		return rpc.Errorf(rpc.CodeUnavailable, "dc2 is down")
	})
	const body = `{"type":"x","datacenters":["dc1","dc2"]}`
	for range 2 { // the second attempt is forwarded again: nothing was cached
		res := f.g1.submit(t, skey(2), body)
		p := wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
		if !strings.Contains(p.Detail, `"dc2"`) {
			t.Fatalf("detail %q does not name dc2", p.Detail)
		}
	}
	if s := f.m1.Submits(); s != 2 {
		t.Fatalf("dc1 saw %d submissions, want 2 (503 is never cached)", s)
	}
	if n1, n2 := f.m1.Jobs(), f.m2.Jobs(); n1 != 1 || n2 != 0 {
		t.Fatalf("datacenters hold %d and %d jobs, want 1 and 0", n1, n2)
	}
	f.m2.SetSubmitHook(nil)
	res := f.g2.submit(t, skey(2), body)
	job := wantJob(t, res, http.StatusCreated)
	if job.Datacenters["dc1"].Status != api.JobStatusCommitted || job.Datacenters["dc2"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v", job.Datacenters)
	}
	if n1, n2 := f.m1.Jobs(), f.m2.Jobs(); n1 != 1 || n2 != 1 {
		t.Fatalf("datacenters hold %d and %d jobs, want 1 and 1", n1, n2)
	}
	if a, b := jobIn(t, f.m1, job.JobID), jobIn(t, f.m2, job.JobID); a.JobId != b.JobId {
		t.Fatalf("job ids %s and %s", a.JobId, b.JobId)
	}
	again := f.g1.submit(t, skey(2), body)
	wantStatus(t, again, http.StatusCreated)
	if !bytes.Equal(again.body, res.body) {
		t.Fatalf("answers differ through the two gates:\n%s\n%s", again.body, res.body)
	}
}

// TestMultiDCRejection: dc2 rejects what dc1 admits: the answer is dc2's
// rejection, naming every datacenter's outcome, and it is replayed byte for
// byte, with the same Idempotency-Expires-At, through the gates of both
// datacenters, from the managers and from a gate's cache.
func TestMultiDCRejection(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{Config: func(c *manager.Config) {
		c.AllowedJobTypes = []string{"not_x"} // dc2 accepts no job of type x
	}}, nil)
	const body = `{"type":"x","datacenters":["dc1","dc2"]}`
	first := f.g1.submit(t, skey(3), body)
	wantStatus(t, first, http.StatusUnprocessableEntity)
	var ext struct {
		api.Problem
		JobID       string                          `json:"job_id"`
		Datacenters map[string]api.DatacenterStatus `json:"datacenters"`
	}
	decodeJSON(t, first.body, &ext)
	if ext.Code != api.CodeJobRejected || ext.Reason != "unknown_job_type" || !strings.Contains(ext.Detail, "dc2") {
		t.Fatalf("problem %+v", ext.Problem)
	}
	if ext.Datacenters["dc1"] != (api.DatacenterStatus{Status: "committed"}) ||
		ext.Datacenters["dc2"] != (api.DatacenterStatus{Status: "rejected", Reason: "unknown_job_type"}) || ext.JobID == "" {
		t.Fatalf("job_id %q datacenters %+v", ext.JobID, ext.Datacenters)
	}
	for _, tg := range []*testGate{f.g2, f.g1, f.g2} { // dc2's gate from the managers, then from its cache
		again := tg.submit(t, skey(3), body)
		wantStatus(t, again, http.StatusUnprocessableEntity)
		wantHeader(t, again, api.HeaderReplayed, "true")
		wantHeader(t, again, api.HeaderIdempotencyExpiresAt, first.header.Get(api.HeaderIdempotencyExpiresAt))
		if !bytes.Equal(again.body, first.body) {
			t.Fatalf("replay differs:\n%s\n%s", again.body, first.body)
		}
	}
}

// TestMultiDCRacedFirstAttempts: two first attempts of one key through gates
// of different datacenters, overlapping at both leaders, make one job per
// datacenter with one ID, and both clients get the same bytes.
func TestMultiDCRacedFirstAttempts(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	release := make(chan struct{})
	hold := func(ctx context.Context, req *rpcpb.SubmitRequest) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return rpc.Errorf(rpc.CodeUnavailable, "cancelled")
		}
	}
	f.m1.SetSubmitHook(hold)
	f.m2.SetSubmitHook(hold)
	const body = `{"type":"x","datacenters":["dc1","dc2"]}`
	var results [2]result
	var errs [2]error
	var wg sync.WaitGroup
	for i, tg := range []*testGate{f.g1, f.g2} {
		wg.Go(func() { results[i], errs[i] = tg.trySubmit(skey(4), body) })
	}
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		s1, s2 := f.m1.Submits(), f.m2.Submits()
		return s1 == 2 && s2 == 2, "both gates' attempts held at both leaders"
	})
	close(release)
	wg.Wait()
	var ids []string
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("gate %d: %v", i+1, errs[i])
		}
		ids = append(ids, wantJob(t, res, http.StatusCreated).JobID)
	}
	if ids[0] != ids[1] || !bytes.Equal(results[0].body, results[1].body) {
		t.Fatalf("answers differ:\n%s\n%s", results[0].body, results[1].body)
	}
	if n1, n2 := f.m1.Jobs(), f.m2.Jobs(); n1 != 1 || n2 != 1 {
		t.Fatalf("datacenters hold %d and %d jobs, want 1 and 1", n1, n2)
	}
}

// TestMultiDCReads: GET /v1/jobs/{id} through either gate finds a job of
// either datacenter; ?datacenter= reads one datacenter's copy; an unknown
// datacenter is 400.
func TestMultiDCReads(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	only2 := wantJob(t, f.g2.submit(t, skey(5), `{"type":"x"}`), http.StatusCreated)
	for _, tg := range []*testGate{f.g1, f.g2} {
		got := wantJob(t, tg.get(t, "/v1/jobs/"+only2.JobID), http.StatusOK)
		if got.JobID != only2.JobID || got.Datacenters["dc2"].Status != api.JobStatusCommitted {
			t.Fatalf("job %+v", got)
		}
	}
	wantProblem(t, f.g2.get(t, "/v1/jobs/"+only2.JobID+"?datacenter=dc1"), http.StatusNotFound, api.CodeJobNotFound)
	wantJob(t, f.g1.get(t, "/v1/jobs/"+only2.JobID+"?datacenter=dc2"), http.StatusOK)
	wantProblem(t, f.g1.get(t, "/v1/jobs/"+only2.JobID+"?datacenter=dc9"), http.StatusBadRequest, api.CodeInvalidRequest)
	wantProblem(t, f.g1.get(t, "/v1/jobs/nope"), http.StatusNotFound, api.CodeJobNotFound)

	var list api.JobList
	res := f.g1.get(t, "/v1/jobs")
	wantStatus(t, res, http.StatusOK)
	decodeJSON(t, res.body, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("dc1 lists %d jobs, want 0", len(list.Jobs))
	}
	res = f.g1.get(t, "/v1/jobs?datacenter=dc2")
	wantStatus(t, res, http.StatusOK)
	decodeJSON(t, res.body, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].JobID != only2.JobID {
		t.Fatalf("dc2 lists %+v, want job %s", list.Jobs, only2.JobID)
	}
	wantProblem(t, f.g1.get(t, "/v1/jobs?datacenter=dc9"), http.StatusBadRequest, api.CodeInvalidRequest)
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// TestMultiDCSetFormsAndRemoteFollower: the datacenters are a set (order and
// repetition make the same request; in a federation an omitted list is the
// list naming its home alone, whichever gate it comes through); a remote datacenter
// whose first listed manager is a follower is still reached (the client
// moves on to its leader); a datacenter outside the federation is 400 and
// nothing is forwarded.
func TestMultiDCSetFormsAndRemoteFollower(t *testing.T) {
	m1, a1 := startManager(t, managertest.Options{Datacenter: "dc1"})
	follower, af := startManager(t, managertest.Options{Datacenter: "dc2"})
	follower.SetLeader(false)
	m2, a2 := startManager(t, managertest.Options{Datacenter: "dc2"})
	g := startGate(t, []string{a1}, func(cfg *Config, deps *Deps) {
		deps.Federation = StaticFederation{"dc1": {a1}, "dc2": {af, a2}}
	})

	own := g.submit(t, skey(6), `{"type":"x","datacenters":["dc1"]}`)
	wantJob(t, own, http.StatusCreated)
	same := g.submit(t, skey(6), `{"type":"x","datacenters":["dc1","dc1"]}`)
	wantHeader(t, same, api.HeaderReplayed, "true")
	if !bytes.Equal(same.body, own.body) {
		t.Fatalf(`["dc1","dc1"] is not ["dc1"]'s request:\n%s\n%s`, same.body, own.body)
	}
	// Omitted, it resolves to the job's home, dc1: the same request.
	omitted := g.submit(t, skey(6), `{"type":"x"}`)
	wantHeader(t, omitted, api.HeaderReplayed, "true")
	if !bytes.Equal(omitted.body, own.body) {
		t.Fatalf("an omitted list is not [\"dc1\"]'s request, dc1 its home:\n%s\n%s", omitted.body, own.body)
	}
	wantProblem(t, g.submit(t, skey(6), `{"type":"x","datacenters":["dc2"]}`), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)

	both := wantJob(t, g.submit(t, skey(7), `{"type":"x","datacenters":["dc2","dc1"]}`), http.StatusCreated)
	if both.Datacenters["dc2"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v", both.Datacenters)
	}
	jobIn(t, m2, both.JobID)
	if follower.Jobs() != 0 {
		t.Fatal("the follower made a job")
	}

	before := m1.Submits() + m2.Submits()
	res := g.submit(t, skey(8), `{"type":"x","datacenters":["dc1","dc9"]}`)
	wantProblem(t, res, http.StatusBadRequest, api.CodeInvalidRequest)
	if after := m1.Submits() + m2.Submits(); after != before {
		t.Fatalf("a job naming an unknown datacenter was forwarded (%d submissions, want %d)", after, before)
	}
}

// TestMultiDCBeforeTheFirstView: a gate that has not read a federation view
// yet (its managers have not answered since it started) cannot tell an
// unknown datacenter from one it has not heard of: a job naming another
// datacenter is 503 with Retry-After, not 400, and nothing is forwarded or
// cached; its own datacenter's jobs are served as always.
func TestMultiDCBeforeTheFirstView(t *testing.T) {
	m1, a1 := startManager(t, managertest.Options{Datacenter: "dc1"})
	g := startGate(t, []string{a1}, func(cfg *Config, deps *Deps) {
		deps.Federation = StaticFederation(nil)
	})
	res := g.submit(t, skey(1), `{"type":"x","datacenters":["dc1","dc2"]}`)
	wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
	if res.header.Get(api.HeaderRetryAfter) == "" {
		t.Fatal("503 without Retry-After")
	}
	if n := m1.Submits(); n != 0 {
		t.Fatalf("%d submissions forwarded, want 0", n)
	}
	again := g.submit(t, skey(1), `{"type":"x","datacenters":["dc1","dc2"]}`)
	wantProblem(t, again, http.StatusServiceUnavailable, api.CodeUnavailable)
	if again.header.Get(api.HeaderReplayed) != "" {
		t.Fatal("the 503 was cached and replayed")
	}
	wantJob(t, g.submit(t, skey(2), `{"type":"x"}`), http.StatusCreated)
}

// TestMultiDCOmittedListRetryThroughTheOtherGate: an omitted list through
// the dc1 gate runs in dc1 and claims the key in dc2 (first); its retry
// through the dc2 gate is the first answer, byte for byte, and dc2 never
// holds a job of it. A single datacenter's gate sends no claim.
func TestMultiDCOmittedListRetryThroughTheOtherGate(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	first := f.g1.submit(t, skey(40), `{"type":"x","payload":{"n":40}}`)
	job := wantJob(t, first, http.StatusCreated)
	if len(job.Datacenters) != 1 || job.Datacenters["dc1"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v, want dc1 alone", job.Datacenters)
	}
	info, err := f.m2.GetKey(context.Background(), api.DefaultTenant, skey(40))
	if err != nil || info.State != api.KeyStateClaimed || info.Home != "dc1" || *info.JobId != job.JobID {
		t.Fatalf("dc2's key %+v, %v", info, err)
	}
	again := f.g2.submit(t, skey(40), `{"payload":{"n":40},"type":"x"}`)
	wantStatus(t, again, http.StatusCreated)
	wantHeader(t, again, api.HeaderReplayed, "true")
	wantHeader(t, again, api.HeaderIdempotencyExpiresAt, first.header.Get(api.HeaderIdempotencyExpiresAt))
	if !bytes.Equal(again.body, first.body) {
		t.Fatalf("retry through dc2:\n%s\nfirst:\n%s", again.body, first.body)
	}
	if n1, n2 := f.m1.Jobs(), f.m2.Jobs(); n1 != 1 || n2 != 0 {
		t.Fatalf("datacenters hold %d and %d jobs, want 1 and 0", n1, n2)
	}

	m, addr := startManager(t, managertest.Options{})
	single := startGate(t, []string{addr}, func(cfg *Config, deps *Deps) {
		deps.Federation = StaticFederation{"dc1": {addr}}
	})
	wantJob(t, single.submit(t, skey(41), `{"type":"x"}`), http.StatusCreated)
	wantHeader(t, single.submit(t, skey(41), `{"type":"x","datacenters":["dc1"]}`), api.HeaderReplayed, "true")
	if info, err := m.GetKey(context.Background(), api.DefaultTenant, skey(41)); err != nil || info.State != api.KeyStateCommitted {
		t.Fatalf("single datacenter's key %+v, %v", info, err)
	}
}

// TestMultiDCNamedDatacenters: a read of a job whose submission named two
// datacenters carries named_datacenters (the set, sorted) right after the
// lifecycle members, through either gate, of either copy, in a list page,
// a lease and a worker's answer; the 201 and its replays do not. A job of one
// datacenter in the same federation reads as it always did: its 201's bytes
// followed by its state, nothing else.
func TestMultiDCNamedDatacenters(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	created := f.g1.submit(t, skey(1), `{"type":"x","payload":{"n":1},"datacenters":["dc2","dc1"]}`)
	both := wantJob(t, created, http.StatusCreated)
	if both.NamedDatacenters != nil || bytes.Contains(created.body, []byte("named_datacenters")) {
		t.Fatalf("the 201 carries named_datacenters: %s", created.body)
	}
	replay := f.g2.submit(t, skey(1), `{"type":"x","payload":{"n":1},"datacenters":["dc1","dc2"]}`)
	wantHeader(t, replay, api.HeaderReplayed, "true")
	if !bytes.Equal(replay.body, created.body) {
		t.Fatalf("replay differs:\n%s\n%s", replay.body, created.body)
	}
	// One datacenter's copy: its 201 members (its own datacenter in the
	// map, its own creation time: the 201's is dc1's), its state, then the
	// named set.
	copyOf := func(dc, createdAt string) []byte {
		var admission api.Job
		decodeJSON(t, created.body, &admission)
		admission.Datacenters = map[string]api.DatacenterStatus{dc: {Status: api.JobStatusCommitted}}
		if dc != "dc1" {
			admission.CreatedAt = createdAt
		}
		b, err := json.Marshal(admission)
		if err != nil {
			t.Fatal(err)
		}
		return append(b[:len(b)-1], `,"state":"queued","named_datacenters":["dc1","dc2"]}`+"\n"...)
	}
	for _, read := range []struct {
		g    *testGate
		path string
		dc   string
	}{
		{f.g1, "/v1/jobs/" + both.JobID, "dc1"},
		{f.g2, "/v1/jobs/" + both.JobID, "dc2"},
		{f.g1, "/v1/jobs/" + both.JobID + "?datacenter=dc2", "dc2"},
		{f.g2, "/v1/jobs/" + both.JobID + "?datacenter=dc1", "dc1"},
	} {
		res := read.g.get(t, read.path)
		got := wantJob(t, res, http.StatusOK)
		if want := copyOf(read.dc, got.CreatedAt); !bytes.Equal(res.body, want) {
			t.Fatalf("GET %s:\n%s\nwant\n%s", read.path, res.body, want)
		}
		if !slices.Equal(got.NamedDatacenters, []string{"dc1", "dc2"}) {
			t.Fatalf("GET %s: named_datacenters %q", read.path, got.NamedDatacenters)
		}
	}

	// A job of one datacenter, named or not, in the same federation.
	for i, body := range []string{`{"type":"x","payload":{"n":2},"datacenters":["dc1"]}`, `{"type":"x","payload":{"n":3}}`} {
		one := f.g1.submit(t, skey(2+i), body)
		job := wantJob(t, one, http.StatusCreated)
		res := f.g1.get(t, "/v1/jobs/"+job.JobID)
		wantStatus(t, res, http.StatusOK)
		want := append(bytes.Clone(one.body[:len(one.body)-2]), `,"state":"queued"}`+"\n"...)
		if !bytes.Equal(res.body, want) {
			t.Fatalf("GET of a job of one datacenter:\n%s\nwant\n%s", res.body, want)
		}
	}

	// A list page of either datacenter.
	for _, q := range []string{"", "?datacenter=dc2"} {
		var list api.JobList
		res := f.g1.get(t, "/v1/jobs"+q)
		wantStatus(t, res, http.StatusOK)
		decodeJSON(t, res.body, &list)
		named := 0
		for _, j := range list.Jobs {
			if j.JobID == both.JobID && slices.Equal(j.NamedDatacenters, []string{"dc1", "dc2"}) {
				named++
			} else if j.NamedDatacenters != nil {
				t.Fatalf("list%s: job %s of one datacenter carries %q", q, j.JobID, j.NamedDatacenters)
			}
		}
		if named != 1 {
			t.Fatalf("list%s: %s", q, res.body)
		}
	}

	// A lease in dc2 and its complete.
	leases := decodeLeases(t, f.g2.post(t, "/v1/leases", `{}`))
	if len(leases) != 1 || leases[0].Job.JobID != both.JobID || !slices.Equal(leases[0].Job.NamedDatacenters, []string{"dc1", "dc2"}) {
		t.Fatalf("dc2's leases %+v", leases)
	}
	res := f.g2.post(t, "/v1/jobs/"+both.JobID+"/complete", `{"lease_id":"`+leases[0].LeaseID+`","result":1}`)
	done := wantJob(t, res, http.StatusOK)
	if done.State != api.JobStatusSucceeded || !bytes.HasSuffix(res.body, []byte(`,"result":1,"named_datacenters":["dc1","dc2"]}`+"\n")) {
		t.Fatalf("complete: %s", res.body)
	}
	// dc1's copy is its own: still queued.
	if j := wantJob(t, f.g2.get(t, "/v1/jobs/"+both.JobID+"?datacenter=dc1"), http.StatusOK); j.State != api.JobStatusQueued {
		t.Fatalf("dc1's copy is %s, want queued", j.State)
	}
}

// TestMultiDCKeyReadFollowsTheClaim: an omitted datacenters list in a
// federation leaves a claim on the key in the other datacenter, not an
// outcome. A key read that names no datacenter, through that datacenter's
// gate, is answered by the claim's home, where the admission is decided: the
// key is pending while the home holds nothing for it, then committed, with
// the home's job and expiry, as through the home's own gate. Named with
// ?datacenter=, the other datacenter's entry is read as it is: the claim.
func TestMultiDCKeyReadFollowsTheClaim(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	path := "/v1/idempotency-keys/" + url.PathEscape(skey(50))
	keyInfo := func(g *testGate, query, state string) api.KeyInfo {
		t.Helper()
		res := g.get(t, path+query)
		wantStatus(t, res, http.StatusOK)
		var info api.KeyInfo
		decodeJSON(t, res.body, &info)
		if info.State != state || info.Key != skey(50) || info.JobID == nil {
			t.Fatalf("key read %s%s: %s, want state %s", g.cfg.Datacenter, query, res.body, state)
		}
		if home := info.Home != ""; home != (state == api.KeyStateClaimed) {
			t.Fatalf("key read %s%s: %s, a home member only for a claim", g.cfg.Datacenter, query, res.body)
		}
		return info
	}

	// The first attempt records dc2's claim, then cannot reach its home.
	f.m1.SetSubmitHook(unavailable)
	wantProblem(t, f.g1.submit(t, skey(50), `{"type":"x"}`), http.StatusServiceUnavailable, api.CodeUnavailable)
	keyInfo(f.g2, "", api.KeyStatePending)
	keyInfo(f.g2, "?datacenter=dc2", api.KeyStateClaimed)

	f.m1.SetSubmitHook(nil)
	job := wantJob(t, f.g1.submit(t, skey(50), `{"type":"x"}`), http.StatusCreated)
	home := keyInfo(f.g1, "", api.KeyStateCommitted)
	other := keyInfo(f.g2, "", api.KeyStateCommitted)
	if *other.JobID != job.JobID || other.ExpiresAt != home.ExpiresAt || other.ClientID != home.ClientID {
		t.Fatalf("through dc2 %+v, through dc1 %+v (job %s)", other, home, job.JobID)
	}
	if claim := keyInfo(f.g2, "?datacenter=dc2", api.KeyStateClaimed); claim.Home != "dc1" || *claim.JobID != job.JobID {
		t.Fatalf("dc2's claim %+v", claim)
	}
}

// TestMultiDCKeyReadNeverAnswersAClaim: a key read that names no datacenter
// answers pending, committed or rejected, never a claim: claims that name
// each other (an attempt is moving them to the home that sorts first) leave
// the key pending through the gates of both datacenters, and a claim whose
// home the gate's view does not name (not yet, or no longer) is 503 with
// Retry-After, the home being unaskable.
func TestMultiDCKeyReadNeverAnswersAClaim(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, nil)
	claim := func(m *testManager, key, home string) {
		t.Helper()
		resp, err := m.Submit(context.Background(), &rpcpb.SubmitRequest{Tenant: api.DefaultTenant, Key: key, Fingerprint: "fp",
			Home: home, WaitMillis: 60_000, Job: &rpcpb.JobRequest{Type: "x", Payload: json.RawMessage(`{}`), Datacenters: []string{home}}})
		if err != nil || resp.Outcome != rpc.OutcomeClaimed || resp.Home != home {
			t.Fatalf("claim of %s for %s: %+v, %v", key, home, resp, err)
		}
	}
	read := func(g *testGate, key string) result {
		return g.get(t, "/v1/idempotency-keys/"+url.PathEscape(key))
	}

	claim(f.m1, skey(60), "dc2")
	claim(f.m2, skey(60), "dc1")
	for _, g := range []*testGate{f.g1, f.g2} {
		res := read(g, skey(60))
		wantStatus(t, res, http.StatusOK)
		var info api.KeyInfo
		decodeJSON(t, res.body, &info)
		if info.State != api.KeyStatePending || info.Home != "" {
			t.Fatalf("key read through %s: %s, want pending", g.cfg.Datacenter, res.body)
		}
	}

	claim(f.m2, skey(61), "dc9")
	wantProblem(t, read(f.g2, skey(61)), http.StatusServiceUnavailable, api.CodeUnavailable)
	alone := startGate(t, []string{f.m2.cluster.Addrs[0]}, func(cfg *Config, deps *Deps) {
		cfg.Datacenter, cfg.NodeName = "dc2", "gate-dc2-alone"
		deps.Federation = StaticFederation{"dc2": {f.m2.cluster.Addrs[0]}}
	})
	res := wantProblemRes(t, read(alone, skey(60)), http.StatusServiceUnavailable, api.CodeUnavailable)
	if res.header.Get(api.HeaderRetryAfter) == "" {
		t.Fatalf("503 without Retry-After: %v", res.header)
	}
}

// TestCloseEndsAFanOutInFlight: a gate closed while a fan-out waits on a
// datacenter that has not answered closes that datacenter's client with the
// call on it: its lane ends (no connection to dc2 is left open, as one was
// until dc2's manager closed it) and the request is answered 503.
func TestCloseEndsAFanOutInFlight(t *testing.T) {
	f := startFederation(t, managertest.Options{}, managertest.Options{}, func(cfg *Config, deps *Deps) {
		cfg.ForwardTimeout = 10 * time.Minute
	})
	inFlight, _ := holdInFlight(t, f.m2)
	var res result
	var err error
	var wg sync.WaitGroup
	wg.Go(func() { res, err = f.g1.trySubmit(skey(1), `{"type":"x","datacenters":["dc1","dc2"]}`) })
	<-inFlight
	if err := f.g1.Close(); err != nil {
		t.Fatal(err)
	}
	// Its lanes end with its clients, dc2's too (before the managers
	// stop at the test's end, which would end it anyway).
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		buf := make([]byte, 1<<20)
		for {
			n := runtime.Stack(buf, true)
			if n < len(buf) {
				return !bytes.Contains(buf[:n], []byte("rpc.(*lane).receive")), "the gate's lanes to end"
			}
			buf = make([]byte, 2*len(buf))
		}
	})
	wg.Wait()
	if err != nil {
		t.Fatalf("the fan-out in flight when the gate closed: %v, want an answer", err)
	}
	wantProblem(t, res, http.StatusServiceUnavailable, api.CodeUnavailable)
}
