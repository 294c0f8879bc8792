package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

// fakeManager is a Service whose leadership and failures the test controls.
type fakeManager struct {
	mu        sync.Mutex
	leader    bool
	leaderRPC string
	failNext  int // answer Unavailable this many times
	submits   atomic.Int64
}

func (f *fakeManager) check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failNext > 0 {
		f.failNext--
		return Errorf(CodeUnavailable, "injected")
	}
	if !f.leader {
		return &Error{Code: CodeNotLeader, Message: "follower", Leader: f.leaderRPC}
	}
	return nil
}

func (f *fakeManager) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f.submits.Add(1)
	return &rpcpb.SubmitResponse{Outcome: OutcomeCommitted, JobId: "j-" + req.Key, Job: &rpcpb.Job{JobId: "j-" + req.Key, Type: req.GetJob().GetType()}}, nil
}

func (f *fakeManager) GetJob(ctx context.Context, tenant, id string) (*rpcpb.Job, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if id != "j-1" || tenant != "t1" {
		return nil, Errorf(CodeNotFound, "no job %s", id)
	}
	return &rpcpb.Job{JobId: id}, nil
}

func (f *fakeManager) ListJobs(ctx context.Context, req *rpcpb.ListJobsRequest) (*rpcpb.ListJobsResponse, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return &rpcpb.ListJobsResponse{Jobs: []*rpcpb.Job{{JobId: req.Tenant + "/" + req.Type + "/" + req.After}}, Next: "n"}, nil
}

func (f *fakeManager) GetKey(ctx context.Context, tenant, key string) (*rpcpb.KeyInfo, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return &rpcpb.KeyInfo{Key: key, State: api.KeyStateCommitted}, nil
}

func (f *fakeManager) Status(ctx context.Context) (*Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &Status{NodeID: "m1", Term: 7, Voters: []string{"m1", "m2", "m3"}, IsLeader: f.leader, LeaderRPC: f.leaderRPC,
		Queues: &QueueCounts{Queued: 3, Running: 1}}, nil
}

// serve serves svc with a Server on a loopback port, closed when the test ends,
// and returns its address.
func serve(t testing.TB, svc Service) string {
	t.Helper()
	addr, _ := serveServer(t, svc)
	return addr
}

func serveServer(t testing.TB, svc Service) (string, *Server) {
	t.Helper()
	return serveConfig(t, svc, ServerConfig{})
}

func serveConfig(t testing.TB, svc Service, cfg ServerConfig) (string, *Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(svc, cfg)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
		}
	})
	return ln.Addr().String(), srv
}

// newClient is a client whose attempts are answered: each may take a
// minute, far more than a loaded machine needs, so only the caller's
// context ends one.
func newClient(t testing.TB, addrs ...string) *Client {
	t.Helper()
	c := NewClient(ClientConfig{Resolver: StaticResolver(addrs), AttemptTimeout: time.Minute})
	t.Cleanup(c.Close)
	return c
}

func TestClientFollowsLeaderHint(t *testing.T) {
	leader := &fakeManager{leader: true}
	laddr := serve(t, leader)
	follower := &fakeManager{leaderRPC: laddr}
	faddr := serve(t, follower)

	c := newClient(t, faddr)
	resp, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Tenant: "t", Key: "k1", Job: &rpcpb.JobRequest{Type: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Outcome != OutcomeCommitted || resp.JobId != "j-k1" || resp.Job.Type != "x" {
		t.Fatalf("unexpected response %+v", resp)
	}
	if got := c.Leader(); got != laddr {
		t.Fatalf("leader = %q, want %q", got, laddr)
	}
	if leader.submits.Load() != 1 || follower.submits.Load() != 0 {
		t.Fatalf("submits leader=%d follower=%d", leader.submits.Load(), follower.submits.Load())
	}
}

func TestClientRetriesUnavailableAndDeadConnections(t *testing.T) {
	// A listener that is closed: connections are refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	m := &fakeManager{leader: true, failNext: 3}
	addr := serve(t, m)
	c := newClient(t, dead, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: "k"}); err != nil {
		t.Fatalf("want success after retries, got %v", err)
	}
	if m.submits.Load() != 1 {
		t.Fatalf("submits = %d", m.submits.Load())
	}
}

func TestClientGivesUpWithUnavailable(t *testing.T) {
	m := &fakeManager{} // follower that knows no leader
	c := newClient(t, serve(t, m))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: "k"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
	if errors.Is(err, ErrNotLeader) {
		t.Fatalf("final error must be unavailable only: %v", err)
	}
}

