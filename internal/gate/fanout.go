package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/tracing"
	"github.com/once-dev/once/pkg/api"
)

// dcResult is one datacenter's answer to a fanned-out submission.
type dcResult struct {
	dc   string
	resp *rpcpb.SubmitResponse
	err  error
}

// submitAll forwards req to the leader of every datacenter the job names,
// concurrently, with the same tenant, key, fingerprint, job ID, TTL and expiry
// basis, and combines their answers into one (see combine). A job naming only
// the gate's own datacenter is forwarded as it always was.
//
// combine renders a job from the first datacenter's answer alone, so the
// others are asked for theirs without the payload (OmitPayload): with a
// large payload, one copy crosses back instead of one per datacenter.
func (g *Gate) submitAll(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	dcs := req.GetJob().GetDatacenters()
	if len(dcs) == 1 && dcs[0] == g.cfg.Datacenter {
		req.TraceParent = tracing.Inject(ctx)
		return g.client.Submit(ctx, req)
	}
	if req.ExpiryBasisUnixNanos == 0 {
		req.ExpiryBasisUnixNanos = g.now().UnixNano()
	}
	lean := shallowCopy(req)
	lean.OmitPayload = true
	return combine(g.submitEach(ctx, dcs, func(i int, _ string) *rpcpb.SubmitRequest {
		if i == 0 {
			return req
		}
		return lean
	}, "gate.forward.datacenter"))
}

// submitEach sends to the leader of every datacenter of dcs the copy of the
// submission request gives for it (by its index and name), concurrently
// (submitTo), each in a span named span; the results are in the order of dcs.
// A panic in one of them is that datacenter's failure (recoverForward).
func (g *Gate) submitEach(ctx context.Context, dcs []string, request func(i int, dc string) *rpcpb.SubmitRequest, span string) []dcResult {
	results := make([]dcResult, len(dcs))
	var wg sync.WaitGroup
	for i, dc := range dcs {
		wg.Go(func() {
			defer g.recoverForward(dc, &results[i])
			results[i] = g.submitTo(ctx, dc, request(i, dc), span)
		})
	}
	wg.Wait()
	return results
}

// recoverForward, deferred by the goroutine forwarding to dc, makes a panic
// in it (a bug) that datacenter's result: net/http recovers only the
// handler's own goroutine, and a panic here would end the process and every
// request in flight. The panic is logged here with its stack, once;
// forwardError answers it 500 as the handler's recovery answers a panic of a
// single datacenter's forward, and the cache entry is resolved with it.
func (g *Gate) recoverForward(dc string, res *dcResult) {
	p := recover()
	if p == nil {
		return
	}
	g.log.Error("panic forwarding to a datacenter", logging.KeyDatacenter, dc,
		logging.KeyPanic, fmt.Sprint(p), logging.KeyStack, string(debug.Stack()))
	*res = dcResult{dc: dc, err: &forwardPanicError{value: p}}
}

// forwardPanicError is a panic recovered in a fan-out's goroutine
// (recoverForward), already logged.
type forwardPanicError struct{ value any }

func (e *forwardPanicError) Error() string { return fmt.Sprintf("forward panicked: %v", e.value) }

// forwardPanicked reports whether err is a datacenter's forwardPanicError.
func forwardPanicked(err error) bool {
	var p *forwardPanicError
	return errors.As(err, &p)
}

