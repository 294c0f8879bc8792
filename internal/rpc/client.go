package rpc

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Resolver tells a client where the datacenter's managers are.
type Resolver interface {
	// Managers returns the RPC addresses (host:port) of the managers.
	Managers() []string
}

// StaticResolver is a fixed list of manager RPC addresses.
type StaticResolver []string

// Managers implements Resolver.
func (s StaticResolver) Managers() []string { return s }

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func() []string

// Managers implements Resolver.
func (f ResolverFunc) Managers() []string { return f() }

// ClientConfig configures a Client. Zero values take the defaults noted.
type ClientConfig struct {
	Resolver Resolver
	// Streams is how many submit streams (each its own connection) the client
	// keeps to a manager. Default 2.
	Streams int
	Logger  *slog.Logger
	// AttemptTimeout bounds one attempt against one manager, beyond the time the
	// manager is allowed to wait on a submission of the same key in flight.
	// Default 3s.
	AttemptTimeout time.Duration
	// RetryBackoff is the first pause between attempts (doubling up to
	// MaxBackoff). Defaults 10ms and 250ms.
	RetryBackoff time.Duration
	MaxBackoff   time.Duration
	// Secret is the cluster secret sent with every call and stream
	// (secret.go); empty sends none.
	Secret string
	// TLS, when set, is how the client dials the managers (certs.Cluster's
	// ClientConfig: mutual TLS); nil dials plain TCP.
	TLS *tls.Config
	// Dial, when set, opens the TCP connections to the managers (addr is
	// host:port); TLS, if any, runs over them. nil: a plain dial, as always in
	// the daemons. A seam for the tests module's fault layer, which cuts
	// the links between datacenters through it.
	Dial DialFunc
	// OperatorSecret is the operator secret sent with every call of the
	// Operator service (OperatorSecretMetadata, operatorauth.go); empty
	// sends none. oncectl's; a gate has none.
	OperatorSecret string
	// MaxAttempts bounds the attempts of one call, hints followed included;
	// then the call fails with an error matching ErrUnavailable. 0: until
	// the caller's context ends (the gate's).
	MaxAttempts int
}

// DialFunc opens a TCP connection to addr (host:port) within ctx.
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// Client calls the manager leader of one datacenter. It follows "not leader"
// answers to the leader they name, and retries NotLeader, Unavailable and
// transport failures against the current leader until the caller's context ends;
// then it returns an error matching ErrUnavailable. Other errors are returned at
// once. Retrying a submission is safe: the ledger deduplicates by key.
type Client struct {
	cfg ClientConfig
	log *slog.Logger

	mu     sync.Mutex
	leader string // last known leader, "" when unknown
	rr     int    // round-robin position over Resolver.Managers()
	closed bool
	peers  map[string]*peer     // submit streams by manager address
	conns  map[string]*callConn // unary calls' connections by manager address (call.go)

	laneRR atomic.Uint64 // round-robin position over a peer's lanes

	// attemptContext bounds an attempt on the unary connection (onConn):
	// context.WithTimeout, or a test's context whose deadline passes when
	// the test says.
	attemptContext func(context.Context, time.Duration) (context.Context, context.CancelFunc)
}

// peer holds the submit lanes to one manager; a slot's lane is dialled on
// first use and again after it fails.
type peer struct {
	slots []laneSlot
}

// laneSlot is one lane's place. Its lane is dialled by one attempt at a
// time, outside mu: the others wait on dialing, each within its own
// deadline, not behind a mutex held for a dial that may last as long as the
// dialling caller's deadline.
type laneSlot struct {
	mu      sync.Mutex
	l       *lane
	dialing chan struct{} // closed when the dial in progress ends; nil: none
}

// NewClient returns a Client.
func NewClient(cfg ClientConfig) *Client {
	cfg.Logger = logging.OrDiscard(cfg.Logger)
	// A setting left unset (zero or negative) takes its default.
	cfg.AttemptTimeout = cmp.Or(max(cfg.AttemptTimeout, 0), 3*time.Second)
	cfg.RetryBackoff = cmp.Or(max(cfg.RetryBackoff, 0), 10*time.Millisecond)
	cfg.MaxBackoff = cmp.Or(max(cfg.MaxBackoff, 0), 250*time.Millisecond)
	cfg.Streams = cmp.Or(max(cfg.Streams, 0), 2)
	if cfg.Resolver == nil {
		cfg.Resolver = StaticResolver(nil)
	}
	return &Client{cfg: cfg, log: cfg.Logger, peers: map[string]*peer{}, conns: map[string]*callConn{}, attemptContext: context.WithTimeout}
}

