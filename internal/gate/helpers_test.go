package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// nonce is a valid nonce for structured test keys.
const nonce = "a1b2c3d4e5f6a7b8"

// skey returns a structured key of client "host1.dc1:12345".
func skey(seq int) string { return fmt.Sprintf("host1.dc1:12345:%d:%s", seq, nonce) }

// fakeClock is a clock tests move by hand.
type fakeClock = testutil.Clock

func newFakeClock() *fakeClock {
	return testutil.NewClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
}

// startManager starts a real manager leader in-process on 127.0.0.1
// (managertest) for the test, behind a thin fault layer (testManager), and
// returns it with its RPC address.
func startManager(tb testing.TB, opts managertest.Options) (*testManager, string) {
	tb.Helper()
	tm := &testManager{}
	opts.Serve = func(m *manager.Manager) rpc.Service { return &faultLayer{Manager: m, tm: tm} }
	opts.Knobs.BeforeAdmit = tm.beforeAdmit
	tm.cluster = managertest.Start(tb, opts)
	tm.Manager = tm.cluster.Managers[0]
	return tm, tm.cluster.Addrs[0]
}

// testManager is a real manager as a gate reaches it, through a fault layer
// at its RPC boundary that counts the submissions reaching it and can answer
// in its place, as a manager that is slow, fails, or knows no leader would.
// The manager's own semantics are never imitated.
type testManager struct {
	*manager.Manager
	cluster *managertest.Cluster
	submits atomic.Int64
	leases  atomic.Int64

	mu         sync.Mutex
	submitHook func(ctx context.Context, req *rpcpb.SubmitRequest) error
	answerHook func(req *rpcpb.SubmitRequest, resp *rpcpb.SubmitResponse)
	admitHook  func(ctx context.Context)
	noLeader   bool
	readErr    error
}

// Submits returns how many Submit calls reached the manager.
func (tm *testManager) Submits() int64 { return tm.submits.Load() }

// Jobs returns how many jobs the manager's ledger holds, over all tenants.
func (tm *testManager) Jobs() int { return tm.FSM().Stats().Jobs }

// SetSubmitHook installs (nil: removes) a hook run by every Submit before
// the manager sees it. It may block (honouring ctx); an error it returns is
// the answer (use *rpc.Error values) and the manager never sees the call.
func (tm *testManager) SetSubmitHook(h func(ctx context.Context, req *rpcpb.SubmitRequest) error) {
	tm.mu.Lock()
	tm.submitHook = h
	tm.mu.Unlock()
}

// SetAnswerHook installs (nil: removes) a hook run with every Submit's
// request and answer as the manager sends it back (resp nil on an error).
// It only reads them.
func (tm *testManager) SetAnswerHook(h func(req *rpcpb.SubmitRequest, resp *rpcpb.SubmitResponse)) {
	tm.mu.Lock()
	tm.answerHook = h
	tm.mu.Unlock()
}

// beforeAdmit runs the admit hook (holdInFlight) in the manager
// (manager.TestingKnobs.BeforeAdmit).
func (tm *testManager) beforeAdmit(ctx context.Context, _, _ string) {
	tm.mu.Lock()
	h := tm.admitHook
	tm.mu.Unlock()
	if h != nil {
		h(ctx)
	}
}

// SetLeader(false) makes the manager answer every call as a follower that
// knows no leader (not_leader, which the gate's client retries until its
// deadline); SetLeader(true) lets calls through again.
func (tm *testManager) SetLeader(leader bool) {
	tm.mu.Lock()
	tm.noLeader = !leader
	tm.mu.Unlock()
}

// SetReadError makes every read (GetJob, ListJobs, GetKey) fail with err
// (nil: reads reach the manager).
func (tm *testManager) SetReadError(err error) {
	tm.mu.Lock()
	tm.readErr = err
	tm.mu.Unlock()
}

// faults returns what the layer answers in the manager's place (nil: let
// the call through) and the submit hook.
func (tm *testManager) faults(read bool) (error, func(context.Context, *rpcpb.SubmitRequest) error) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	switch {
	case read && tm.readErr != nil:
		return tm.readErr, nil
	case tm.noLeader:
		return &rpc.Error{Code: rpc.CodeNotLeader, Message: "a follower with no known leader (the test's fault layer)"}, nil
	}
	return nil, tm.submitHook
}

