package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// TestCallerBehindADialEndsAtItsDeadline: a lane is dialled by one
// attempt at a time; the others wait for it. The wait used to be the
// slot's mutex, held for the whole dial: an attempt whose manager stopped
// answering (every dial waits out gRPC's connect timeout) kept each caller
// behind it, past its own deadline, for as many dials as there were callers
// ahead of it. A caller now waits for another's dial only within its own
// deadline.
func TestCallerBehindADialEndsAtItsDeadline(t *testing.T) {
	var dials atomic.Int64
	// A manager that stopped answering: a connection is never made, each
	// dial waits out gRPC's connect timeout (about a second).
	silent := func(ctx context.Context, _ string) (net.Conn, error) {
		dials.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := NewClient(ClientConfig{Resolver: StaticResolver{"192.0.2.1:7000"}, Streams: 1, AttemptTimeout: time.Minute, Dial: silent})
	t.Cleanup(c.Close)

	// Callers with the gate's forward timeout keep the one lane dialling.
	long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancelLong(); wg.Wait() })
	const callers = 6
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Submit(long, &rpcpb.SubmitRequest{Key: "long"})
		}()
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) { return dials.Load() > 0, "a dial" })

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: "short"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("want ErrUnavailable, got %v", err)
	}
	// Behind the others' dials it waited about a second for each.
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("a caller with a 300ms deadline answered after %v", took)
	}
}

// TestAManagerOfAnotherSecretIsRefusedAtOnce: with TLS (the CA derived from
// the cluster secret, as every secured daemon has it), a gate of another
// secret cannot verify the manager's certificate. gRPC reports that only as
// a connection in transient failure, which the client retried until the
// caller's deadline, dialling and handshaking again every few
// milliseconds, and whose error named no reason ("TRANSIENT_FAILURE"). It
// is now unauthenticated at once, naming the certificate, for a submission,
// a worker call and a unary call alike.
func TestAManagerOfAnotherSecretIsRefusedAtOnce(t *testing.T) {
	derived := func(secret string, r certs.Role) *certs.Cluster {
		c, err := certs.ClusterFromSecret(secret, r)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	const ours, theirs = "cluster-secret-0123456789", "cluster-secret-9876543210"
	m := &fakeManager{leader: true}
	addr, _ := serveConfig(t, m, ServerConfig{Secret: ours, TLS: derived(ours, certs.RoleManager).ServerConfig()})
	var dials atomic.Int64
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	c := NewClient(ClientConfig{Resolver: StaticResolver{addr}, Secret: theirs, TLS: derived(theirs, certs.RoleGate).ClientConfig(), Dial: dial})
	t.Cleanup(c.Close)

	calls := map[string]func(ctx context.Context) error{
		"a submission": func(ctx context.Context) error {
			_, err := c.Submit(ctx, &rpcpb.SubmitRequest{Tenant: "t", Key: "k"})
			return err
		},
		"a worker call": func(ctx context.Context) error {
			_, err := c.Heartbeat(ctx, &rpcpb.HeartbeatRequest{Tenant: "t", JobId: "j", LeaseId: "l"})
			return err
		},
		"a read": func(ctx context.Context) error {
			_, err := c.GetJob(ctx, "t", "j")
			return err
		},
	}
	for name, call := range calls {
		before := dials.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := call(ctx)
		late := ctx.Err() != nil
		cancel()
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeUnauthenticated || !strings.Contains(e.Message, "certificate") {
			t.Errorf("%s: %v, want %s naming the certificate", name, err, CodeUnauthenticated)
		}
		if late {
			t.Errorf("%s: answered at the caller's deadline, not at once", name)
		}
		if n := dials.Load() - before; n > 2 {
			t.Errorf("%s: %d connections to the manager, want one (or one more of gRPC's reconnect)", name, n)
		}
	}
	if n := m.submits.Load(); n != 0 {
		t.Fatalf("the manager served %d submissions of another secret", n)
	}
}

// TestStreamBrokenWithManyInFlight: several submissions wait on one lane
// when its manager dies; each is retried at the next manager and gets the
// answer to its own key, none hangs and none is answered twice.
func TestStreamBrokenWithManyInFlight(t *testing.T) {
	a := newBlockSvc()
	aAddr, aSrv := serveServer(t, a)
	b := &fakeManager{leader: true}
	bAddr := serve(t, b)
	var addrs atomic.Value
	addrs.Store([]string{aAddr})
	c := NewClient(ClientConfig{Resolver: ResolverFunc(func() []string { return addrs.Load().([]string) }), Streams: 1, AttemptTimeout: time.Minute})
	t.Cleanup(c.Close)
	const n = 8
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type answer struct {
		key string
		r   *rpcpb.SubmitResponse
		err error
	}
	done := make(chan answer, n)
	for i := range n {
		key := "block-" + string(rune('a'+i))
		go func() {
			r, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: key})
			done <- answer{key, r, err}
		}()
	}
	for range n {
		<-a.started
	}
	addrs.Store([]string{bAddr})
	if err := aSrv.Close(); err != nil {
		t.Fatal(err)
	}
	for range n {
		got := <-done
		if got.err != nil || got.r.JobId != "j-"+got.key {
			t.Errorf("%s: answered %+v %v", got.key, got.r, got.err)
		}
	}
	if s := b.submits.Load(); s != n {
		t.Fatalf("the second manager ran %d submissions, want %d", s, n)
	}
}

