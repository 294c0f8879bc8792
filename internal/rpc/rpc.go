// Package rpc is the internal protocol between gates, oncectl and managers,
// on the manager's RPC listener (docs/rpc.md): the generated gRPC service
// rpcpb.Manager,
//
//   - submissions on a bidirectional stream (Submit), many per message, each
//     answered as soon as it resolves (stream.go for the gate's side,
//     streamserver.go for the manager's);
//   - the worker calls, the job actions, the reads and the federation view as
//     unary methods (workers.go, actions.go, reads.go, federation.go; call.go
//     for what they share);
//
// beside it the generated service rpcpb.Operator, oncectl's, behind the
// operator credential (operator.go, operatorclient.go, operatorauth.go).
// The same port answers HTTP/1.1 for what curl and Prometheus read: the
// status as JSON (status.go) and the routes the daemon adds (/metrics).
// Server tells the two apart by a connection's first bytes (cmux).
//
// Errors keep their identity across the wire: a manager answers an error with a
// stable Code (its rpcpb.Error in a stream's result or a
// unary call's status details), and the client turns it back into an *Error
// that matches the sentinels below with errors.Is. Nothing is ever matched by
// text.
package rpc

import (
	"context"
	"fmt"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// Code identifies an RPC error on the wire.
type Code string

// RPC error codes.
const (
	// CodeNotLeader: this manager is not the leader; Error.Leader names the
	// leader's RPC address when known. Safe to retry there.
	CodeNotLeader Code = "not_leader"
	// CodeUnavailable: no leader, leadership lost mid-request, shutting down, or a
	// timeout inside the cluster. Safe to retry: the ledger deduplicates.
	CodeUnavailable Code = "unavailable"
	// CodeLedgerFull: the ledger holds its maximum of live entries and refuses new
	// reservations. Nothing was recorded.
	CodeLedgerFull Code = "ledger_full"
	// CodeWatermarksFull: the ledger's table of structured-key watermarks is full
	// and the key's client has none; nothing was recorded (no watermark is ever
	// evicted to make room). Retry later: watermarks age out by their TTL.
	CodeWatermarksFull Code = "watermarks_full"
	// CodeOutboxFull: the datacenter's outbox holds its maximum of
	// multi-datacenter submissions not yet confirmed by every datacenter they
	// name (MANAGER_OUTBOX_MAX_ENTRIES); nothing was recorded. Retry later.
	CodeOutboxFull Code = "outbox_full"
	// CodeTenantQuota: the tenant holds its share of the ledger (watermarks or
	// bytes) and the reservation was refused; nothing was recorded.
	CodeTenantQuota Code = "tenant_quota"
	// CodeTooLarge: an answer would exceed MaxResponseBytes (a single job too
	// large for a page), or one did: the client refuses to decode a cut answer.
	CodeTooLarge Code = "too_large"
	// CodeNotFound: the job or key does not exist (for this tenant).
	CodeNotFound Code = "not_found"
	// CodeInvalid: the request is malformed (a bug in the caller).
	CodeInvalid Code = "invalid"
	// CodeInternal: an unexpected failure.
	CodeInternal Code = "internal"
	// CodeUnauthenticated: the caller did not present the cluster secret the
	// manager requires (secret.go).
	CodeUnauthenticated Code = "unauthenticated"
	// CodeForbidden: the caller is authenticated but lacks the role the
	// call needs: an Operator method called without an operator credential
	// (operatorauth.go).
	CodeForbidden Code = "forbidden"
	// CodeLeaseLost: a worker's call named a job lease that is not the job's
	// current one (it expired, was taken over, or the job finished); nothing
	// changed. The worker must stop working on the job.
	CodeLeaseLost Code = "lease_lost"
	// CodeRequestReused: a lease named an idempotency key the leader keeps
	// the answer of another request for; nothing was leased.
	CodeRequestReused Code = "request_reused"
	// CodeBudgetExceeded: a completion's result (or a failure's error) would
	// bring the ledger's bytes, or its tenant's share, over its budget
	// (IDEMPOTENCY_LEDGER_MAX_BYTES, IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES);
	// nothing was recorded and the job is still running under its lease.
	CodeBudgetExceeded Code = "budget_exceeded"
	// CodeConflict: a tenant's action on a job (cancel, retry) does not apply
	// to the job's state (a running job cancelled, a queued one retried);
	// nothing changed.
	CodeConflict Code = "conflict"
)

// Error is an RPC error (also the JSON body of an HTTP/1.1 refusal).
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Leader is the leader's RPC address, on CodeNotLeader, when known.
	Leader string `json:"leader,omitempty"`
}

func (e *Error) Error() string {
	if e.Leader != "" {
		return fmt.Sprintf("rpc %s: %s (leader %s)", e.Code, e.Message, e.Leader)
	}
	return fmt.Sprintf("rpc %s: %s", e.Code, e.Message)
}

