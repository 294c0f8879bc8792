package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// scriptSvc is a Service whose Submit the test writes; reads come from an
// embedded leader fakeManager.
type scriptSvc struct {
	*fakeManager
	submit func(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error)
}

func newScript(f func(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error)) *scriptSvc {
	return &scriptSvc{fakeManager: &fakeManager{leader: true}, submit: f}
}

func (s *scriptSvc) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	return s.submit(ctx, req)
}

// rawStream opens a Submit stream to addr with a plain gRPC client, so a test
// controls exactly what one message holds.
func rawStream(t *testing.T, addr string) grpc.BidiStreamingClient[rpcpb.SubmitBatch, rpcpb.SubmitResults] {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := rpcpb.NewManagerClient(cc).Submit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// recvResults reads answers until it holds one for each id in want.
func recvResults(t *testing.T, st grpc.BidiStreamingClient[rpcpb.SubmitBatch, rpcpb.SubmitResults], want ...uint64) map[uint64]*rpcpb.SubmitResult {
	t.Helper()
	got := map[uint64]*rpcpb.SubmitResult{}
	for {
		missing := false
		for _, id := range want {
			if got[id] == nil {
				missing = true
			}
		}
		if !missing {
			return got
		}
		msg, err := st.Recv()
		if err != nil {
			t.Fatalf("recv: %v (have %d of %v)", err, len(got), want)
		}
		for _, r := range msg.GetResults() {
			if got[r.GetId()] != nil {
				t.Fatalf("two answers for id %d", r.GetId())
			}
			got[r.GetId()] = r
		}
	}
}

func TestSubmitFieldsSurviveTheWire(t *testing.T) {
	var got atomic.Pointer[rpcpb.SubmitRequest]
	want := &rpcpb.SubmitResponse{
		Outcome:  OutcomeCommitted,
		Replayed: true,
		JobId:    "j-1",
		Job: &rpcpb.Job{
			JobId: "j-1", Type: "demo", Status: api.JobStatusCommitted, IdempotencyKey: "k",
			CreatedAt:      "2026-11-23T20:00:00.000000001Z",
			Datacenters:    map[string]*rpcpb.DatacenterStatus{"dc1": {Status: "committed"}, "dc2": {Status: "pending"}},
			DatacentersSet: true,
			Payload:        []byte(`{"a":[1,2]}`),
		},
		Rejection:         &rpcpb.Rejection{Status: 429, Reason: "capacity", Detail: "full"},
		ExpiresAtUnixNano: time.Unix(1795000000, 123456789).UnixNano(),
		RemainingNanos:    int64(42*time.Second + 7),
		Home:              "dc2",
	}
	addr := serve(t, newScript(func(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
		got.Store(req)
		return want, nil
	}))
	c := newClient(t, addr)
	req := &rpcpb.SubmitRequest{
		Tenant: "t", Key: `"k"`, Fingerprint: "fp",
		Job:        &rpcpb.JobRequest{Type: "demo", Payload: []byte(`{"x":"é"}`), Datacenters: []string{"dc1", "dc2"}},
		WaitMillis: 1500, ProposedJobId: "p-1", ResultTtlNanos: int64(90 * time.Second),
		ExpiryBasisUnixNanos: time.Unix(1_700_000_000, 123).UnixNano(), TraceParent: "00-01-02-01", Home: "dc1",
		Carried: true,
	}
	resp, err := c.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.Load(), req) {
		t.Fatalf("manager got %+v, want %+v", got.Load(), req)
	}
	if !proto.Equal(resp, want) {
		t.Fatalf("gate got %+v, want %+v", resp, want)
	}

	// Absent parts stay absent: no rejection, zero expiry, nil payload.
	empty := &rpcpb.SubmitResponse{Outcome: OutcomeInProgress, Job: &rpcpb.Job{JobId: "j"}}
	want = empty
	resp, err = c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "k2"})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(resp, empty) || resp.Rejection != nil || resp.Job.Payload != nil || resp.Job.Datacenters != nil {
		t.Fatalf("gate got %+v, want %+v", resp, empty)
	}
	if r := got.Load(); r.GetJob().GetPayload() != nil || r.ResultTtlNanos != 0 || r.ExpiryBasisUnixNanos != 0 {
		t.Fatalf("manager got %+v", r)
	}
}

