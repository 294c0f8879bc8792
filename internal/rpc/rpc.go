// Package rpc is the internal protocol between gates and managers: JSON over
// HTTP/1.1 with keep-alive connections, on the manager's RPC listener.
//
// Errors keep their identity across the wire: a manager answers an error as a
// JSON Error with a stable Code, and the client turns it back into an *Error that
// matches the sentinels below with errors.Is. Nothing is ever matched by text.
//
// Endpoints (all under /rpc/v1):
//
//	POST /rpc/v1/submit            SubmitRequest → SubmitResponse
//	GET  /rpc/v1/jobs/{id}?tenant= → api.Job
//	GET  /rpc/v1/jobs?tenant=&type=&status=&limit=&after= → ListJobsResponse
//	GET  /rpc/v1/keys?tenant=&key= → api.KeyInfo
//	GET  /rpc/v1/status            → Status
package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

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
	// CodeNotFound: the job or key does not exist (for this tenant).
	CodeNotFound Code = "not_found"
	// CodeInvalid: the request is malformed (a bug in the caller).
	CodeInvalid Code = "invalid"
	// CodeInternal: an unexpected failure.
	CodeInternal Code = "internal"
)

// Error is an RPC error. It is the JSON body of every non-200 answer.
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
	ErrNotLeader   = &Error{Code: CodeNotLeader, Message: "not the leader"}
	ErrUnavailable = &Error{Code: CodeUnavailable, Message: "unavailable"}
	ErrLedgerFull  = &Error{Code: CodeLedgerFull, Message: "ledger full"}
	ErrNotFound    = &Error{Code: CodeNotFound, Message: "not found"}
	ErrInvalid     = &Error{Code: CodeInvalid, Message: "invalid request"}
	ErrInternal    = &Error{Code: CodeInternal, Message: "internal error"}
)

// Errorf builds an *Error with a code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// httpStatus maps a code to the HTTP status of its answer.
func httpStatus(c Code) int {
	switch c {
	case CodeNotLeader:
		return http.StatusMisdirectedRequest
	case CodeUnavailable, CodeLedgerFull:
		return http.StatusServiceUnavailable
	case CodeNotFound:
		return http.StatusNotFound
	case CodeInvalid:
		return http.StatusBadRequest
	default:
		return http.StatusInternalServerError
	}
}

// Outcome is the result of a submission, as decided by the ledger.
type Outcome string

// Submission outcomes.
const (
	OutcomeCommitted  Outcome = "committed"   // the job exists; Job is set
	OutcomeRejected   Outcome = "rejected"    // admission refused it; Rejection is set
	OutcomeInProgress Outcome = "in_progress" // another submission of the key is PENDING and did not finish within WaitMillis
	OutcomeKeyReused  Outcome = "key_reused"  // the key exists with another fingerprint
	OutcomeKeyExpired Outcome = "key_expired" // the key expired and its sequence is at or below the client's watermark
)

// SubmitRequest asks the leader to submit a job under an idempotency key.
type SubmitRequest struct {
	Tenant string `json:"tenant"`
	// Key is the raw idempotency key, without sf-string quotes.
	Key string `json:"key"`
	// Fingerprint identifies the request (tenant, method, path, canonical body).
	Fingerprint string `json:"fingerprint"`
	// Job is the decoded, validated request body; Payload is canonical JSON.
	Job api.JobRequest `json:"job"`
	// WaitMillis is how long the manager may wait for the outcome of a PENDING
	// entry that another submission of the same key owns; 0 answers
	// OutcomeInProgress at once.
	WaitMillis int64 `json:"wait_millis"`
	// ProposedJobID, when set, must be the job ID derived from (Tenant, Key,
	// Fingerprint) by internal/jobid, which the manager uses for a new key
	// anyway (the same key gets the same job ID in every datacenter); another
	// value is refused as CodeInvalid.
	ProposedJobID string `json:"proposed_job_id,omitempty"`
	// ResultTTL, when positive, is the COMMITTED or REJECTED lifetime of this
	// key instead of the manager's configured default; it is fixed by the first
	// admission and retries cannot change it.
	ResultTTL time.Duration `json:"result_ttl,omitempty"`
	// ExpiryBasis, when set, is the instant the entry's COMMITTED or REJECTED
	// TTL counts from, stamped by the gate; a gate sends the same basis to
	// every datacenter of a submission so that they all expire it at the
	// same instant. A leader whose clock is too far from it uses its own.
	ExpiryBasis time.Time `json:"expiry_basis,omitzero"`
}