// finalError is an attempt's error that must not be retried (a snapshot
// that already wrote part of its archive).
type finalError struct{ err error }

func (f *finalError) Error() string { return f.err.Error() }
func (f *finalError) Unwrap() error { return f.err }

// Leader returns the last known leader's RPC address ("" when unknown).
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

// CloseIdleConnections closes the connections and the submit streams
// nothing waits on; later calls open new ones.
func (c *Client) CloseIdleConnections() {
	for _, l := range c.takeLanes(func(l *lane) bool { return l.idle() }) {
		l.close()
	}
	c.closeConns(func(_ string, u *callConn) bool { return u.calls == 0 })
}

// Close closes every connection and stream; submissions still waiting fail
// with a transport error, and later calls fail with an error matching
// ErrUnavailable. It waits for the client's goroutines to end.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	for _, l := range c.takeLanes(func(*lane) bool { return true }) {
		l.close()
	}
	c.closeConns(func(string, *callConn) bool { return true })
}

// takeLanes removes from their slots, and returns, the lanes that match.
func (c *Client) takeLanes(match func(*lane) bool) []*lane {
	c.mu.Lock()
	peers := slices.Collect(maps.Values(c.peers))
	c.mu.Unlock()
	var out []*lane
	for _, p := range peers {
		for i := range p.slots {
			s := &p.slots[i]
			s.mu.Lock()
			for s.dialing != nil { // a lane being dialled is taken once it is
				wait := s.dialing
				s.mu.Unlock()
				<-wait
				s.mu.Lock()
			}
			if s.l != nil && match(s.l) {
				out = append(out, s.l)
				s.l = nil
			}
			s.mu.Unlock()
		}
	}
	return out
}

// Submit submits a job at the leader, over a submit stream (see stream.go).
// req is only read: every attempt's item carries it. The caller must not
// change it afterwards either: an attempt it stopped waiting for may still
// be encoding it (the same holds for Heartbeat's, Complete's and Fail's).
func (c *Client) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	wait := time.Duration(req.GetWaitMillis()) * time.Millisecond
	return streamCall(c, ctx, "submit", "submission", &rpcpb.SubmitItem{Request: req}, approxSize(req), wait, (*rpcpb.SubmitResult).GetResponse)
}

// streamCall sends item, a submission or a worker call (noun names it in
// the size check's error), on a submit stream to the leader, with the
// retries of every call, and returns the answer get reads from its result
// (empty if it holds none); it travels batched with the other items of the
// lane. extra lengthens each attempt's timeout (streamAttempt).
func streamCall[T any](c *Client, ctx context.Context, what, noun string, item *rpcpb.SubmitItem, size int, extra time.Duration,
	get func(*rpcpb.SubmitResult) *T) (*T, error) {
	if size > maxMessageBytes-1024 { // a message of the stream could not carry it
		return nil, Errorf(CodeInvalid, "a %s of about %d bytes is over the stream's message limit of %d", noun, size, maxMessageBytes)
	}
	var res *rpcpb.SubmitResult
	err := c.retry(ctx, what, true, func(addr string) (err error) {
		// Each attempt sends an item of its own (streamAttempt's rule): the
		// lane writes the item's id and timeout as it sends it, and the lane
		// of an attempt that timed out may still be encoding its copy.
		it := &rpcpb.SubmitItem{Request: item.GetRequest(), Heartbeat: item.GetHeartbeat(), Complete: item.GetComplete(), Fail: item.GetFail()}
		res, err = c.streamAttempt(ctx, addr, what, it, size, extra)
		return err
	})
	if err != nil {
		return nil, err
	}
	if a := get(res); a != nil {
		return a, nil
	}
	return new(T), nil
}