// Is matches errors by Code, so errors.Is(err, ErrNotLeader) works for any
// *Error with that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels for errors.Is.
var (
	ErrNotLeader      = &Error{Code: CodeNotLeader, Message: "not the leader"}
	ErrUnavailable    = &Error{Code: CodeUnavailable, Message: "unavailable"}
	ErrLedgerFull     = &Error{Code: CodeLedgerFull, Message: "ledger full"}
	ErrNotFound       = &Error{Code: CodeNotFound, Message: "not found"}
	ErrInvalid        = &Error{Code: CodeInvalid, Message: "invalid request"}
	ErrInternal       = &Error{Code: CodeInternal, Message: "internal error"}
	ErrWatermarksFull = &Error{Code: CodeWatermarksFull, Message: "watermark table full"}
	ErrOutboxFull     = &Error{Code: CodeOutboxFull, Message: "outbox full"}
	ErrTenantQuota    = &Error{Code: CodeTenantQuota, Message: "tenant over its share"}
	ErrTooLarge       = &Error{Code: CodeTooLarge, Message: "answer too large"}
	ErrLeaseLost      = &Error{Code: CodeLeaseLost, Message: "lease lost"}
	ErrRequestReused  = &Error{Code: CodeRequestReused, Message: "idempotency key used with another request"}
	ErrBudgetExceeded = &Error{Code: CodeBudgetExceeded, Message: "the ledger's byte budget cannot hold it"}
	ErrForbidden      = &Error{Code: CodeForbidden, Message: "an operator credential is required"}
	ErrConflict       = &Error{Code: CodeConflict, Message: "the action does not apply to the job's state"}
)

// Errorf builds an *Error with a code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Submission outcomes: the values of rpcpb.SubmitResponse.Outcome.
const (
	OutcomeCommitted  = "committed"   // the job exists; Job is set
	OutcomeRejected   = "rejected"    // admission refused it; Rejection is set
	OutcomeInProgress = "in_progress" // another submission of the key is being admitted and did not finish within wait_millis
	OutcomeKeyReused  = "key_reused"  // the key exists with another fingerprint
	OutcomeKeyExpired = "key_expired" // the key expired and its sequence committed, or is below the client's watermark window
	// OutcomeClaimed: the key is held here by a claim for a job that runs in
	// another datacenter, the response's Home (an omitted datacenters list
	// in a federation; docs/multidc.md). JobId is the claimed job's.
	OutcomeClaimed = "claimed"
)

// MaxResponseBytes bounds an RPC answer the client reads; a longer one is
// refused with CodeTooLarge, never decoded cut. ListPageBytes is the byte
// budget of a list page and LeaseAnswerBytes that of a lease's answer (by
// ledger.ListJobBytes: payload, result, error and the rest of the job),
// well under it, so a page or a lease always fits: either holds at least
// one job, and a job holds at most MaxBodyBytes of payload and as much of
// result, under MaxJobBytes. A single job over MaxJobBytes (none the gates
// admit) cannot be listed (CodeTooLarge).
const (
	MaxResponseBytes = 32 << 20
	ListPageBytes    = 4 << 20
	LeaseAnswerBytes = 8 << 20
	MaxJobBytes      = MaxResponseBytes - 1<<20
)

// MaxBodyBytes is the largest request body a gate accepts (the bound of
// GATE_MAX_BODY_BYTES): a job's payload, or a completion's result, is at
// most this long. MaxMemberBytes bounds the rest of a request at the
// manager (its tenant, IDs, key, fingerprint, names), and
// MaxWorkerRequestBytes a worker call's request: its body and its other
// members.
const (
	MaxBodyBytes          = 8 << 20
	MaxMemberBytes        = 64 << 10
	MaxWorkerRequestBytes = MaxBodyBytes + MaxMemberBytes
)

// A manager's status, for readiness checks and operators, is one type with
// the public view of GET /v1/cluster (pkg/api): the gate passes it through.
type (
	Status         = api.ManagerStatus
	QueueCounts    = api.QueueCounts
	Budgets        = api.Budgets
	ConfigMismatch = api.ConfigMismatch
	ServerHealth   = api.ServerHealth
	RefusedServer  = api.RefusedServer
)

// Service is what a manager offers gates, in the messages of the wire
// (rpcpb; manager.proto says what each method answers). Implementations
// return *Error values (or errors wrapping them) so the code survives the
// wire.
type Service interface {
	Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error)
	GetJob(ctx context.Context, tenant, id string) (*rpcpb.Job, error)
	ListJobs(ctx context.Context, req *rpcpb.ListJobsRequest) (*rpcpb.ListJobsResponse, error)
	GetKey(ctx context.Context, tenant, key string) (*rpcpb.KeyInfo, error)
	Status(ctx context.Context) (*Status, error)
}