// faultLayer is what the manager's RPC server serves: the manager, with
// testManager's faults in front of the calls a gate makes.
type faultLayer struct {
	*manager.Manager
	tm *testManager
}

func (f *faultLayer) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	f.tm.submits.Add(1)
	err, hook := f.tm.faults(false)
	if err != nil {
		return nil, err
	}
	if hook != nil {
		if err := hook(ctx, req); err != nil {
			return nil, err
		}
	}
	resp, err := f.Manager.Submit(ctx, req)
	f.tm.mu.Lock()
	answered := f.tm.answerHook
	f.tm.mu.Unlock()
	if answered != nil {
		answered(req, resp)
	}
	return resp, err
}

func (f *faultLayer) GetJob(ctx context.Context, tenant, id string) (*rpcpb.Job, error) {
	if err, _ := f.tm.faults(true); err != nil {
		return nil, err
	}
	return f.Manager.GetJob(ctx, tenant, id)
}

func (f *faultLayer) ListJobs(ctx context.Context, req *rpcpb.ListJobsRequest) (*rpcpb.ListJobsResponse, error) {
	if err, _ := f.tm.faults(true); err != nil {
		return nil, err
	}
	return f.Manager.ListJobs(ctx, req)
}

func (f *faultLayer) GetKey(ctx context.Context, tenant, key string) (*rpcpb.KeyInfo, error) {
	if err, _ := f.tm.faults(true); err != nil {
		return nil, err
	}
	return f.Manager.GetKey(ctx, tenant, key)
}

func (f *faultLayer) Status(ctx context.Context) (*rpc.Status, error) {
	st, err := f.Manager.Status(ctx)
	if err == nil {
		if fault, _ := f.tm.faults(false); fault != nil {
			st.IsLeader, st.RaftState, st.LeaderID, st.LeaderRPC = false, "Follower", "", ""
		}
	}
	return st, err
}

func (f *faultLayer) Lease(ctx context.Context, req *rpcpb.LeaseRequest) (*rpcpb.LeaseResponse, error) {
	f.tm.leases.Add(1)
	if err, _ := f.tm.faults(false); err != nil {
		return nil, err
	}
	return f.Manager.Lease(ctx, req)
}

// finishJobs leases every queued job of the default tenant from the manager
// and completes it, as a worker would: MANAGER_MAX_QUEUED_JOBS counts the
// unfinished jobs only.
func (tm *testManager) finishJobs(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	for {
		r, err := tm.Manager.Lease(ctx, &rpcpb.LeaseRequest{Tenant: api.DefaultTenant, Worker: "test", MaxJobs: 100, LeaseForNanos: int64(time.Minute)})
		if err != nil {
			tb.Fatalf("lease: %v", err)
		}
		if len(r.Leases) == 0 {
			return
		}
		for _, l := range r.Leases {
			if _, err := tm.Manager.Complete(ctx, &rpcpb.CompleteRequest{Tenant: api.DefaultTenant, JobId: l.Job.JobId,
				LeaseId: l.LeaseId, Result: json.RawMessage(`"done"`)}); err != nil {
				tb.Fatalf("complete %s: %v", l.Job.JobId, err)
			}
		}
	}
}

// holdFirstSubmit holds the first submission that reaches the manager,
// before the manager sees it, until release is called (at the latest when
// the test ends); arrived is closed once it is held. Meanwhile the gate's
// cache holds the key PENDING.
func holdFirstSubmit(t *testing.T, mgr *testManager) (arrived <-chan struct{}, release func()) {
	held, rel := make(chan struct{}), make(chan struct{})
	var first, closeRel sync.Once
	release = func() { closeRel.Do(func() { close(rel) }) }
	t.Cleanup(release)
	mgr.SetSubmitHook(func(ctx context.Context, _ *rpcpb.SubmitRequest) error {
		hold := false
		first.Do(func() { hold = true })
		if hold {
			close(held)
			select {
			case <-rel:
			case <-ctx.Done():
			}
		}
		return nil
	})
	return held, release
}