// combine makes one answer of every named datacenter's, in the order of the
// datacenters' names (results is sorted by it), so that every gate combining
// the same outcomes renders the same bytes:
//
//  1. a datacenter that failed (unreachable before the deadline, ledger full,
//     a refused request): that error, the first in name order; nothing is
//     final, nothing is cached, and a retry completes the rest;
//  2. a datacenter whose answer is not an outcome: key_reused before
//     key_expired before in_progress;
//  3. every datacenter committed: the job of the first datacenter, with the
//     datacenters member mapping every name to {"status":"committed"} (the
//     only job rendered: submitAll asks the others for theirs without the
//     payload);
//  4. some datacenter rejected: the first rejecting datacenter's rejection
//     (its status, 422 or 429, and reason), with a detail naming every
//     datacenter's outcome, and a Job carrying the per-datacenter map
//     (committed or rejected with reason) for the gate to render.
//
// The expiry is the earliest of the datacenters' (they are the same when
// every leader used the gate's expiry basis), and so is the lifetime left
// (RemainingNanos, by the leaders' clocks; none when a datacenter sent
// none), so that the gate caches the outcome no longer than the first entry
// lives, whatever its own clock says; Replayed is true only when every
// datacenter had the entry already. The answers are the combination's own:
// their jobs may be changed.
func combine(results []dcResult) (*rpcpb.SubmitResponse, error) {
	if err := firstFailure(results); err != nil {
		return nil, err
	}
	if resp := firstNonOutcome(results); resp != nil {
		return resp, nil
	}
	out := &rpcpb.SubmitResponse{Replayed: true}
	statuses := make(map[string]*rpcpb.DatacenterStatus, len(results))
	var base *rpcpb.Job
	var rejected *dcResult
	var parts []string
	allRemaining := true // every datacenter sent the lifetime left
	for i := range results {
		r := &results[i]
		switch r.resp.Outcome {
		case rpc.OutcomeCommitted:
			if r.resp.Job == nil {
				return nil, rpc.Errorf(rpc.CodeInternal, "datacenter %s answered committed without a job", r.dc)
			}
			if base == nil {
				base = r.resp.Job
			}
			statuses[r.dc] = &rpcpb.DatacenterStatus{Status: api.JobStatusCommitted}
			parts = append(parts, r.dc+": committed")
		case rpc.OutcomeRejected:
			if r.resp.Rejection == nil {
				return nil, rpc.Errorf(rpc.CodeInternal, "datacenter %s answered rejected without a rejection", r.dc)
			}
			if rejected == nil {
				rejected = r
			}
			statuses[r.dc] = &rpcpb.DatacenterStatus{Status: api.KeyStateRejected, Reason: r.resp.Rejection.Reason}
			parts = append(parts, fmt.Sprintf("%s: rejected (%s: %s)", r.dc, r.resp.Rejection.Reason, r.resp.Rejection.Detail))
		default:
			return nil, rpc.Errorf(rpc.CodeInternal, "datacenter %s answered an unknown outcome %q", r.dc, r.resp.Outcome)
		}
		out.Replayed = out.Replayed && r.resp.Replayed
		if exp := r.resp.ExpiresAtUnixNano; exp != 0 && (out.ExpiresAtUnixNano == 0 || exp < out.ExpiresAtUnixNano) {
			out.ExpiresAtUnixNano = exp
		}
		if left := r.resp.RemainingNanos; left <= 0 {
			allRemaining = false
		} else if out.RemainingNanos == 0 || left < out.RemainingNanos {
			out.RemainingNanos = left
		}
		out.JobId = cmp.Or(out.JobId, r.resp.JobId)
	}
	if !allRemaining {
		out.RemainingNanos = 0 // the gate judges the expiry by its clock
	}
	if rejected == nil {
		base.Datacenters, base.DatacentersSet = statuses, true
		out.Outcome, out.Job, out.JobId = rpc.OutcomeCommitted, base, base.JobId
		return out, nil
	}
	rej := rejected.resp.Rejection
	detail := rej.Detail
	if len(results) > 1 {
		detail = fmt.Sprintf("the job was rejected in datacenter %s; outcomes: %s", rejected.dc, strings.Join(parts, "; "))
	}
	out.Outcome = rpc.OutcomeRejected
	out.Rejection = &rpcpb.Rejection{Status: rej.Status, Reason: rej.Reason, Detail: detail}
	out.Job = &rpcpb.Job{JobId: out.JobId, Datacenters: statuses, DatacentersSet: true}
	return out, nil
}

// firstFailure is the failure of the first datacenter of results that
// failed, nil when every one answered.
func firstFailure(results []dcResult) error {
	for _, r := range results {
		if r.err != nil {
			return &datacenterError{dc: r.dc, err: r.err}
		}
	}
	return nil
}

// firstNonOutcome is the first answer of results that is not an outcome of
// the job, key_reused before key_expired before in_progress; nil when there
// is none. Every datacenter of results answered.
func firstNonOutcome(results []dcResult) *rpcpb.SubmitResponse {
	for _, o := range []string{rpc.OutcomeKeyReused, rpc.OutcomeKeyExpired, rpc.OutcomeInProgress} {
		for _, r := range results {
			if r.resp.Outcome == o {
				return r.resp
			}
		}
	}
	return nil
}

// rejectionProblem is the body of a job_rejected answer of a job naming
// several datacenters: the problem, with the job ID and every datacenter's
// outcome.
type rejectionProblem struct {
	api.Problem
	JobID       string                          `json:"job_id"`
	Datacenters map[string]api.DatacenterStatus `json:"datacenters"`
}

// rejectionBody renders a job_rejected problem; sr.Job, when combine set it
// for a job of several datacenters, adds job_id and datacenters.
func rejectionBody(status int, detail string, sr *rpcpb.SubmitResponse) []byte {
	p := problem(status, api.CodeJobRejected, detail)
	p.Reason = sr.Rejection.Reason
	if sr.Job == nil || len(sr.Job.Datacenters) < 2 {
		return problemJSON(p)
	}
	return problemJSON(rejectionProblem{Problem: p, JobID: sr.Job.JobId, Datacenters: apiJob(sr.Job).Datacenters})
}

// shallowCopy is a new request with req's members: the same values, the
// same job, payload and lists (which neither copy changes).
func shallowCopy(req *rpcpb.SubmitRequest) *rpcpb.SubmitRequest {
	src := req.ProtoReflect()
	dst := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	return dst.Interface().(*rpcpb.SubmitRequest)
}

// datacenterError is the failure of one named datacenter of a fanned-out
// submission; it wraps the rpc error (errors.Is sees through it).
type datacenterError struct {
	dc  string
	err error
}

func (e *datacenterError) Error() string { return "datacenter " + e.dc + ": " + e.err.Error() }
func (e *datacenterError) Unwrap() error { return e.err }