func TestSubmitCodesSurviveTheWire(t *testing.T) {
	addr := serve(t, newScript(func(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
		switch req.Key {
		case "plain":
			return nil, errors.New("boom")
		case "ctx":
			return nil, fmt.Errorf("waiting: %w", context.DeadlineExceeded)
		case "wrapped":
			return nil, fmt.Errorf("ledger: %w", Errorf(CodeLedgerFull, "60000 live entries"))
		}
		return nil, &Error{Code: Code(req.Key), Message: "msg " + req.Key, Leader: req.Tenant}
	}))

	// On the wire, every code arrives as sent, with its message and leader hint.
	st := rawStream(t, addr)
	codes := []Code{CodeNotLeader, CodeUnavailable, CodeLedgerFull, CodeOutboxFull, CodeNotFound, CodeInvalid, CodeInternal, "a_future_code"}
	batch := &rpcpb.SubmitBatch{}
	var ids []uint64
	for i, code := range codes {
		batch.Items = append(batch.Items, &rpcpb.SubmitItem{Id: uint64(i + 1), Request: &rpcpb.SubmitRequest{Key: string(code), Tenant: "10.0.0.9:7000"}})
		ids = append(ids, uint64(i+1))
	}
	for i, key := range []string{"plain", "ctx", "wrapped"} {
		id := uint64(100 + i)
		batch.Items = append(batch.Items, &rpcpb.SubmitItem{Id: id, Request: &rpcpb.SubmitRequest{Key: key}})
		ids = append(ids, id)
	}
	if err := st.Send(batch); err != nil {
		t.Fatal(err)
	}
	res := recvResults(t, st, ids...)
	for i, code := range codes {
		e := res[uint64(i+1)].GetError()
		if e.GetCode() != string(code) || e.GetMessage() != "msg "+string(code) || e.GetLeader() != "10.0.0.9:7000" {
			t.Errorf("code %s arrived as %+v", code, e)
		}
	}
	for id, code := range map[uint64]Code{100: CodeInternal, 101: CodeUnavailable, 102: CodeLedgerFull} {
		if e := res[id].GetError(); e.GetCode() != string(code) {
			t.Errorf("item %d: want %s, got %+v", id, code, e)
		}
	}

	// At the client, definite answers come back as *Error matching their
	// sentinel, with the message.
	c := newClient(t, addr)
	for _, code := range []Code{CodeLedgerFull, CodeNotFound, CodeInvalid, CodeInternal, "a_future_code"} {
		_, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: string(code)})
		var e *Error
		if !errors.As(err, &e) || e.Code != code || e.Message != "msg "+string(code) {
			t.Errorf("code %s: got %v", code, err)
		}
		if !errors.Is(err, &Error{Code: code}) {
			t.Errorf("code %s: errors.Is fails on %v", code, err)
		}
	}
	if _, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "wrapped"}); !errors.Is(err, ErrLedgerFull) {
		t.Errorf("wrapped ledger_full: got %v", err)
	}
}

// ledgerSvc is a small idempotent Service: per key, the first submission
// decides; "bad-*" keys are invalid, "rej-*" keys are rejected.
type ledgerSvc struct {
	*fakeManager
	mu      sync.Mutex
	entries map[string]*rpcpb.SubmitResponse
	fps     map[string]string
	calls   atomic.Int64
}

func newLedgerSvc() *ledgerSvc {
	return &ledgerSvc{fakeManager: &fakeManager{leader: true}, entries: map[string]*rpcpb.SubmitResponse{}, fps: map[string]string{}}
}

func (l *ledgerSvc) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	l.calls.Add(1)
	if len(req.Key) > 4 && req.Key[:4] == "bad-" {
		return nil, Errorf(CodeInvalid, "key %s is malformed", req.Key)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.entries[req.Key]; ok {
		r := proto.Clone(e).(*rpcpb.SubmitResponse)
		r.Replayed = true
		if l.fps[req.Key] != req.Fingerprint {
			r.Outcome, r.Job = OutcomeKeyReused, nil
		}
		return r, nil
	}
	r := &rpcpb.SubmitResponse{Outcome: OutcomeCommitted, JobId: "j-" + req.Key, Job: &rpcpb.Job{JobId: "j-" + req.Key, Type: req.GetJob().GetType(), Payload: req.GetJob().GetPayload()}}
	if len(req.Key) > 4 && req.Key[:4] == "rej-" {
		r = &rpcpb.SubmitResponse{Outcome: OutcomeRejected, JobId: "j-" + req.Key, Rejection: &rpcpb.Rejection{Status: 422, Reason: "unknown_job_type", Detail: req.GetJob().GetType()}}
	}
	l.entries[req.Key], l.fps[req.Key] = r, req.Fingerprint
	return r, nil
}

