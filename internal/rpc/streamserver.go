package rpc

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/soheilhy/cmux"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// ServerConfig configures a Server. Zero values take the defaults noted.
type ServerConfig struct {
	Logger *slog.Logger
	// ErrorLog receives the HTTP server's own errors (default: the standard
	// logger, as net/http does).
	ErrorLog *log.Logger
	// MaxInFlight bounds the submissions one stream serves at once; a stream at
	// the bound reads no more until one resolves (default 1024).
	MaxInFlight int
	// Secret, when set, is the cluster secret every caller must present
	// (secret.go): requests and calls without it are refused.
	Secret string
	// TLS, when set, is the listener's TLS configuration (certs.Cluster's
	// ServerConfig: mutual TLS); nil serves plain TCP.
	TLS *tls.Config
	// Operator, when set, is served as the Operator service (operator.go),
	// to the callers OperatorAuth accepts (operatorauth.go); without it the
	// service answers no method.
	Operator     Operator
	OperatorAuth OperatorAuth
}

// Server serves a Service on one listener: connections that open with the
// HTTP/2 preface carry the Manager service, and the Operator service when
// ServerConfig.Operator is set (gRPC), every other connection is
// HTTP/1.1 and served by Mux (the status and whatever the caller adds). The
// listener is split by github.com/soheilhy/cmux, as etcd splits its client
// port.
type Server struct {
	svc         Service
	log         *slog.Logger
	maxInFlight int
	tls         *tls.Config
	mux         *http.ServeMux
	http        *http.Server
	grpc        *grpc.Server
	federation  atomic.Pointer[func() *rpcpb.FederationView] // SetFederation

	draining  chan struct{} // closed by Shutdown and Close: streams finish what they hold and end
	drainOnce sync.Once
	streams   sync.WaitGroup // goroutines a stream leaves behind its handler

	mu      sync.Mutex
	ln      net.Listener
	closed  bool
	serving sync.WaitGroup // Serve and what it started
}

// NewServer returns a Server of svc.
func NewServer(svc Service, cfg ServerConfig) *Server {
	cfg.Logger = logging.OrDiscard(cfg.Logger)
	s := &Server{
		svc:         svc,
		log:         cfg.Logger,
		maxInFlight: cmp.Or(max(cfg.MaxInFlight, 0), 1024),
		tls:         cfg.TLS,
		mux:         http.NewServeMux(),
		draining:    make(chan struct{}),
	}
	s.mux.HandleFunc("GET /rpc/v1/status", s.serveStatusHTTP)
	s.http = &http.Server{
		Handler: requireSecret(s.mux, cfg.Secret),
		// "OPTIONS *" too goes to the handler, behind the secret: net/http
		// would answer it 200 itself, before any handler, to anyone.
		DisableGeneralOptionsHandler: true,
		ReadHeaderTimeout:            5 * time.Second,
		IdleTimeout:                  120 * time.Second,
		ErrorLog:                     cfg.ErrorLog,
	}
	opts := []grpc.ServerOption{
		// TLS, when on, is done before cmux; these hand its state to the
		// calls (the operator role's client certificate).
		grpc.Creds(listenerCredentials{tls: cfg.TLS != nil}),
		grpc.MaxRecvMsgSize(maxMessageBytes),
		grpc.MaxSendMsgSize(maxMessageBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.WaitForHandlers(true),
		// A method the server does not serve (an unknown service, gRPC
		// reflection or health, a method of neither service) is answered
		// by this handler, through the interceptors: a caller without the
		// credential is refused before it learns which methods exist.
		grpc.UnknownServiceHandler(unknownMethod),
	}
	opts = append(opts, secretInterceptors(cfg.Secret)...)
	opts = append(opts, operatorInterceptors(cfg.OperatorAuth)...)
	s.grpc = grpc.NewServer(opts...)
	rpcpb.RegisterManagerServer(s.grpc, &service{s: s})
	if cfg.Operator != nil {
		rpcpb.RegisterOperatorServer(s.grpc, &operatorService{s: s, op: cfg.Operator})
	}
	return s
}

// unknownMethod answers a call of a method the server does not serve:
// Unimplemented, as gRPC does, once the interceptors let it through.
func unknownMethod(_ any, ss grpc.ServerStream) error {
	m, _ := grpc.MethodFromServerStream(ss)
	return status.Errorf(codes.Unimplemented, "unknown method %s", m)
}

// Mux is the HTTP/1.1 side's ServeMux: add routes before Serve.
func (s *Server) Mux() *http.ServeMux { return s.mux }

// Serve serves ln until Shutdown or Close, and then returns
// http.ErrServerClosed (as http.Server.Serve does); any other error is a
// failure of the listener.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return http.ErrServerClosed
	}
	if s.tls != nil {
		// The handshake runs on the connection's first read, within cmux's
		// read timeout; one that fails (no cluster certificate) drops it.
		ln = tls.NewListener(ln, s.tls)
	}
	s.ln = ln
	s.serving.Add(1)
	s.mu.Unlock()
	defer s.serving.Done()

	m := cmux.New(ln)
	m.SetReadTimeout(5 * time.Second) // a connection that says nothing is dropped
	grpcL := m.Match(cmux.HTTP2())
	httpL := ownedListener{m.Match(cmux.Any())}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = s.grpc.Serve(grpcL) }()
	go func() { defer wg.Done(); _ = s.http.Serve(httpL) }()
	err := m.Serve() // returns when ln is closed
	m.Close()        // ends the two Serve calls above
	wg.Wait()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return http.ErrServerClosed
	}
	return err
}

