package rpc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The gate's side of the submit stream. A Client keeps, per manager address, a
// few lanes: a lane is one gRPC connection carrying one long-lived Submit
// stream, a sender goroutine and a receiver goroutine. A submission is queued
// on a lane and waits for its answer; the sender takes everything queued
// while its previous Send was in progress (up to maxBatchItems and
// maxBatchBytes) into one message, so an idle lane sends at once and a busy
// one batches, with no timer. A lane whose stream fails fails every
// submission waiting on it (a transport error: the caller retries) and is
// replaced on next use.

const (
	// maxBatchItems and maxBatchBytes bound one message of a stream (a single
	// submission larger than maxBatchBytes travels alone).
	maxBatchItems = 256
	maxBatchBytes = 4 << 20
	// maxMessageBytes is the largest message either side accepts: a batch, or
	// one submission of up to maxRequestBytes with room to spare.
	maxMessageBytes = 64 << 20
)

// batchStats counts the messages of every stream of the process and the
// submissions or answers they carried (BenchmarkSubmit reports items per
// message from them).
var batchStats struct {
	sent, sentItems, received, receivedItems atomic.Int64
}

// errLaneClosed fails the submissions of a lane the client closed.
var errLaneClosed = errors.New("submit stream closed by the client")

// call is one submission (or worker call) waiting on a lane.
type call struct {
	id       uint64
	item     *rpcpb.SubmitItem // its Id and TimeoutMicros set when sent
	size     int               // approximate encoded bytes
	deadline time.Time         // zero: none
	done     chan callResult
	sent     bool
	dropped  bool // its caller stopped waiting before it was sent
}

type callResult struct {
	res *rpcpb.SubmitResult
	err error
}

type lane struct {
	addr   string
	cc     *grpc.ClientConn
	stream grpc.BidiStreamingClient[rpcpb.SubmitBatch, rpcpb.SubmitResults]
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	wake    *sync.Cond // signals the sender: queue, cancels or err changed
	queue   []*call
	cancels []uint64
	pending map[uint64]*call // queued or sent, not answered
	nextID  uint64
	err     error   // non-nil once the lane is dead
	free    []*call // answered calls, for enqueue to reuse (release)

	batch rpcpb.SubmitBatch // the sender's message, reused for every Send
}

// maxFreeCalls bounds a lane's free calls.
const maxFreeCalls = 1024

// newConn returns a connection to the manager at addr, connected on first
// use: TLS or plain, the cluster secret on every call, cfg's dial, backoff,
// keepalive and the message bounds; and the refusal of its last TLS
// handshake (handshakeRefusal).
func newConn(cfg *ClientConfig, addr string) (*grpc.ClientConn, *handshakeRefusal, error) {
	refusal := &handshakeRefusal{}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = refusalCreds{credentials.NewTLS(cfg.TLS), refusal}
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)),
	}
	if cfg.Dial != nil {
		opts = append(opts, grpc.WithContextDialer(cfg.Dial))
	}
	if cfg.Secret != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(secretCredentials(cfg.Secret)))
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return cc, refusal, nil
}

// handshakeRefusal keeps why a connection's last TLS handshake failed to
// verify the manager's certificate (nil after one that succeeded or failed
// otherwise): a manager of another cluster secret or CA. gRPC reports such
// a connection only as unavailable, which the client would retry until the
// caller's deadline, dialling again and again, and whose message names no
// reason; no other attempt would verify either.
type handshakeRefusal struct{ err atomic.Pointer[Error] }

// refused is the last handshake's refusal, nil if none.
func (h *handshakeRefusal) refused() *Error { return h.err.Load() }

// refusalCreds are TLS credentials that keep the refusals of their client
// handshakes.
type refusalCreds struct {
	credentials.TransportCredentials
	refusal *handshakeRefusal
}

