package manager

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/gate"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// twoDCs is an in-process federation: dc1 and dc2, one real manager each
// (its own Raft group and ledger, RPC served), and a real gate in each that
// knows both.
type twoDCs struct {
	dc1, dc2 *testCluster
	g1, g2   *httptest.Server
}

func startTwoDCs(t *testing.T) *twoDCs {
	t.Helper()
	cluster := func(dc string) *testCluster {
		tc := newTestCluster(t, 1, func(c *Config) {
			c.Datacenter = dc
			c.RPCAddr = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
			c.RPCAdvertise = c.RPCAddr
		})
		serveRPC(t, tc)
		return tc
	}
	f := &twoDCs{dc1: cluster("dc1"), dc2: cluster("dc2")}
	fed := gate.StaticFederation{"dc1": {f.dc1.cfgs[0].RPCAdvertise}, "dc2": {f.dc2.cfgs[0].RPCAdvertise}}
	f.g1 = startTestGate(t, "dc1", fed)
	f.g2 = startTestGate(t, "dc2", fed)
	return f
}

// startTestGate serves a gate of datacenter dc, whose managers are fed's
// for dc, over httptest until the test ends.
func startTestGate(t *testing.T, dc string, fed gate.StaticFederation) *httptest.Server {
	t.Helper()
	return startTestGateAt(t, dc, fed[dc], fed, 10*time.Second)
}

// startTestGateAt is startTestGate with the gate's own managers and its
// forward timeout given.
func startTestGateAt(t *testing.T, dc string, managers []string, fed gate.StaticFederation, timeout time.Duration) *httptest.Server {
	t.Helper()
	cfg := gate.DefaultConfig()
	cfg.Datacenter, cfg.NodeName, cfg.Managers = dc, "gate-"+dc, managers
	cfg.ForwardTimeout = timeout
	cfg.Idempotency.PendingWaitTimeout = timeout // a forward's deadline is the sum
	g, err := gate.New(cfg, gate.Deps{Logger: testutil.Logger(t).With("gate", dc), Federation: fed})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(func() { srv.Close(); _ = g.Close() })
	return srv
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

// post submits body under key through srv; hdr is more header name, value
// pairs.
func post(t *testing.T, srv *httptest.Server, key, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/jobs", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(api.HeaderIdempotencyKey, key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, srv, req)
}

// waitEntriesGone waits until the key's entry has expired and been removed
// in every cluster of tcs.
func waitEntriesGone(t *testing.T, key string, tcs ...*testCluster) {
	t.Helper()
	for _, tc := range tcs {
		fsm := tc.mgrs[tc.leader()].FSM()
		testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
			_, ok := fsm.Entry("default", key)
			return !ok, "the key's entries to expire"
		})
	}
}

func get(t *testing.T, srv *httptest.Server, path string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, srv, req)
}