// timerPool holds stopped timers for streamAttempt's and waitUntil's waits:
// since Go 1.23 a stopped timer's channel holds no stale tick, so a timer is
// reused with Reset.
var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// pooledTimer returns a pooled timer that fires at deadline; its waiter
// hands it back with releaseTimer. (A release func returned beside it would
// be a closure on the heap, an allocation per attempt that the pool is here
// to save.)
func pooledTimer(deadline time.Time) *time.Timer {
	t := timerPool.Get().(*time.Timer)
	t.Reset(time.Until(deadline))
	return t
}

// releaseTimer stops t and gives it back to the pool.
func releaseTimer(t *time.Timer) {
	t.Stop()
	timerPool.Put(t)
}

// streamAttempt sends item (size: its approximate bytes) on a lane to addr
// and waits for its answer, for at most AttemptTimeout+extra; a caller that
// stops waiting cancels it there. An answered error is returned as its
// *Error. item is the attempt's own: the lane sets its Id and
// TimeoutMicros; what it points to is only read.
//
// On a live lane the attempt allocates no context: its bound is a pooled
// timer beside ctx, and the call and its channel come from the lane's pool.
func (c *Client) streamAttempt(ctx context.Context, addr, what string, item *rpcpb.SubmitItem, size int, extra time.Duration) (*rpcpb.SubmitResult, error) {
	timeout := c.cfg.AttemptTimeout + extra
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	l, err := c.lane(ctx, addr, c.laneRR.Add(1), deadline)
	if err != nil {
		return nil, attemptError(what, addr, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, attemptError(what, addr, err)
	}
	call, err := l.enqueue(item, size, deadline)
	if err != nil {
		return nil, attemptError(what, addr, err)
	}
	t := pooledTimer(deadline)
	defer releaseTimer(t)
	select {
	case r := <-call.done:
		l.release(call)
		if st, ok := status.FromError(r.err); ok && st.Code() == codes.Unauthenticated {
			// The listener refused the stream: a definite answer, as a
			// unary call's refusal is (callError), for a submission and a
			// worker call alike.
			return nil, &Error{Code: CodeUnauthenticated, Message: st.Message()}
		}
		return r.res, r.err
	case <-ctx.Done():
		l.abandon(call)
		return nil, attemptError(what, addr, ctx.Err())
	case <-t.C:
		l.abandon(call)
		return nil, attemptError(what, addr, context.DeadlineExceeded)
	}
}

// lane returns the live lane of slot (modulo the slots) to addr, dialling
// one, by deadline, if the slot has none.
func (c *Client) lane(ctx context.Context, addr string, slot uint64, deadline time.Time) (*lane, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClientClosed
	}
	p := c.peers[addr]
	if p == nil {
		p = &peer{slots: make([]laneSlot, c.cfg.Streams)}
		c.peers[addr] = p
	}
	c.mu.Unlock()
	s := &p.slots[slot%uint64(len(p.slots))]
	s.mu.Lock()
	for s.dialing != nil {
		// Another attempt is dialling this slot: wait for it within this
		// attempt's bound, then take its lane or dial again.
		wait := s.dialing
		s.mu.Unlock()
		if err := waitUntil(ctx, wait, deadline); err != nil {
			return nil, err
		}
		s.mu.Lock()
	}
	if s.l != nil && !s.l.dead() {
		l := s.l
		s.mu.Unlock()
		return l, nil
	}
	old, done := s.l, make(chan struct{})
	s.l, s.dialing = nil, done
	s.mu.Unlock()
	if old != nil {
		old.wg.Wait() // a dead lane's goroutines are ending
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	l, err := dialLane(dctx, &c.cfg, addr)
	cancel()
	if err == nil && c.isClosed() { // Close ran while we dialled
		l.close()
		l, err = nil, errClientClosed
	}
	s.mu.Lock()
	s.l, s.dialing = l, nil
	close(done)
	s.mu.Unlock()
	return l, err
}

// waitUntil waits for done until ctx ends or deadline passes; then it
// returns the reason.
func waitUntil(ctx context.Context, done <-chan struct{}, deadline time.Time) error {
	t := pooledTimer(deadline)
	defer releaseTimer(t)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return context.DeadlineExceeded
	}
}

// attemptError is err, an attempt of what at addr that failed short of an
// answer (a transport failure, the attempt's bound), named for the logs.
func attemptError(what, addr string, err error) error {
	return fmt.Errorf("rpc %s %s: %w", what, addr, err)
}

// maxHintHops bounds how many "not leader" hints are followed without pausing,
// so two managers that disagree about the leader cannot make a client spin.
const maxHintHops = 3