func TestBatchAnswersEachSubmission(t *testing.T) {
	svc := newLedgerSvc()
	st := rawStream(t, serve(t, svc))
	item := func(id uint64, key, fp string) *rpcpb.SubmitItem {
		return &rpcpb.SubmitItem{Id: id, TimeoutMicros: 5e6, Request: &rpcpb.SubmitRequest{Key: key, Fingerprint: fp, Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`{"n":` + fmt.Sprint(id) + `}`)}}}
	}
	// The first batch creates keys; the second mixes new, duplicate, reused,
	// rejected and invalid submissions.
	if err := st.Send(&rpcpb.SubmitBatch{Items: []*rpcpb.SubmitItem{item(1, "a", "fa"), item(2, "rej-b", "fb")}}); err != nil {
		t.Fatal(err)
	}
	recvResults(t, st, 1, 2)
	if err := st.Send(&rpcpb.SubmitBatch{Items: []*rpcpb.SubmitItem{
		item(3, "a", "fa"),      // duplicate of a committed key
		item(4, "rej-b", "fb"),  // duplicate of a rejected key
		item(5, "c", "fc"),      // new
		item(6, "bad-d", "fd"),  // invalid
		item(7, "a", "other"),   // the key with another fingerprint
		item(8, "rej-e", "fe"),  // new, rejected
		item(9, "bad-f", "ff2"), // invalid
	}}); err != nil {
		t.Fatal(err)
	}
	res := recvResults(t, st, 3, 4, 5, 6, 7, 8, 9)
	check := func(id uint64, outcome string, replayed bool, jobID string) {
		t.Helper()
		r := res[id]
		if r.GetError() != nil {
			t.Fatalf("item %d: error %+v", id, r.GetError())
		}
		got := r.GetResponse()
		if got.Outcome != outcome || got.Replayed != replayed || got.JobId != jobID {
			t.Errorf("item %d: got %+v, want %s replayed=%v job %s", id, got, outcome, replayed, jobID)
		}
	}
	check(3, OutcomeCommitted, true, "j-a")
	check(4, OutcomeRejected, true, "j-rej-b")
	check(5, OutcomeCommitted, false, "j-c")
	check(7, OutcomeKeyReused, true, "j-a")
	check(8, OutcomeRejected, false, "j-rej-e")
	if p := string(res[3].GetResponse().GetJob().GetPayload()); p != `{"n":1}` {
		t.Errorf("duplicate's job payload %s, want the first submission's", p)
	}
	if r := res[8].GetResponse(); r.Rejection == nil || r.Rejection.Reason != "unknown_job_type" {
		t.Errorf("rejection lost: %+v", r)
	}
	for _, id := range []uint64{6, 9} {
		if e := res[id].GetError(); e.GetCode() != string(CodeInvalid) {
			t.Errorf("item %d: want invalid, got %+v", id, res[id])
		}
	}
	if n := svc.calls.Load(); n != 9 {
		t.Errorf("Service.Submit ran %d times, want 9", n)
	}
}

// blockSvc blocks submissions of key "block*" until their context ends and
// records how it ended; other keys answer at once.
type blockSvc struct {
	*fakeManager
	started chan string
	mu      sync.Mutex
	ended   map[string]error
}

func newBlockSvc() *blockSvc {
	return &blockSvc{fakeManager: &fakeManager{leader: true}, started: make(chan string, 16), ended: map[string]error{}}
}

func (b *blockSvc) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	if len(req.Key) >= 5 && req.Key[:5] == "block" {
		b.started <- req.Key
		<-ctx.Done()
		b.mu.Lock()
		b.ended[req.Key] = ctx.Err()
		b.mu.Unlock()
		return nil, ctx.Err()
	}
	return &rpcpb.SubmitResponse{Outcome: OutcomeCommitted, JobId: "j-" + req.Key}, nil
}

