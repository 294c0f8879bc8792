package rpc

import (
	"context"
	"errors"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The wire's messages are rpcpb's (manager.proto): the Service, Workers and
// JobActions take and answer them, and the Client sends and returns them,
// unconverted. What crosses converted is an error: an *Error travels as its
// rpcpb.Error.

// asError is the *Error a Service error answers as: an *Error itself; a
// context error (the caller's deadline or cancellation) unavailable;
// anything else internal, and reported through logf.
func asError(err error, logf func(err error)) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return Errorf(CodeUnavailable, "%v", err)
	default:
		logf(err)
		return Errorf(CodeInternal, "%v", err)
	}
}

// toPBError is asError's *Error in its wire form.
func toPBError(err error, logf func(err error)) *rpcpb.Error {
	e := asError(err, logf)
	return &rpcpb.Error{Code: string(e.Code), Message: e.Message, Leader: e.Leader}
}

func fromPBError(p *rpcpb.Error) *Error {
	return &Error{Code: Code(p.GetCode()), Message: p.GetMessage(), Leader: p.GetLeader()}
}

// approxSize estimates an item's encoded size, to bound a batch's bytes
// without encoding it twice.
func approxSize(r *rpcpb.SubmitRequest) int {
	j := r.GetJob()
	return 64 + len(r.GetTenant()) + len(r.GetKey()) + len(r.GetFingerprint()) + len(j.GetType()) + len(j.GetPayload()) +
		len(r.GetProposedJobId()) + len(r.GetHome()) + len(r.GetAltFingerprint())
}

// leaseRef is what every worker call carries: the lease it acts under.
type leaseRef interface {
	GetTenant() string
	GetJobId() string
	GetLeaseId() string
}

// workerCallSize estimates a worker call's encoded size: its lease and body
// bytes of result or error.
func workerCallSize(r leaseRef, body int) int {
	return 64 + len(r.GetTenant()) + len(r.GetJobId()) + len(r.GetLeaseId()) + body
}

func approxResultSize(r *rpcpb.SubmitResult) int {
	n := 64
	if j := r.GetResponse().GetJob(); j != nil {
		n += 128 + len(j.Payload) + len(j.IdempotencyKey)
	}
	if j := r.GetJob(); j != nil {
		n += 128 + len(j.Payload) + len(j.Result) + len(j.IdempotencyKey) + len(j.Error)
		for _, dc := range j.NamedDatacenters {
			n += 2 + len(dc)
		}
	}
	if e := r.GetError(); e != nil {
		n += len(e.Message) + len(e.Leader)
	}
	return n
}