func do(t *testing.T, srv *httptest.Server, req *http.Request) answer {
	t.Helper()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

func (a answer) job(t *testing.T) api.Job {
	t.Helper()
	if a.status != http.StatusCreated {
		t.Fatalf("status %d, want 201: %s", a.status, a.body)
	}
	var j api.Job
	if err := json.Unmarshal(a.body, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

func jobsIn(tc *testCluster) int { return tc.mgrs[tc.leader()].fsm.Stats().Jobs }

// TestOmittedListRetryThroughAnotherDatacenter: a job without a datacenters
// list, first sent through a dc1 gate, runs in dc1 alone; dc2 holds a claim
// on its key; the retry through a dc2 gate is the first answer byte for
// byte (the job of dc1), never a second job in dc2. A retry naming dc1 alone
// is the same request (a replay), one naming another list another request
// (422), and reads find the job through either gate.
func TestOmittedListRetryThroughAnotherDatacenter(t *testing.T) {
	f := startTwoDCs(t)
	const key, body = "host1.dc1:12345:1:0123456789abcdef", `{"type":"demo","payload":{"n":1}}`
	first := post(t, f.g1, key, body)
	job := first.job(t)
	if len(job.Datacenters) != 1 || job.Datacenters["dc1"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v, want dc1 alone", job.Datacenters)
	}
	if got := first.header.Get(api.HeaderReplayed); got != "false" {
		t.Fatalf("first answer replayed %q", got)
	}
	for _, srv := range []*httptest.Server{f.g2, f.g1, f.g2} {
		again := post(t, srv, key, `{"payload":{"n":1},"type":"demo","datacenters":null}`)
		if again.status != http.StatusCreated || !bytes.Equal(again.body, first.body) {
			t.Fatalf("retry: %d %s, want the first answer %s", again.status, again.body, first.body)
		}
		if again.header.Get(api.HeaderReplayed) != "true" || again.header.Get(api.HeaderIdempotencyExpiresAt) != first.header.Get(api.HeaderIdempotencyExpiresAt) {
			t.Fatalf("retry headers %v, first %v", again.header, first.header)
		}
	}
	if n1, n2 := jobsIn(f.dc1), jobsIn(f.dc2); n1 != 1 || n2 != 0 {
		t.Fatalf("dc1 holds %d jobs and dc2 %d, want 1 and 0", n1, n2)
	}
	// Through dc2's gate the key is dc1's entry; dc2's own, read with
	// ?datacenter=dc2, is the claim.
	var info api.KeyInfo
	k := get(t, f.g2, "/v1/idempotency-keys/"+key)
	if err := json.Unmarshal(k.body, &info); err != nil || info.State != api.KeyStateCommitted || info.Home != "" ||
		info.JobID == nil || *info.JobID != job.JobID {
		t.Fatalf("the key through dc2: %d %s", k.status, k.body)
	}
	k = get(t, f.g2, "/v1/idempotency-keys/"+key+"?datacenter=dc2")
	if err := json.Unmarshal(k.body, &info); err != nil || info.State != api.KeyStateClaimed || info.Home != "dc1" ||
		info.JobID == nil || *info.JobID != job.JobID {
		t.Fatalf("dc2's key: %d %s", k.status, k.body)
	}
	k1 := get(t, f.g1, "/v1/idempotency-keys/"+key)
	if err := json.Unmarshal(k1.body, &info); err != nil || info.ExpiresAt != first.header.Get(api.HeaderIdempotencyExpiresAt) {
		t.Fatalf("dc1's key %s, answer expires at %s", k1.body, first.header.Get(api.HeaderIdempotencyExpiresAt))
	}
	for _, srv := range []*httptest.Server{f.g1, f.g2} {
		if r := get(t, srv, "/v1/jobs/"+job.JobID); r.status != http.StatusOK {
			t.Fatalf("GET the job: %d %s", r.status, r.body)
		}
	}
	if r := get(t, f.g2, "/v1/jobs"); r.status != http.StatusOK || bytes.Contains(r.body, []byte(job.JobID)) {
		t.Fatalf("dc2's list shows the claim: %d %s", r.status, r.body)
	}
	// The list naming the home alone is the same request; any other list
	// is another.
	for _, srv := range []*httptest.Server{f.g1, f.g2} {
		for _, list := range []string{`["dc2"]`, `["dc1","dc2"]`} {
			r := post(t, srv, key, `{"type":"demo","payload":{"n":1},"datacenters":`+list+`}`)
			if r.status != http.StatusUnprocessableEntity || !bytes.Contains(r.body, []byte(api.CodeIdempotencyKeyReused)) {
				t.Fatalf("%s: %d %s, want 422 %s", list, r.status, r.body, api.CodeIdempotencyKeyReused)
			}
		}
		r := post(t, srv, key, `{"type":"demo","payload":{"n":1},"datacenters":["dc1"]}`)
		if r.status != http.StatusCreated || !bytes.Equal(r.body, first.body) || r.header.Get(api.HeaderReplayed) != "true" {
			t.Fatalf(`["dc1"], the home alone: %d %s, want the first answer %s replayed`, r.status, r.body, first.body)
		}
	}
	if n1, n2 := jobsIn(f.dc1), jobsIn(f.dc2); n1 != 1 || n2 != 0 {
		t.Fatalf("dc1 holds %d jobs and dc2 %d, want 1 and 0", n1, n2)
	}
}

// TestOmittedListRetryAfterAFailedHome: the first attempt got its claim into
// dc2 but never reached dc1, its home (503); its retry through a dc2 gate
// finds dc2's claim and completes the job in dc1, the home the claim names:
// one job, in dc1.
func TestOmittedListRetryAfterAFailedHome(t *testing.T) {
	f := startTwoDCs(t)
	fed := gate.StaticFederation{"dc1": {f.dc1.cfgs[0].RPCAdvertise}, "dc2": {f.dc2.cfgs[0].RPCAdvertise}}
	cut := startTestGateAt(t, "dc1", []string{fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))}, fed, 500*time.Millisecond)
	const key, body = "host1.dc1:12345:3:0123456789abcdef", `{"type":"demo","payload":{"n":3}}`
	if r := post(t, cut, key, body); r.status != http.StatusServiceUnavailable || !bytes.Contains(r.body, []byte(`datacenter \"dc1\"`)) {
		t.Fatalf("a gate cut from its managers: %d %s, want 503 naming dc1", r.status, r.body)
	}
	info, err := f.dc2.mgrs[f.dc2.leader()].GetKey(context.Background(), api.DefaultTenant, key)
	if err != nil || info.State != api.KeyStateClaimed || info.Home != "dc1" {
		t.Fatalf("dc2's key after the failed attempt: %+v, %v", info, err)
	}
	retry := post(t, f.g2, key, body)
	job := retry.job(t)
	if len(job.Datacenters) != 1 || job.Datacenters["dc1"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v, want dc1 alone", job.Datacenters)
	}
	if again := post(t, f.g1, key, body); again.status != http.StatusCreated || !bytes.Equal(again.body, retry.body) {
		t.Fatalf("through dc1: %d %s, want %s", again.status, again.body, retry.body)
	}
	if n1, n2 := jobsIn(f.dc1), jobsIn(f.dc2); n1 != 1 || n2 != 0 {
		t.Fatalf("dc1 holds %d jobs and dc2 %d, want 1 and 0", n1, n2)
	}
}

// TestOmittedListRaceThroughTwoDatacenters: first attempts of one key race
// through a dc1 gate and a dc2 gate, both without a list: one job in all,
// and every answer is that job's (the same bytes) or a refusal naming the
// other datacenter.
func TestOmittedListRaceThroughTwoDatacenters(t *testing.T) {
	f := startTwoDCs(t)
	const rounds = 12
	for i := range rounds {
		key := fmt.Sprintf("host1.dc1:12345:%d:0123456789abcdef", 100+i)
		body := fmt.Sprintf(`{"type":"demo","payload":{"n":%d}}`, i)
		var wg sync.WaitGroup
		answers := make([]answer, 4)
		for j := range answers {
			srv := f.g1
			if j%2 == 1 {
				srv = f.g2
			}
			wg.Add(1)
			go func() { defer wg.Done(); answers[j] = post(t, srv, key, body) }()
		}
		wg.Wait()
		var bodies [][]byte
		for _, a := range answers {
			switch a.status {
			case http.StatusCreated:
				bodies = append(bodies, a.body)
			case http.StatusUnprocessableEntity:
				if !bytes.Contains(a.body, []byte(api.CodeIdempotencyKeyClaimed)) || !bytes.Contains(a.body, []byte(`datacenter \"dc`)) {
					t.Fatalf("refusal %s", a.body)
				}
			default:
				t.Fatalf("answer %d %s", a.status, a.body)
			}
		}
		for _, b := range bodies[min(1, len(bodies)):] {
			if !bytes.Equal(b, bodies[0]) {
				t.Fatalf("two answers:\n%s\n%s", bodies[0], b)
			}
		}
		if len(bodies) == 0 {
			t.Fatalf("round %d: every attempt refused", i)
		}
	}
	if n1, n2 := jobsIn(f.dc1), jobsIn(f.dc2); n1+n2 != rounds {
		t.Fatalf("dc1 holds %d jobs and dc2 %d, want %d in all", n1, n2, rounds)
	}
}

// TestListNamingOneDatacenterThenOmitted: a job first sent with a list
// naming one datacenter, then without a list (a client that dropped the
// member) through either datacenter's gate, is the same request: the list
// names the job's home, and the omitted list resolves to it. Every retry is
// the first answer byte for byte, and no second job runs anywhere.
func TestListNamingOneDatacenterThenOmitted(t *testing.T) {
	f := startTwoDCs(t)
	for i, c := range []struct {
		dc     string
		gate   *httptest.Server
		others []*httptest.Server
	}{
		{"dc1", f.g1, []*httptest.Server{f.g1, f.g2, f.g1}},
		{"dc2", f.g2, []*httptest.Server{f.g1, f.g2}},
	} {
		key := fmt.Sprintf("host1.dc1:12345:%d:0123456789abcdef", 200+i)
		first := post(t, c.gate, key, `{"type":"demo","payload":{"n":2},"datacenters":["`+c.dc+`"]}`)
		if first.status != http.StatusCreated {
			t.Fatalf("%s: first answer %d %s", c.dc, first.status, first.body)
		}
		for _, srv := range c.others {
			again := post(t, srv, key, `{"type":"demo","payload":{"n":2}}`)
			if again.status != http.StatusCreated || !bytes.Equal(again.body, first.body) || again.header.Get(api.HeaderReplayed) != "true" {
				t.Fatalf("%s: the omitted list: %d %s, want the first answer %s replayed", c.dc, again.status, again.body, first.body)
			}
		}
		// Another body under the key, omitted, is still another request.
		if r := post(t, f.g1, key, `{"type":"demo","payload":{"n":3}}`); r.status != http.StatusUnprocessableEntity ||
			!bytes.Contains(r.body, []byte(api.CodeIdempotencyKeyReused)) {
			t.Fatalf("%s: another payload: %d %s, want 422 %s", c.dc, r.status, r.body, api.CodeIdempotencyKeyReused)
		}
	}
	if n1, n2 := jobsIn(f.dc1), jobsIn(f.dc2); n1 != 1 || n2 != 1 {
		t.Fatalf("dc1 holds %d jobs and dc2 %d, want 1 and 1", n1, n2)
	}
}

// TestOmittedListSingleDatacenter: a gate whose federation is its own
// datacenter alone resolves an omitted list to it as it always did: the
// same request as ["dc1"], no claim anywhere.
func TestOmittedListSingleDatacenter(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) {
		c.RPCAddr = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
		c.RPCAdvertise = c.RPCAddr
	})
	serveRPC(t, tc)
	g := startTestGate(t, "dc1", gate.StaticFederation{"dc1": {tc.cfgs[0].RPCAdvertise}})
	const key = "host1.dc1:12345:7:0123456789abcdef"
	first := post(t, g, key, `{"type":"demo"}`)
	job := first.job(t)
	again := post(t, g, key, `{"type":"demo","datacenters":["dc1"]}`)
	if again.status != http.StatusCreated || !bytes.Equal(again.body, first.body) {
		t.Fatalf("[\"dc1\"] after an omitted list: %d %s", again.status, again.body)
	}
	info, err := tc.mgrs[tc.leader()].GetKey(context.Background(), api.DefaultTenant, key)
	if err != nil || info.State != api.KeyStateCommitted || info.Home != "" || *info.JobId != job.JobID {
		t.Fatalf("key %+v, %v", info, err)
	}
	if st := tc.mgrs[tc.leader()].fsm.Stats(); st.Claimed != 0 || st.Jobs != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestClaimAtTheManager: the two ends of a claim at real managers: a claim