// holdInFlight holds the first submission that proposes its key's Admit at
// the manager, after it owns the proposal and before it proposes, until
// release is called (at the latest when the test ends); inFlight is closed
// once it is held. Meanwhile the key is in progress at the manager: another
// submission of it waits for the Admit (at most its WaitMillis), then
// replays its outcome.
func holdInFlight(t *testing.T, mgr *testManager) (inFlight <-chan struct{}, release func()) {
	held, rel := make(chan struct{}), make(chan struct{})
	var first sync.Once
	release = sync.OnceFunc(func() { close(rel) })
	t.Cleanup(release)
	mgr.mu.Lock()
	mgr.admitHook = func(ctx context.Context) {
		hold := false
		first.Do(func() { hold = true })
		if hold {
			close(held)
			select {
			case <-rel:
			case <-ctx.Done():
			}
		}
	}
	mgr.mu.Unlock()
	t.Cleanup(func() {
		mgr.mu.Lock()
		mgr.admitHook = nil
		mgr.mu.Unlock()
	})
	return held, release
}

// testGate is a gate serving on 127.0.0.1 for one test, with a client for it.
type testGate struct {
	*Gate
	URL    string
	client *http.Client
	// stop ends Serve, as SIGTERM ends Main's, and returns its error; it
	// is idempotent (the cleanup calls it too).
	stop func() error
}

