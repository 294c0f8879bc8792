package rpc

import (
	"context"
	"errors"
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// The conversions between this package's types and their protobuf mirrors in
// rpcpb. Every field crosses; nil and empty byte slices both arrive as nil.

func toPBRequest(r *SubmitRequest) *rpcpb.SubmitRequest {
	return &rpcpb.SubmitRequest{
		Tenant:               r.Tenant,
		Key:                  r.Key,
		Fingerprint:          r.Fingerprint,
		Job:                  &rpcpb.JobRequest{Type: r.Job.Type, Payload: r.Job.Payload, Datacenters: r.Job.Datacenters},
		WaitMillis:           r.WaitMillis,
		ProposedJobId:        r.ProposedJobID,
		ResultTtlNanos:       int64(r.ResultTTL),
		ExpiryBasisUnixNanos: unixNanos(r.ExpiryBasis),
		TraceParent:          r.TraceParent,
		Home:                 r.Home,
		Carried:              r.Carried,
	}
}

// unixNanos is t in Unix nanoseconds, 0 for the zero time (and back: fromUnixNanos).
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func fromPBRequest(p *rpcpb.SubmitRequest) *SubmitRequest {
	r := &SubmitRequest{
		Tenant:        p.GetTenant(),
		Key:           p.GetKey(),
		Fingerprint:   p.GetFingerprint(),
		WaitMillis:    p.GetWaitMillis(),
		ProposedJobID: p.GetProposedJobId(),
		ResultTTL:     time.Duration(p.GetResultTtlNanos()),
		ExpiryBasis:   fromUnixNanos(p.GetExpiryBasisUnixNanos()),
		TraceParent:   p.GetTraceParent(),
		Home:          p.GetHome(),
		Carried:       p.GetCarried(),
	}
	if j := p.GetJob(); j != nil {
		r.Job = api.JobRequest{Type: j.GetType(), Datacenters: j.GetDatacenters()}
		if len(j.GetPayload()) > 0 {
			r.Job.Payload = j.GetPayload()
		}
	}
	return r
}

func toPBResponse(r *SubmitResponse) *rpcpb.SubmitResponse {
	p := &rpcpb.SubmitResponse{Outcome: string(r.Outcome), Replayed: r.Replayed, JobId: r.JobID, Home: r.Home}
	p.RemainingNanos = int64(r.Remaining)
	if !r.ExpiresAt.IsZero() {
		p.ExpiresAtUnixNano = r.ExpiresAt.UnixNano()
	}
	if r.Rejection != nil {
		p.Rejection = &rpcpb.Rejection{Status: int32(r.Rejection.Status), Reason: r.Rejection.Reason, Detail: r.Rejection.Detail}
	}
	if r.Job != nil {
		p.Job = toPBJob(r.Job)
	}
	return p
}

func fromPBResponse(p *rpcpb.SubmitResponse) *SubmitResponse {
	r := &SubmitResponse{Outcome: Outcome(p.GetOutcome()), Replayed: p.GetReplayed(), JobID: p.GetJobId(), Home: p.GetHome()}
	r.Remaining = time.Duration(p.GetRemainingNanos())
	if ns := p.GetExpiresAtUnixNano(); ns != 0 {
		r.ExpiresAt = time.Unix(0, ns)
	}
	if rj := p.GetRejection(); rj != nil {
		r.Rejection = &Rejection{Status: int(rj.GetStatus()), Reason: rj.GetReason(), Detail: rj.GetDetail()}
	}
	if pj := p.GetJob(); pj != nil {
		r.Job = fromPBJob(pj)
	}
	return r
}

// toPBJob and fromPBJob carry an api.Job: every member, an empty payload,
// result or named datacenters as none, a nil Datacenters map apart from an
// empty one.
func toPBJob(j *api.Job) *rpcpb.Job {
	pj := &rpcpb.Job{
		JobId:            j.JobID,
		Type:             j.Type,
		Status:           j.Status,
		IdempotencyKey:   j.IdempotencyKey,
		CreatedAt:        j.CreatedAt,
		Payload:          j.Payload,
		DatacentersSet:   j.Datacenters != nil,
		State:            j.State,
		Attempts:         int64(j.Attempts),
		Result:           j.Result,
		Error:            j.Error,
		NamedDatacenters: j.NamedDatacenters,
	}
	if len(j.Datacenters) > 0 {
		pj.Datacenters = make(map[string]*rpcpb.DatacenterStatus, len(j.Datacenters))
		for dc, st := range j.Datacenters {
			pj.Datacenters[dc] = &rpcpb.DatacenterStatus{Status: st.Status, Reason: st.Reason}
		}
	}
	return pj
}

func fromPBJob(pj *rpcpb.Job) *api.Job {
	j := &api.Job{
		JobID:          pj.GetJobId(),
		Type:           pj.GetType(),
		Status:         pj.GetStatus(),
		IdempotencyKey: pj.GetIdempotencyKey(),
		CreatedAt:      pj.GetCreatedAt(),
		State:          pj.GetState(),
		Attempts:       int(pj.GetAttempts()),
		Error:          pj.GetError(),
	}
	if len(pj.GetPayload()) > 0 {
		j.Payload = pj.GetPayload()
	}
	if len(pj.GetResult()) > 0 {
		j.Result = pj.GetResult()
	}
	if len(pj.GetNamedDatacenters()) > 0 {
		j.NamedDatacenters = pj.GetNamedDatacenters()
	}
	if pj.GetDatacentersSet() {
		j.Datacenters = make(map[string]api.DatacenterStatus, len(pj.GetDatacenters()))
		for dc, st := range pj.GetDatacenters() {
			j.Datacenters[dc] = api.DatacenterStatus{Status: st.GetStatus(), Reason: st.GetReason()}
		}
	}
	return j
}

// toPBError turns a Service error into its wire form: an *Error keeps its code,
// message and leader hint; a context error (the caller's deadline or
// cancellation) is unavailable; anything else is internal, and reported
// through logf.
func toPBError(err error, logf func(err error)) *rpcpb.Error {
	var e *Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		e = Errorf(CodeUnavailable, "%v", err)
	default:
		logf(err)
		e = Errorf(CodeInternal, "%v", err)
	}
	return &rpcpb.Error{Code: string(e.Code), Message: e.Message, Leader: e.Leader}
}

func fromPBError(p *rpcpb.Error) *Error {
	return &Error{Code: Code(p.GetCode()), Message: p.GetMessage(), Leader: p.GetLeader()}
}

// approxSize estimates an item's encoded size, to bound a batch's bytes
// without encoding it twice.
func approxSize(r *SubmitRequest) int {
	return 64 + len(r.Tenant) + len(r.Key) + len(r.Fingerprint) + len(r.Job.Type) + len(r.Job.Payload) + len(r.ProposedJobID) + len(r.Home)
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