// holds the key without a job, a repeated claim and a claim of another home
// answer the holder, and a home submission that finds another home's claim
// wins the key only when its datacenter's name sorts first.
func TestClaimAtTheManager(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.Datacenter = "dc2" })
	m := tc.mgrs[tc.leader()]
	ctx := ctxT(t)
	req := func(key, home string) *rpcpb.SubmitRequest {
		return &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp-" + key, Home: home, WaitMillis: 1000,
			Job: &rpcpb.JobRequest{Type: "demo", Payload: json.RawMessage(`{}`), Datacenters: []string{home}}}
	}
	for _, c := range []struct {
		req      *rpcpb.SubmitRequest
		outcome  string
		home     string
		replayed bool
	}{
		{req("a", "dc1"), rpc.OutcomeClaimed, "dc1", false},
		{req("a", "dc1"), rpc.OutcomeClaimed, "dc1", true},
		{req("a", "dc3"), rpc.OutcomeClaimed, "dc1", true},
		{req("a", "dc2"), rpc.OutcomeClaimed, "dc1", true}, // dc1's claim wins over dc2 (dc1 < dc2)
		{req("b", "dc3"), rpc.OutcomeClaimed, "dc3", false},
		{req("b", "dc2"), rpc.OutcomeCommitted, "", false}, // dc2 < dc3: the claim is released
		{req("b", "dc3"), rpc.OutcomeCommitted, "", true},  // a claim for dc3 now finds dc2's job
	} {
		resp, err := m.Submit(ctx, c.req)
		if err != nil || resp.Outcome != c.outcome || resp.Home != c.home || resp.Replayed != c.replayed {
			t.Fatalf("%s home %s: %+v, %v; want %s home %q replayed %v", c.req.Key, c.req.Home, resp, err, c.outcome, c.home, c.replayed)
		}
	}
	if st := m.fsm.Stats(); st.Claimed != 1 || st.Jobs != 1 {
		t.Fatalf("stats %+v, want one claim and one job", st)
	}
	bad := req("c", "dc1")
	bad.Job.Datacenters = []string{"dc1", "dc2"}
	if _, err := m.Submit(ctx, bad); err == nil {
		t.Fatal("a home with a list of two was accepted")
	}
}