func (b *blockSvc) endedWith(key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended[key]
}

func TestDeadlineAndCancelOfOneItemSpareTheOthers(t *testing.T) {
	svc := newBlockSvc()
	st := rawStream(t, serve(t, svc))
	// One batch: an item with a short deadline, one without that the gate will
	// cancel, and one that answers at once.
	if err := st.Send(&rpcpb.SubmitBatch{Items: []*rpcpb.SubmitItem{
		{Id: 1, TimeoutMicros: 50_000, Request: &rpcpb.SubmitRequest{Key: "block-deadline"}},
		{Id: 2, Request: &rpcpb.SubmitRequest{Key: "block-cancel"}},
		{Id: 3, TimeoutMicros: 5e6, Request: &rpcpb.SubmitRequest{Key: "ok"}},
	}}); err != nil {
		t.Fatal(err)
	}
	res := recvResults(t, st, 3)
	if r := res[3].GetResponse(); r.GetJobId() != "j-ok" {
		t.Fatalf("item 3: %+v", res[3])
	}
	res = recvResults(t, st, 1)
	if e := res[1].GetError(); e.GetCode() != string(CodeUnavailable) {
		t.Fatalf("item 1 past its deadline: want unavailable, got %+v", res[1])
	}
	if err := svc.endedWith("block-deadline"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("block-deadline ended with %v", err)
	}
	// Item 2 still waits; the gate cancels it along with a new submission.
	if err := svc.endedWith("block-cancel"); err != nil {
		t.Fatalf("block-cancel ended early: %v", err)
	}
	if err := st.Send(&rpcpb.SubmitBatch{Cancel: []uint64{2}, Items: []*rpcpb.SubmitItem{{Id: 4, Request: &rpcpb.SubmitRequest{Key: "ok2"}}}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return errors.Is(svc.endedWith("block-cancel"), context.Canceled), "the manager to stop waiting for the cancelled item"
	})
	res = recvResults(t, st, 4)
	if res[2] != nil {
		t.Fatalf("a cancelled item was answered: %+v", res[2])
	}
}

func TestClientCancelStopsTheManagerWaiting(t *testing.T) {
	svc := newBlockSvc()
	c := NewClient(ClientConfig{Resolver: StaticResolver{serve(t, svc)}, Streams: 1})
	t.Cleanup(c.Close)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: "block-1"})
		errc <- err
	}()
	if k := <-svc.started; k != "block-1" {
		t.Fatalf("started %s", k)
	}
	// Another submission on the same stream is answered while block-1 waits.
	if r, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "other"}); err != nil || r.JobId != "j-other" {
		t.Fatalf("other: %v %+v", err, r)
	}
	cancel()
	if err := <-errc; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("cancelled caller: want ErrUnavailable, got %v", err)
	}
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return errors.Is(svc.endedWith("block-1"), context.Canceled), "the manager to stop waiting for the cancelled submission"
	})
	// The stream survives: the next submission uses it.
	if r, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "after"}); err != nil || r.JobId != "j-after" {
		t.Fatalf("after: %v %+v", err, r)
	}
}

func TestClientRetriesWhenTheStreamBreaks(t *testing.T) {
	a := newBlockSvc()
	aAddr, aSrv := serveServer(t, a)
	b := &fakeManager{leader: true}
	bAddr := serve(t, b)
	var addrs atomic.Value
	addrs.Store([]string{aAddr})
	c := NewClient(ClientConfig{Resolver: ResolverFunc(func() []string { return addrs.Load().([]string) }), AttemptTimeout: 5 * time.Second})
	t.Cleanup(c.Close)

	if _, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "first"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type answer struct {
		r   *rpcpb.SubmitResponse
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: "block-x"})
		done <- answer{r, err}
	}()
	<-a.started
	// Manager a dies with the submission in flight; b is now the one to ask.
	addrs.Store([]string{bAddr})
	if err := aSrv.Close(); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.r.JobId != "j-block-x" {
		t.Fatalf("want the answer of b after the retry, got %+v %v", got.r, got.err)
	}
	if c.Leader() != bAddr || b.submits.Load() != 1 {
		t.Fatalf("leader %s (b is %s), b submits %d", c.Leader(), bAddr, b.submits.Load())
	}
}