func (r refusalCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := r.TransportCredentials.ClientHandshake(ctx, authority, conn)
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
	)
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host) || errors.Is(err, certs.ErrRole) {
		r.refusal.err.Store(&Error{Code: CodeUnauthenticated, Message: fmt.Sprintf("authentication handshake failed with %s, "+
			"its certificate refused (a manager of another cluster secret or CA): %v", conn.RemoteAddr(), err)})
	} else {
		r.refusal.err.Store(nil)
	}
	return c, info, err
}

func (r refusalCreds) Clone() credentials.TransportCredentials {
	return refusalCreds{r.TransportCredentials.Clone(), r.refusal}
}

// idleReconnectWait is how long a dial waits on an IDLE channel it asked to
// connect before asking again.
const idleReconnectWait = 50 * time.Millisecond

// dialLane connects to addr and opens a Submit stream, within ctx.
func dialLane(ctx context.Context, cfg *ClientConfig, addr string) (*lane, error) {
	cc, refusal, err := newConn(cfg, addr)
	if err != nil {
		return nil, err
	}
	// Fail fast like a refused dial: wait for the connection to be ready or to
	// fail, within the caller's attempt.
	cc.Connect()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if s == connectivity.TransientFailure || s == connectivity.Shutdown {
			_ = cc.Close()
			if e := refusal.refused(); e != nil {
				return nil, e // a definite answer: no attempt would verify it
			}
			return nil, fmt.Errorf("connect %s: %s", addr, s)
		}
		wait, cancelWait := ctx, context.CancelFunc(func() {})
		if s == connectivity.Idle {
			// A connection lost as (or right after) it became ready leaves
			// the channel IDLE, and gRPC leaves IDLE only when asked
			// (grpc.DialContext's blocking dial asks the same way). Connect
			// only schedules the new connection: a whole attempt, lost
			// again, can end before the wait below begins, and then nothing
			// changes the state. So the wait is short, and the loop asks again.
			cc.Connect()
			wait, cancelWait = context.WithTimeout(ctx, idleReconnectWait)
		}
		changed := cc.WaitForStateChange(wait, s)
		cancelWait()
		if !changed && ctx.Err() != nil {
			_ = cc.Close()
			return nil, fmt.Errorf("connect %s: %w", addr, ctx.Err())
		}
	}
	sctx, cancel := context.WithCancel(context.Background())
	st, err := rpcpb.NewManagerClient(cc).Submit(sctx)
	if err != nil {
		cancel()
		_ = cc.Close()
		return nil, fmt.Errorf("open submit stream to %s: %w", addr, err)
	}
	l := &lane{addr: addr, cc: cc, stream: st, cancel: cancel, pending: map[uint64]*call{}}
	l.wake = sync.NewCond(&l.mu)
	l.wg.Add(2)
	go l.send()
	go l.receive()
	return l, nil
}

// dead reports whether the lane failed or was closed.
func (l *lane) dead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err != nil
}

// idle reports whether nothing waits on the lane.
func (l *lane) idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending) == 0
}

// enqueue queues item (size: its approximate encoded bytes); the answer
// arrives on the returned call's done.
func (l *lane) enqueue(item *rpcpb.SubmitItem, size int, deadline time.Time) (*call, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil, l.err
	}
	l.nextID++
	var c *call
	if n := len(l.free); n > 0 {
		c = l.free[n-1]
		l.free[n-1] = nil
		l.free = l.free[:n-1]
		c.id, c.item, c.size, c.deadline = l.nextID, item, size, deadline
	} else {
		c = &call{id: l.nextID, item: item, size: size, deadline: deadline, done: make(chan callResult, 1)}
	}
	l.pending[c.id] = c
	l.queue = append(l.queue, c)
	l.wake.Signal()
	return c, nil
}

// release gives back c, whose answer its caller has taken from c.done:
// nothing else refers to it any more (it left pending and the queue when
// it was answered), so enqueue may hand it out again. An abandoned call is
// never released: a dropped one stays in the queue until the sender skips
// it.
func (l *lane) release(c *call) {
	*c = call{done: c.done}
	l.mu.Lock()
	if len(l.free) < maxFreeCalls {
		l.free = append(l.free, c)
	}
	l.mu.Unlock()
}