// startGate starts a gate in-process on 127.0.0.1:0 whose managers are
// managers, with timeouts shortened for tests and logs sent to t.Log. override,
// when set, changes the configuration and the dependencies before New. The gate
// is shut down and closed when the test ends.
func startGate(tb testing.TB, managers []string, override func(cfg *Config, deps *Deps)) *testGate {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.NodeName = "test-gate"
	cfg.Managers = managers
	cfg.ForwardTimeout = 5 * time.Second
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.ReadyTimeout = 300 * time.Millisecond
	cfg.Idempotency.PendingWaitTimeout = 5 * time.Second
	deps := Deps{Logger: testutil.Logger(tb)}
	if override != nil {
		override(&cfg, &deps)
	}
	g, err := New(cfg, deps)
	if err != nil {
		tb.Fatalf("gate.New: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		g.Close()
		tb.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	tr := &http.Transport{MaxIdleConnsPerHost: 2000, DisableCompression: true}
	tg := &testGate{
		Gate: g,
		URL:  "http://" + ln.Addr().String(),
		client: &http.Client{
			Transport:     validatingTransport{tb: tb, next: tr}, // openapi_test.go
			Timeout:       30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	tg.stop = sync.OnceValue(func() error {
		tr.CloseIdleConnections()
		cancel()
		return <-done
	})
	tb.Cleanup(func() {
		if err := tg.stop(); err != nil {
			tb.Errorf("gate.Serve: %v", err)
		}
		g.Close()
	})
	return tg
}

// result is an HTTP answer, read in full.
type result struct {
	status int
	header http.Header
	body   []byte
}

func (r result) String() string {
	return fmt.Sprintf("HTTP %d %v %s", r.status, r.header, r.body)
}

// try sends a request; hdr is name, value pairs.
func (tg *testGate) try(method, path string, body io.Reader, hdr ...string) (result, error) {
	req, err := http.NewRequest(method, tg.URL+path, body)
	if err != nil {
		return result{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := tg.client.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, err
	}
	return result{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func (tg *testGate) do(tb testing.TB, method, path string, body io.Reader, hdr ...string) result {
	tb.Helper()
	res, err := tg.try(method, path, body, hdr...)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	return res
}

func (tg *testGate) get(tb testing.TB, path string, hdr ...string) result {
	tb.Helper()
	return tg.do(tb, http.MethodGet, path, nil, hdr...)
}

// submit posts body to /v1/jobs under key (no Idempotency-Key header if key is
// empty), with the extra headers hdr.
func (tg *testGate) submit(tb testing.TB, key, body string, hdr ...string) result {
	tb.Helper()
	if key != "" {
		hdr = append([]string{api.HeaderIdempotencyKey, key}, hdr...)
	}
	return tg.do(tb, http.MethodPost, "/v1/jobs", strings.NewReader(body), hdr...)
}

func (tg *testGate) trySubmit(key, body string, hdr ...string) (result, error) {
	return tg.try(http.MethodPost, "/v1/jobs", strings.NewReader(body), append([]string{api.HeaderIdempotencyKey, key}, hdr...)...)
}

// wantStatus fails the test unless res has the status.
func wantStatus(tb testing.TB, res result, status int) {
	tb.Helper()
	if res.status != status {
		tb.Fatalf("status %d, want %d: %s", res.status, status, res)
	}
}

// wantJob checks a 201 or 200 answer carrying a job and decodes it.
func wantJob(tb testing.TB, res result, status int) api.Job {
	tb.Helper()
	wantStatus(tb, res, status)
	if ct := res.header.Get("Content-Type"); ct != api.ContentTypeJSON {
		tb.Fatalf("Content-Type %q, want %q", ct, api.ContentTypeJSON)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(res.body, &members); err != nil {
		tb.Fatalf("job body is not a JSON object: %v: %s", err, res.body)
	}
	for _, m := range []string{"job_id", "type", "status", "idempotency_key", "created_at", "datacenters", "payload"} {
		if _, ok := members[m]; !ok {
			tb.Fatalf("job body lacks %q: %s", m, res.body)
		}
	}
	var job api.Job
	dec := json.NewDecoder(bytes.NewReader(res.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&job); err != nil {
		tb.Fatalf("decode job: %v: %s", err, res.body)
	}
	if job.JobID == "" || job.Status != api.JobStatusCommitted {
		tb.Fatalf("job %+v", job)
	}
	if _, err := time.Parse(api.TimeFormat, job.CreatedAt); err != nil {
		tb.Fatalf("created_at %q: %v", job.CreatedAt, err)
	}
	return job
}

// wantProblem checks that res is an RFC 9457 problem with status and code and
// the members the contract names, and decodes it.
func wantProblem(tb testing.TB, res result, status int, code api.Code) api.Problem {
	tb.Helper()
	wantStatus(tb, res, status)
	if ct := res.header.Get("Content-Type"); ct != api.ContentTypeProblem {
		tb.Fatalf("Content-Type %q, want %q: %s", ct, api.ContentTypeProblem, res)
	}
	var members map[string]any
	if err := json.Unmarshal(res.body, &members); err != nil {
		tb.Fatalf("problem is not a JSON object: %v: %s", err, res.body)
	}
	for _, m := range []string{"type", "title", "status", "detail", "code"} {
		if v, ok := members[m]; !ok || v == "" {
			tb.Fatalf("problem lacks %q: %s", m, res.body)
		}
	}
	var p api.Problem
	dec := json.NewDecoder(bytes.NewReader(res.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		tb.Fatalf("decode problem: %v: %s", err, res.body)
	}
	if p.Status != status || p.Code != code || p.Type != api.ProblemTypeBase+string(code) {
		tb.Fatalf("problem %+v, want status %d code %s", p, status, code)
	}
	return p
}

// wantHeader fails the test unless res has header name with value want.
func wantHeader(tb testing.TB, res result, name, want string) {
	tb.Helper()
	if got := res.header.Values(name); len(got) != 1 || got[0] != want {
		tb.Fatalf("%s = %q, want %q: %s", name, got, want, res)
	}
}

// wantNoHeader fails the test if res has header name.
func wantNoHeader(tb testing.TB, res result, name string) {
	tb.Helper()
	if got := res.header.Values(name); len(got) != 0 {
		tb.Fatalf("%s = %q, want none: %s", name, got, res)
	}
}

// twoTenants writes a token file naming tenants alpha and beta and returns
// the option that gives it to a gate, with each tenant's Authorization
// header.
func twoTenants(t *testing.T) (tokens func(*Config, *Deps), alpha, beta []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("tok-alpha alpha\ntok-beta beta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(cfg *Config, _ *Deps) { cfg.TokenFile = path },
		[]string{"Authorization", "Bearer tok-alpha"}, []string{"Authorization", "Bearer tok-beta"}
}