// Shutdown stops accepting connections, lets every stream answer the
// submissions it holds (the gates retry what it had not started), lets the
// HTTP requests in flight finish, and returns when all is done or ctx ends
// (then it cuts what is left, as Close does, and returns ctx's error).
func (s *Server) Shutdown(ctx context.Context) error {
	s.drainOnce.Do(func() { close(s.draining) })
	s.closeListener()
	herr := s.http.Shutdown(ctx)
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
		<-stopped
	}
	s.streams.Wait()
	s.serving.Wait()
	if herr != nil {
		_ = s.http.Close()
		return herr
	}
	return ctx.Err()
}

// Close stops at once: connections are closed and the submissions in flight
// are cancelled (their gates retry).
func (s *Server) Close() error {
	s.drainOnce.Do(func() { close(s.draining) })
	s.closeListener()
	err := s.http.Close()
	s.grpc.Stop()
	s.streams.Wait()
	s.serving.Wait()
	return err
}

// ownedListener is a cmux listener whose Close leaves the shared listener
// alone: the Server closes that itself.
type ownedListener struct{ net.Listener }

func (ownedListener) Close() error { return nil }

func (s *Server) closeListener() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.ln != nil {
		_ = s.ln.Close()
	}
}

// service is the Manager service of a Server (the unary methods are in
// workers.go, actions.go). Submit serves the submit stream: each submission of a batch runs
// Service.Submit on one of the stream's workers (at most MaxInFlight at once), with
// the deadline the gate sent, and its answer is sent as soon as it resolves;
// answers that resolve while a Send is in progress travel together in the
// next message.
type service struct {
	rpcpb.UnimplementedManagerServer
	s *Server
}

func (sv *service) Submit(stream submitServerStream) error {
	s := sv.s
	ctx := stream.Context()
	// Whether this caller may send carried submissions: one connection,
	// one certificate, checked once per stream.
	carryOK := mayCarry(ctx)

	batches := make(chan *rpcpb.SubmitBatch)
	recvErr := make(chan error, 1)
	s.streams.Add(1)
	go func() {
		defer s.streams.Done()
		receiveBatches(stream, batches, recvErr)
	}()

	// out holds at most MaxInFlight answers, so a resolving submission never
	// blocks on it.
	out := make(chan *rpcpb.SubmitResult, s.maxInFlight)
	sendErr := make(chan error, 1)
	go func() { sendErr <- sendResults(stream, out) }()

	sem := make(chan struct{}, s.maxInFlight)
	var (
		mu       sync.Mutex
		inflight = map[uint64]context.CancelFunc{}
		items    sync.WaitGroup
		err      error
	)
	// Each submission runs on one of the stream's workers, started as
	// needed up to MaxInFlight and kept until the stream ends: a worker's
	// stack has grown to what a submission needs by its second one, where a
	// goroutine per submission grew a fresh stack each time (a few percent
	// of a leader's CPU, docs/benchmarks.md).
	type task struct {
		ctx    context.Context
		cancel context.CancelFunc
		it     *rpcpb.SubmitItem
	}
	tasks := make(chan task) // unbuffered: a send is taken by an idle worker
	workers := 0
	run := func(t task) {
		defer func() { <-sem }()
		id := t.it.GetId()
		r := s.answer(t.ctx, t.it, carryOK)
		mu.Lock()
		_, wanted := inflight[id]
		delete(inflight, id)
		mu.Unlock()
		t.cancel()
		if !wanted {
			return // the gate cancelled it: nobody waits for the answer
		}
		out <- r
	}
	start := func(it *rpcpb.SubmitItem) {
		t := task{it: it}
		if us := it.GetTimeoutMicros(); us > 0 {
			t.ctx, t.cancel = context.WithTimeout(ctx, itemTimeout(us))
		} else {
			t.ctx, t.cancel = context.WithCancel(ctx)
		}
		mu.Lock()
		_, running := inflight[it.GetId()]
		if !running {
			inflight[it.GetId()] = t.cancel
		}
		mu.Unlock()
		if running {
			// Its answer could not be told from the running one's, nor
			// could a cancel of the id: refused, not run.
			t.cancel()
			<-sem
			out <- &rpcpb.SubmitResult{Id: it.GetId(), Error: toPBError(Errorf(CodeInvalid,
				"item %d: an item of this id is still running on the stream", it.GetId()), nil)}
			return
		}
		select {
		case tasks <- t:
			return
		default:
		}
		if workers == cap(sem) {
			// Every worker exists and the caller holds a slot of sem, so
			// one of them has finished its submission and is on its way
			// back for this one.
			tasks <- t
			return
		}
		workers++
		items.Add(1)
		go func() {
			defer items.Done()
			run(t)
			for t := range tasks {
				run(t)
			}
		}()
	}
loop:
	for {
		select {
		case b := <-batches:
			for _, it := range b.GetItems() {
				select {
				case sem <- struct{}{}:
					start(it)
				case <-ctx.Done():
					break loop
				case <-s.draining:
					break loop
				}
			}
			mu.Lock()
			for _, id := range b.GetCancel() {
				if cancel, ok := inflight[id]; ok {
					delete(inflight, id)
					cancel()
				}
			}
			mu.Unlock()
		case e := <-recvErr:
			if !errors.Is(e, io.EOF) {
				err = e
			}
			break loop
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		case <-s.draining:
			break loop
		}
	}
	close(tasks)
	items.Wait()
	close(out)
	if serr := <-sendErr; err == nil {
		err = serr
	}
	return err
}