// abandon stops waiting for c: a queued call is not sent; a sent one is
// cancelled at the manager with the next message.
func (l *lane) abandon(c *call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[c.id]; !ok || l.err != nil {
		return
	}
	delete(l.pending, c.id)
	if !c.sent {
		c.dropped = true
		return
	}
	l.cancels = append(l.cancels, c.id)
	l.wake.Signal()
}

// fail kills the lane: every waiting submission gets err, the stream and the
// connection are closed. The first error wins.
func (l *lane) fail(err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = err
	for id, c := range l.pending {
		c.done <- callResult{err: err}
		delete(l.pending, id)
	}
	l.queue, l.cancels = nil, nil
	l.wake.Broadcast()
	l.mu.Unlock()
	l.cancel()
	_ = l.cc.Close()
}

// close fails the lane with errLaneClosed and waits for its goroutines.
func (l *lane) close() {
	l.fail(errLaneClosed)
	l.wg.Wait()
}

func (l *lane) send() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		for len(l.queue) == 0 && len(l.cancels) == 0 && l.err == nil {
			l.wake.Wait()
		}
		// Yield once, so that callers already runnable can queue theirs and
		// travel in this message: batching without a timer.
		l.mu.Unlock()
		runtime.Gosched()
		l.mu.Lock()
		if l.err != nil {
			l.mu.Unlock()
			return
		}
		batch := l.fillBatch()
		l.mu.Unlock()
		if len(batch.Items) == 0 && len(batch.Cancel) == 0 {
			continue
		}
		batchStats.sent.Add(1)
		batchStats.sentItems.Add(int64(len(batch.Items)))
		err := l.stream.Send(batch)
		clear(batch.Items) // keep no item past its Send
		batch.Items = batch.Items[:0]
		if errors.Is(err, io.EOF) {
			// The manager ended the stream: its status (a refusal of
			// the listener, say) is Recv's to read, and the receiver
			// fails the lane with it.
			return
		}
		if err != nil {
			l.fail(fmt.Errorf("submit stream to %s: send: %w", l.addr, err))
			return
		}
	}
}

// fillBatch moves the cancels, and the queued calls one message holds,
// into l.batch and returns it; l.mu is held. The message and its slices
// are reused: gRPC has encoded the message when Send returns and keeps no
// reference to it.
func (l *lane) fillBatch() *rpcpb.SubmitBatch {
	batch := &l.batch
	batch.Cancel = append(batch.Cancel[:0], l.cancels...)
	l.cancels = l.cancels[:0]
	bytes, n := 0, 0
	for n < len(l.queue) && len(batch.Items) < maxBatchItems {
		c := l.queue[n]
		if c.dropped {
			n++
			continue
		}
		if len(batch.Items) > 0 && bytes+c.size > maxBatchBytes {
			break
		}
		n++
		bytes += c.size
		c.sent = true
		it := c.item
		it.Id = c.id
		if !c.deadline.IsZero() {
			it.TimeoutMicros = max(time.Until(c.deadline).Microseconds(), 1)
		}
		batch.Items = append(batch.Items, it)
	}
	if n == len(l.queue) {
		clear(l.queue[:n])
		l.queue = l.queue[:0] // the backing array is reused
	} else {
		clear(l.queue[:n]) // the backing array keeps no call it sent
		l.queue = l.queue[n:]
	}
	return batch
}

func (l *lane) receive() {
	defer l.wg.Done()
	for {
		msg, err := l.stream.Recv()
		if err != nil {
			l.fail(fmt.Errorf("submit stream to %s: receive: %w", l.addr, err))
			return
		}
		batchStats.received.Add(1)
		batchStats.receivedItems.Add(int64(len(msg.GetResults())))
		for _, r := range msg.GetResults() {
			res := callResult{res: r}
			if pe := r.GetError(); pe != nil {
				res.err = fromPBError(pe)
			}
			l.mu.Lock()
			c, ok := l.pending[r.GetId()]
			delete(l.pending, r.GetId())
			l.mu.Unlock()
			if ok { // else abandoned: nobody waits
				c.done <- res
			}
		}
	}
}