// deadlineSvc records the time left to each submission's deadline as the
// manager sees it.
type deadlineSvc struct {
	*fakeManager
	left chan time.Duration // -1: no deadline
}

func (d *deadlineSvc) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	d.record(ctx)
	return d.fakeManager.Submit(ctx, req)
}

func (d *deadlineSvc) GetJob(ctx context.Context, tenant, id string) (*rpcpb.Job, error) {
	d.record(ctx)
	return d.fakeManager.GetJob(ctx, tenant, id)
}

func (d *deadlineSvc) record(ctx context.Context) {
	left := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	d.left <- left
}

// TestCallersDeadlineReachesTheManager: the manager runs a submission (an
// item of the stream) and a read (a unary call) under the caller's
// deadline, or the attempt's when that is sooner, never without one.
func TestCallersDeadlineReachesTheManager(t *testing.T) {
	svc := &deadlineSvc{fakeManager: &fakeManager{leader: true}, left: make(chan time.Duration, 4)}
	addr := serve(t, svc)
	c := NewClient(ClientConfig{Resolver: StaticResolver{addr}, AttemptTimeout: 30 * time.Second})
	t.Cleanup(c.Close)
	check := func(what string, within time.Duration) {
		t.Helper()
		left := <-svc.left
		// The manager's deadline is no later than the caller's, and not
		// much sooner (the time the item spent crossing).
		if left <= within-5*time.Second || left > within {
			t.Errorf("%s: the manager's deadline is %v away, want about %v", what, left, within)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Submit(ctx, &rpcpb.SubmitRequest{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	check("a submission", 10*time.Second)
	if _, err := c.GetJob(ctx, "t1", "j-1"); err != nil {
		t.Fatal(err)
	}
	check("a read", 10*time.Second)
	// Without a caller's deadline, the attempt's.
	if _, err := c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: "k2"}); err != nil {
		t.Fatal(err)
	}
	check("a submission without a deadline", 30*time.Second)
	if _, err := c.GetJob(context.Background(), "t1", "j-1"); err != nil {
		t.Fatal(err)
	}
	check("a read without a deadline", 30*time.Second)
}

// TestCloseLeavesNoGoroutines: a client with many lanes, closed while
// submissions wait on every one of them, and then its manager, leave no
// goroutine behind: every caller is answered, every lane's sender and
// receiver and every stream's workers end.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		svc := newBlockSvc()
		svc.started = make(chan string, 64)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer(svc, ServerConfig{})
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		c := NewClient(ClientConfig{Resolver: StaticResolver{ln.Addr().String()}, Streams: 8, AttemptTimeout: time.Minute})
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprint("k-", i)
				if i%2 == 0 {
					key = fmt.Sprint("block-", i) // waits until its caller gives up
				}
				_, _ = c.Submit(context.Background(), &rpcpb.SubmitRequest{Key: key})
			}()
		}
		for range 32 {
			<-svc.started
		}
		c.Close()
		wg.Wait()
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
	}()
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		n := runtime.NumGoroutine()
		return n <= before, fmt.Sprintf("%d goroutines, %d before", n, before)
	})
}

