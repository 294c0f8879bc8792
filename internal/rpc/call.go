package rpc

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// Unary calls: every method of the Manager service but Submit is one request
// and one answer. The client keeps one gRPC connection per manager for them,
// beside its submit lanes; gRPC multiplexes the calls on it and reconnects it
// when it breaks. An error crosses as a gRPC status whose details hold the
// rpcpb.Error (code, message, leader hint), so it keeps its identity exactly
// as a submission's does.

// callConn is the client's connection to one manager for unary calls.
type callConn struct {
	cc      *grpc.ClientConn
	refusal *handshakeRefusal
	calls   int // in flight, under Client.mu
}

// conn returns the connection to addr for a unary call, counted in flight
// until release.
func (c *Client) conn(addr string) (*callConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClientClosed
	}
	u := c.conns[addr]
	if u == nil {
		cc, refusal, err := newConn(&c.cfg, addr)
		if err != nil {
			return nil, err
		}
		u = &callConn{cc: cc, refusal: refusal}
		c.conns[addr] = u
	}
	u.calls++
	return u, nil
}

func (c *Client) release(u *callConn) {
	c.mu.Lock()
	u.calls--
	c.mu.Unlock()
}

// closeConns removes and closes the unary connections that match.
func (c *Client) closeConns(match func(addr string, u *callConn) bool) {
	c.mu.Lock()
	var out []*callConn
	for addr, u := range c.conns {
		if match(addr, u) {
			out = append(out, u)
			delete(c.conns, addr)
		}
	}
	c.mu.Unlock()
	for _, u := range out {
		_ = u.cc.Close()
	}
}