func TestCodesSurviveTheWire(t *testing.T) {
	m := &fakeManager{leader: true}
	c := newClient(t, serve(t, m))
	ctx := context.Background()
	_, err := c.GetJob(ctx, "t1", "nope")
	var e *Error
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &e) || !strings.Contains(e.Message, "nope") {
		t.Fatalf("want not_found with message, got %v", err)
	}
	job, err := c.GetJob(ctx, "t1", "j-1")
	if err != nil || job.JobId != "j-1" {
		t.Fatalf("get job: %v %+v", err, job)
	}
	lr, err := c.ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "t1", Type: "ty", After: "c9", Limit: 5})
	if err != nil || len(lr.Jobs) != 1 || lr.Jobs[0].JobId != "t1/ty/c9" || lr.Next != "n" {
		t.Fatalf("list: %v %+v", err, lr)
	}
	ki, err := c.GetKey(ctx, "t1", "a:b/c d")
	if err != nil || ki.Key != "a:b/c d" || ki.JobId != nil || ki.Sequence != nil {
		t.Fatalf("key: %v %+v", err, ki)
	}
}

func TestLeaderStatusRequiresLeader(t *testing.T) {
	leader := &fakeManager{leader: true}
	laddr := serve(t, leader)
	follower := &fakeManager{leaderRPC: laddr}
	faddr := serve(t, follower)
	c := newClient(t, faddr)
	st, err := c.LeaderStatus(context.Background())
	if err != nil || !st.IsLeader {
		t.Fatalf("leader status: %v %+v", err, st)
	}
	own, err := c.StatusOf(context.Background(), faddr)
	if err != nil || own.IsLeader {
		t.Fatalf("follower's own status: %v %+v", err, own)
	}
}

// The status over gRPC and over HTTP/1.1 is the same document: the
// service's Status.
func TestStatusOverGRPCAndHTTPIsOneDocument(t *testing.T) {
	svc := &fakeManager{leader: true}
	addr := serve(t, svc)
	c := newClient(t, addr)
	st, err := c.StatusOf(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := svc.Status(context.Background())
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("gRPC status %+v, want %+v", st, want)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + addr + "/rpc/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got Status
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /rpc/v1/status: %d %v", resp.StatusCode, err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("HTTP status %+v, want %+v", got, want)
	}
}

// A listener that answers HTTP but not the service is a transport failure:
// the client retries it until its deadline, then says unavailable.
func TestNonRPCAnswersAreUnavailable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	defer srv.Close()
	c := newClient(t, strings.TrimPrefix(srv.URL, "http://"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.GetJob(ctx, "t", "x"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want unavailable, got %v", err)
	}
}

// Any manager answers Status: a follower's answer proves nothing about who
// leads, so the client must not take the follower for the leader (its next
// call would go there first, and Leader would name it).
func TestStatusOfAFollowerIsNotTakenForTheLeader(t *testing.T) {
	leader := &fakeManager{leader: true}
	laddr := serve(t, leader)
	follower := &fakeManager{leaderRPC: laddr}
	faddr := serve(t, follower)
	c := newClient(t, faddr)
	st, err := c.Status(context.Background())
	if err != nil || st.IsLeader {
		t.Fatalf("follower's status: %v %+v", err, st)
	}
	if got := c.Leader(); got == faddr {
		t.Fatalf("Leader() = %s, the follower that answered Status", got)
	}
}

// A call its caller gave up on (a gate's HTTP client hanging up, a worker
// ending its long poll) says nothing of the manager it was sent to: the
// leader stays the last known one, and the next call goes to it directly
// rather than to the resolver's managers in turn.
func TestCallerCancelKeepsTheLeader(t *testing.T) {
	leader := &fakeManager{leader: true}
	laddr := serve(t, leader)
	follower := &fakeManager{leaderRPC: laddr}
	faddr := serve(t, follower)
	c := newClient(t, faddr)
	if _, err := c.GetJob(context.Background(), "t1", "j-1"); err != nil || c.Leader() != laddr {
		t.Fatalf("GetJob: %v; leader %q, want %q", err, c.Leader(), laddr)
	}
	for _, call := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := c.GetJob(ctx, "t1", "j-1"); return err },
		func(ctx context.Context) error {
			_, err := c.Submit(ctx, &rpcpb.SubmitRequest{Tenant: "t", Key: "k1", Job: &rpcpb.JobRequest{Type: "x"}})
			return err
		},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := call(ctx); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("a call with its context cancelled: %v, want unavailable", err)
		}
		if got := c.Leader(); got != laddr {
			t.Fatalf("after a cancelled call, leader %q, want %q", got, laddr)
		}
	}
}