// Rejection is why admission refused a job.
type Rejection struct {
	Status int    `json:"status"` // 422 (validation) or 429 (capacity)
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// SubmitResponse is the ledger's answer to a submission.
type SubmitResponse struct {
	Outcome Outcome `json:"outcome"`
	// Replayed is true when the entry existed before this request.
	Replayed bool `json:"replayed"`
	// JobID is the job ID the key is bound to (also for rejected keys: the ID
	// that was reserved).
	JobID string `json:"job_id,omitempty"`
	// Job is set when Outcome is OutcomeCommitted.
	Job *api.Job `json:"job,omitempty"`
	// Rejection is set when Outcome is OutcomeRejected.
	Rejection *Rejection `json:"rejection,omitempty"`
	// ExpiresAt is when the key's entry expires (zero when there is no entry).
	ExpiresAt time.Time `json:"expires_at"`
}

// ListJobsRequest selects a tenant's jobs, oldest first.
type ListJobsRequest struct {
	Tenant string `json:"tenant"`
	Type   string `json:"type,omitempty"`
	Status string `json:"status,omitempty"`
	Limit  int    `json:"limit"`
	After  string `json:"after,omitempty"` // an opaque cursor from a previous Next
}

// ListJobsResponse is a page of jobs; Next is empty on the last page.
type ListJobsResponse struct {
	Jobs []api.Job `json:"jobs"`
	Next string    `json:"next,omitempty"`
}

// Status describes a manager, for readiness checks and operators.
type Status struct {
	NodeID       string `json:"node_id"`
	Datacenter   string `json:"datacenter"`
	RaftState    string `json:"raft_state"`
	IsLeader     bool   `json:"is_leader"`
	LeaderID     string `json:"leader_id,omitempty"`
	LeaderRPC    string `json:"leader_rpc,omitempty"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	LastIndex    uint64 `json:"last_index"`
	// Voters are the server IDs of the Raft configuration's voters, as this
	// node knows it.
	Voters []string `json:"voters"`
	// LogBatches counts the Raft log writes (one fsync each) since start.
	LogBatches uint64 `json:"log_batches"`
	// LedgerEntries and Jobs count the ledger's live entries and jobs.
	LedgerEntries int `json:"ledger_entries"`
	Jobs          int `json:"jobs"`
}

// Service is what a manager offers gates. Implementations return *Error values
// (or errors wrapping them) so the code survives the wire.
type Service interface {
	Submit(ctx context.Context, req *SubmitRequest) (*SubmitResponse, error)
	GetJob(ctx context.Context, tenant, id string) (*api.Job, error)
	ListJobs(ctx context.Context, req *ListJobsRequest) (*ListJobsResponse, error)
	GetKey(ctx context.Context, tenant, key string) (*api.KeyInfo, error)
	Status(ctx context.Context) (*Status, error)
}

// decodeError reads an Error body; a body that is not one becomes CodeInternal
// (or CodeUnavailable for 502/503/504 answers from something in between).
func decodeError(status int, body []byte) *Error {
	var e Error
	if err := json.Unmarshal(body, &e); err == nil && e.Code != "" {
		return &e
	}
	switch status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return Errorf(CodeUnavailable, "HTTP %d from manager", status)
	}
	return Errorf(CodeInternal, "HTTP %d from manager: %.200s", status, body)
}