// itemTimeout is an item's timeout_micros (positive) as a duration; one
// longer than a duration holds (about 292 years) is that long, not the
// wrapped product.
func itemTimeout(us int64) time.Duration {
	if us > int64(math.MaxInt64/time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// answer runs what an item of the submit stream carries, a submission or
// a worker call, and returns its result; mayCarry says whether the caller
// may send a carried submission (mayCarry).
func (s *Server) answer(ctx context.Context, it *rpcpb.SubmitItem, mayCarry bool) *rpcpb.SubmitResult {
	r := &rpcpb.SubmitResult{Id: it.GetId()}
	if it.GetTimeoutMicros() < 0 {
		r.Error = toPBError(Errorf(CodeInvalid, "item %d: timeout_micros %d is negative (0: no deadline)", it.GetId(), it.GetTimeoutMicros()), nil)
		return r
	}
	if s.serveWorkerCall(ctx, it, r) {
		return r
	}
	req := it.GetRequest()
	if req == nil {
		req = &rpcpb.SubmitRequest{} // refused by the Service as invalid
	}
	err := checkRequest(req, "payload", len(req.GetJob().GetPayload()))
	if !mayCarry && (req.GetCarried() || req.GetCarrier() != "") {
		err = errCarriedByNonManager
	}
	if err == nil { // else an *Error: toPBError has nothing to log
		var resp *rpcpb.SubmitResponse
		if resp, err = s.svc.Submit(ctx, req); err == nil {
			r.Response = resp
			return r
		}
	}
	r.Error = toPBError(err, func(err error) { s.log.Error("rpc submit failed", logging.KeyError, err) })
	return r
}

// submitServerStream is the manager's side of a Submit stream.
type submitServerStream = grpc.BidiStreamingServer[rpcpb.SubmitBatch, rpcpb.SubmitResults]

// receiveBatches hands the stream's messages to batches until Recv fails
// (its error on recvErr) or the stream's context ends.
func receiveBatches(stream submitServerStream, batches chan<- *rpcpb.SubmitBatch, recvErr chan<- error) {
	ctx := stream.Context()
	for {
		b, err := stream.Recv()
		if err != nil {
			recvErr <- err
			return
		}
		select {
		case batches <- b:
		case <-ctx.Done():
			return
		}
	}
}

// sendResults sends the answers of out, those ready together in one
// message, until out is closed, and returns the first Send error (after
// which it only drains out).
func sendResults(stream submitServerStream, out <-chan *rpcpb.SubmitResult) error {
	var failed error
	// One message, reused for every Send: gRPC has encoded it when
	// Send returns and keeps no reference to it.
	msg := &rpcpb.SubmitResults{}
	for r := range out {
		if failed != nil {
			continue // the stream is broken; drain
		}
		runtime.Gosched() // let answers that are resolving join this message
		msg.Results = append(msg.Results[:0], r)
		size := approxResultSize(r)
	more:
		for len(msg.Results) < maxBatchItems && size < maxBatchBytes {
			select {
			case r, ok := <-out:
				if !ok {
					break more
				}
				msg.Results = append(msg.Results, r)
				size += approxResultSize(r)
			default:
				break more
			}
		}
		if err := stream.Send(msg); err != nil {
			failed = err
		}
		clear(msg.Results) // keep no answer past its Send
	}
	return failed
}