// unary runs a unary Manager method (m, a method expression of
// rpcpb.ManagerClient) at the leader with the retries of every call
// (retry) and returns its answer; extra lengthens each attempt's timeout
// (a long poll's wait).
func unary[Req, Resp any](c *Client, ctx context.Context, what string, extra time.Duration,
	m func(rpcpb.ManagerClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, opts ...grpc.CallOption) (Resp, error) {
	var res Resp
	err := c.retry(ctx, what, true, func(addr string) (err error) {
		res, err = unaryAt(c, ctx, addr, what, extra, m, req, opts...)
		return err
	})
	return res, err
}

// unaryAt runs a unary Manager method once at addr.
func unaryAt[Req, Resp any](c *Client, ctx context.Context, addr, what string, extra time.Duration,
	m func(rpcpb.ManagerClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, opts ...grpc.CallOption) (Resp, error) {
	var res Resp
	err := c.onConn(ctx, addr, what, extra, func(ctx context.Context, cc grpc.ClientConnInterface) (err error) {
		res, err = m(rpcpb.NewManagerClient(cc), ctx, req, opts...)
		return err
	})
	return res, err
}

// onConn runs one call of any service at addr, on the connection for unary
// calls, within AttemptTimeout+extra; its error is callError's.
func (c *Client) onConn(ctx context.Context, addr, what string, extra time.Duration, do func(context.Context, grpc.ClientConnInterface) error) error {
	u, err := c.conn(addr)
	if err != nil {
		return err
	}
	defer c.release(u)
	actx, cancel := c.attemptContext(ctx, c.cfg.AttemptTimeout+extra)
	defer cancel()
	err = callError(what, addr, do(actx, u.cc))
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
		if e := u.refusal.refused(); e != nil {
			// The connection is down because its handshake refused the
			// manager's certificate: a definite answer, with its reason.
			return e
		}
	}
	return err
}

// callError turns a unary call's error back into what the manager answered:
// the *Error of its status details; a refusal of the listener itself
// (unauthenticated, forbidden, a message over the bounds, a method the
// manager does not have) as the *Error of that code; anything else is a
// transport failure, which the client retries.
func callError(what, addr string, err error) error {
	if err == nil {
		return nil
	}
	var f *finalError
	if errors.As(err, &f) {
		return err // the attempt's own verdict (a snapshot cut after its first chunk)
	}
	st, ok := status.FromError(err)
	if !ok {
		return attemptError(what, addr, err)
	}
	for _, d := range st.Details() {
		if pe, ok := d.(*rpcpb.Error); ok {
			return fromPBError(pe)
		}
	}
	switch st.Code() {
	case codes.Unauthenticated:
		return &Error{Code: CodeUnauthenticated, Message: st.Message()}
	case codes.PermissionDenied:
		return &Error{Code: CodeForbidden, Message: st.Message()}
	case codes.ResourceExhausted:
		return Errorf(CodeTooLarge, "%s: %s", what, st.Message())
	case codes.Unimplemented:
		return &unservedError{Errorf(CodeInternal, "%s: %s", what, st.Message())}
	}
	return attemptError(what, addr, err)
}

// unservedError is the answer of a listener that serves no such method
// (Unimplemented, without an Error in its details): internal, as any
// manager's, unless the client reached that listener by a not_leader hint,
// which then named an address where no manager serves (retry).
type unservedError struct{ err *Error }

func (u *unservedError) Error() string { return u.err.Error() }
func (u *unservedError) Unwrap() error { return u.err }

// grpcCode is the gRPC status code an rpc Code travels under (the Error in
// the details is what the client reads; the code is for other tools).
func grpcCode(c Code) codes.Code {
	switch c {
	case CodeNotLeader, CodeLeaseLost, CodeConflict, CodeRequestReused:
		return codes.FailedPrecondition
	case CodeUnavailable:
		return codes.Unavailable
	case CodeLedgerFull, CodeWatermarksFull, CodeOutboxFull, CodeTenantQuota, CodeBudgetExceeded, CodeTooLarge:
		return codes.ResourceExhausted
	case CodeNotFound:
		return codes.NotFound
	case CodeInvalid:
		return codes.InvalidArgument
	case CodeUnauthenticated:
		return codes.Unauthenticated
	case CodeForbidden:
		return codes.PermissionDenied
	default:
		return codes.Internal
	}
}

// callStatus is the status a unary method answers err with, nil for nil
// (asError's rules: an *Error keeps its code, a context error is
// unavailable, anything else internal and logged). A handler returns its
// answer beside it: gRPC sends no answer with an error.
func (s *Server) callStatus(what string, err error) error {
	if err == nil {
		return nil
	}
	pe := toPBError(err, func(err error) { s.log.Error("rpc call failed", logging.KeyPath, what, logging.KeyError, err) })
	return pbErrorStatus(pe)
}

// reply answers a unary method: check's error when the request was refused
// before it ran, else do's answer with its error; either error as callStatus
// has it.
func reply[Resp any](s *Server, what string, check error, do func() (Resp, error)) (Resp, error) {
	if check != nil {
		var none Resp
		return none, s.callStatus(what, check)
	}
	resp, err := do()
	return resp, s.callStatus(what, err)
}

// pbErrorStatus is the status pe travels under (its code's, pe in the
// details).
func pbErrorStatus(pe *rpcpb.Error) error {
	st, derr := status.New(grpcCode(Code(pe.GetCode())), pe.GetMessage()).WithDetails(pe)
	if derr != nil {
		return status.Error(codes.Internal, pe.GetMessage())
	}
	return st.Err()
}

// checkRequest refuses as invalid a request of the Manager service whose
// body (what of it a gate took from its client's body: a job's payload, a
// result, an error; named what) is over MaxBodyBytes, or whose other members
// are over MaxMemberBytes.
func checkRequest(m proto.Message, what string, body int) error {
	if body > MaxBodyBytes {
		return Errorf(CodeInvalid, "%s: %d bytes, over %d", what, body, MaxBodyBytes)
	}
	if n := proto.Size(m) - body; n > MaxMemberBytes {
		return Errorf(CodeInvalid, "request: %d bytes besides its %s, over %d", n, what, MaxMemberBytes)
	}
	return nil
}