// errClientClosed is what calls on a closed Client get.
var errClientClosed = &Error{Code: CodeUnavailable, Message: "the rpc client is closed"}

// retry runs attempt against the leader (or a resolved manager) until it
// succeeds, answers definitely, or ctx ends; what names the call in logs.
// learn says whether a success proves its manager the leader: true for the
// calls only the leader answers; false for a call any manager answers, as
// Status (a follower's answer taken for the leader's would send the next
// calls to it first, and Leader would name it).
func (c *Client) retry(ctx context.Context, what string, learn bool, attempt func(addr string) error) error {
	backoff := c.cfg.RetryBackoff
	var last error
	hops, attempts := 0, 0
	// hint is the address a not_leader answer named, asked next. It becomes
	// the last known leader only once it answers as one: a hint may name a
	// dead manager, or an address where no manager serves, and the calls
	// after this one must not be sent there first on its word alone.
	hint := ""
	for {
		if c.isClosed() {
			return errClientClosed
		}
		if m := c.cfg.MaxAttempts; m > 0 && attempts >= m {
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("no manager answered in %d attempts (last error: %v)", attempts, last)}
		}
		attempts++
		addr, hinted := hint, hint != ""
		hint = ""
		if !hinted {
			addr = c.pick()
		}
		if addr == "" {
			last = errors.New("no manager address known")
		} else {
			err := attempt(addr)
			if err == nil {
				if learn {
					c.setLeader(addr)
				}
				return nil
			}
			last = err
			var e *Error
			var f *finalError
			var u *unservedError
			switch {
			case errors.As(err, &f):
				return f.err // the attempt cannot be repeated
			case errors.As(err, &e) && e.Code == CodeNotLeader:
				c.forget(addr)
				if e.Leader != "" && e.Leader != addr && hops < maxHintHops {
					hops++
					hint = e.Leader
					continue
				}
			case errors.As(err, &e) && e.Code == CodeUnavailable:
				c.forgetUnlessGivenUp(ctx, addr)
			case hinted && errors.As(err, &u):
				// The hint named an address that serves no such method:
				// not a manager (another service on that port), so not
				// an answer about this call; ask the resolver's managers.
			case errors.As(err, &e):
				return err // a definite answer: not found, invalid, ledger full, internal
			default:
				c.forgetUnlessGivenUp(ctx, addr) // transport failure: dead connection, refused, timeout
			}
			c.log.Debug("rpc attempt failed, retrying", logging.KeyAddr, addr, logging.KeyPath, what, logging.KeyError, err)
		}
		hops = 0
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("no manager leader answered before the deadline (last error: %v)", last)}
		case <-t.C:
		}
		backoff = min(backoff*2, c.cfg.MaxBackoff)
	}
}

// pick returns the address of the next attempt: the last known leader, or
// the resolver's managers in turn. When it reads the resolver, it closes
// the unary connections no call is using to the addresses the resolver no
// longer names (a manager replaced, moved or gone): gRPC would otherwise
// keep dialling a dead one, every second or so, for as long as the client
// lives.
func (c *Client) pick() string {
	c.mu.Lock()
	if c.leader != "" {
		defer c.mu.Unlock()
		return c.leader
	}
	ms := c.cfg.Resolver.Managers()
	addr := ""
	if len(ms) > 0 {
		c.rr = (c.rr + 1) % len(ms)
		addr = ms[c.rr]
	}
	c.mu.Unlock()
	c.closeConns(func(a string, u *callConn) bool { return u.calls == 0 && !slices.Contains(ms, a) })
	return addr
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Client) setLeader(addr string) {
	c.mu.Lock()
	c.leader = addr
	c.mu.Unlock()
}

// forgetUnlessGivenUp forgets addr as the leader after an attempt failed
// there, unless the caller gave up (ctx ended: a gate's client hung up, a
// long poll ended): that failure says nothing of the manager, which stays
// the last known leader.
func (c *Client) forgetUnlessGivenUp(ctx context.Context, addr string) {
	if ctx.Err() == nil {
		c.forget(addr)
	}
}

func (c *Client) forget(addr string) {
	c.mu.Lock()
	if c.leader == addr {
		c.leader = ""
	}
	c.mu.Unlock()
}