// TestASentCallIsNotKeptByTheQueue: a message that takes only part of the
// queue (its bytes bound reached) used to leave the calls it took in the
// queue's backing array, where an abandoned one (its caller gave up after
// it was sent) kept its request, payload included, for as long as the
// lane lived. The queue keeps no call it has sent.
func TestASentCallIsNotKeptByTheQueue(t *testing.T) {
	l := &lane{pending: map[uint64]*call{}}
	l.wake = sync.NewCond(&l.mu)
	item := func(key string) *rpcpb.SubmitItem {
		return &rpcpb.SubmitItem{Request: &rpcpb.SubmitRequest{Key: key, Job: &rpcpb.JobRequest{Payload: make([]byte, 3<<20)}}}
	}
	kept := func() weak.Pointer[rpcpb.SubmitRequest] {
		first := item("first")
		c1, err := l.enqueue(first, 3<<20, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.enqueue(item("second"), 3<<20, time.Time{}); err != nil {
			t.Fatal(err)
		}
		l.mu.Lock()
		batch := l.fillBatch() // the first alone: both are over maxBatchBytes
		if len(batch.Items) != 1 || len(l.queue) != 1 {
			l.mu.Unlock()
			t.Fatalf("a message of %d items, %d left queued; want 1 and 1", len(batch.Items), len(l.queue))
		}
		clear(batch.Items) // as the sender does once it is sent
		batch.Items = batch.Items[:0]
		l.mu.Unlock()
		l.abandon(c1) // its caller gave up: never released
		return weak.Make(first.Request)
	}()
	runtime.GC()
	if kept.Value() != nil {
		t.Fatal("the request of a sent, abandoned submission is still reachable from its lane")
	}
	runtime.KeepAlive(l)
}

// endedStream is a submit stream the manager has ended with status: Send
// answers io.EOF, as gRPC does once a stream is over, and Recv the status
// once recv is closed.
type endedStream struct {
	grpc.BidiStreamingClient[rpcpb.SubmitBatch, rpcpb.SubmitResults]
	status error
	recv   chan struct{}
}

func (e *endedStream) Send(*rpcpb.SubmitBatch) error { return io.EOF }

func (e *endedStream) Recv() (*rpcpb.SubmitResults, error) {
	<-e.recv
	return nil, e.status
}

// TestAStreamEndedWhileSendingFailsWithItsStatus: gRPC's Send answers
// io.EOF on a stream the other end has ended, whose status only Recv
// reads. The sender failed the lane with that io.EOF when its Send came
// first, so the listener's refusal (unauthenticated: a definite answer)
// reached the callers as a transport failure, retried, a new connection
// each time, until their deadline. The lane now fails with the status.
func TestAStreamEndedWhileSendingFailsWithItsStatus(t *testing.T) {
	cc, err := grpc.NewClient("passthrough:///127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	st := &endedStream{status: status.Error(codes.Unauthenticated, "the cluster secret is missing or wrong"), recv: make(chan struct{})}
	l := &lane{addr: "m", cc: cc, stream: st, cancel: func() {}, pending: map[uint64]*call{}}
	l.wake = sync.NewCond(&l.mu)
	l.wg.Add(2)
	go l.send()
	go l.receive()
	defer l.close()
	c, err := l.enqueue(&rpcpb.SubmitItem{Request: &rpcpb.SubmitRequest{Key: "k"}}, 64, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	// The sender's Send came first (io.EOF); then the status arrives.
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return c.sent && len(l.queue) == 0, "the submission to be sent"
	})
	close(st.recv)
	r := <-c.done
	if status.Code(r.err) != codes.Unauthenticated {
		t.Fatalf("the lane failed with %v, want the stream's status (Unauthenticated)", r.err)
	}
}