func TestShutdownAnswersWhatTheStreamHolds(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	svc := newScript(func(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
		close(started)
		<-release
		return &rpcpb.SubmitResponse{Outcome: OutcomeCommitted, JobId: "j-" + req.Key}, nil
	})
	addr, srv := serveServer(t, svc)
	c := newClient(t, addr)
	done := make(chan error, 1)
	go func() {
		r, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "slow"})
		if err == nil && r.JobId != "j-slow" {
			err = fmt.Errorf("answer %+v", r)
		}
		done <- err
	}()
	<-started
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	// New connections are refused while the stream finishes its submission.
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err != nil, "the listener to close"
	})
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the submission in flight at shutdown: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func TestCloseIdleConnectionsAndClose(t *testing.T) {
	svc := newBlockSvc()
	c := NewClient(ClientConfig{Resolver: StaticResolver{serve(t, svc)}, Streams: 1})
	if _, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "a"}); err != nil {
		t.Fatal(err)
	}
	lanes := func() (n int) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, p := range c.peers {
			for i := range p.slots {
				if p.slots[i].l != nil {
					n++
				}
			}
		}
		return n
	}
	if n := lanes(); n != 1 {
		t.Fatalf("%d lanes after a submission, want 1", n)
	}
	c.CloseIdleConnections()
	if n := lanes(); n != 0 {
		t.Fatalf("%d lanes after CloseIdleConnections, want 0", n)
	}
	// A later submission opens a new lane.
	if _, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "b"}); err != nil {
		t.Fatal(err)
	}
	// A lane something waits on is not idle.
	errc := make(chan error, 1)
	go func() {
		_, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "block-1"})
		errc <- err
	}()
	<-svc.started
	c.CloseIdleConnections()
	if n := lanes(); n != 1 {
		t.Fatalf("%d lanes after CloseIdleConnections with a submission waiting, want 1", n)
	}
	// Close fails the waiting submission and every later call, at once.
	c.Close()
	if err := <-errc; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("waiting submission after Close: want ErrUnavailable, got %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: "c"}); !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
		t.Fatalf("submission after Close: want ErrUnavailable at once, got %v", err)
	}
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return errors.Is(svc.endedWith("block-1"), context.Canceled), "the manager to stop waiting for the submission of the closed client"
	})
}

// TestLargeSubmissionsCross sends submissions whose job bodies are beyond
// gRPC's default 4 MiB message limit (the gate accepts bodies up to 8 MiB),
// several at once so that batches must split by size, and gets them back
// whole in the answers.
func TestLargeSubmissionsCross(t *testing.T) {
	svc := newScript(func(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
		return &rpcpb.SubmitResponse{Outcome: OutcomeCommitted, JobId: "j-" + req.Key, Job: &rpcpb.Job{JobId: "j-" + req.Key, Payload: req.GetJob().GetPayload()}}, nil
	})
	// About 20 MiB on one stream take seconds under -race on a loaded
	// machine: an attempt may take a minute.
	c := NewClient(ClientConfig{Resolver: StaticResolver{serve(t, svc)}, Streams: 1, AttemptTimeout: time.Minute})
	t.Cleanup(c.Close)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := json.RawMessage(`"` + string(bytes.Repeat([]byte{'a' + byte(i)}, 3<<20+i)) + `"`)
			if i == 0 {
				// The largest a manager takes (MaxBodyBytes).
				payload = json.RawMessage(`"` + string(bytes.Repeat([]byte{'z'}, MaxBodyBytes-2)) + `"`)
			}
			key := fmt.Sprint("big-", i)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			r, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: key, Job: &rpcpb.JobRequest{Type: "x", Payload: payload}})
			if err != nil {
				t.Errorf("%s: %v", key, err)
				return
			}
			if r.JobId != "j-"+key || !bytes.Equal(r.Job.Payload, payload) {
				t.Errorf("%s: answer with job %s and a payload of %d bytes, want %d", key, r.JobId, len(r.Job.Payload), len(payload))
			}
		}()
	}
	wg.Wait()

	// A submission no message can carry is refused at once, not retried.
	huge := json.RawMessage(`"` + string(bytes.Repeat([]byte{'h'}, maxMessageBytes)) + `"`)
	if _, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "huge", Job: &rpcpb.JobRequest{Type: "x", Payload: huge}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a submission over the message limit: want ErrInvalid, got %v", err)
	}
}
