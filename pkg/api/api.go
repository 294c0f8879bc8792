// Package api holds the wire types of the gate's public HTTP API (v1): the job
// request and job bodies, the RFC 9457 problem body and its stable codes, and the
// headers the contract names. It depends on the standard library and
// internal/jsonescape only, so any Go program may import it. docs/api.md describes the contract these types carry.
package api

import (
	"encoding/json"
	"time"
)

// Headers and media types named by the contract.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderReplayed       = "Idempotent-Replayed"
	HeaderRetryAfter     = "Retry-After"
	HeaderLocation       = "Location"
	HeaderAuthorization  = "Authorization"
	// HeaderXIdempotencyKey is accepted as another name for Idempotency-Key.
	HeaderXIdempotencyKey = "X-Idempotency-Key"
	// HeaderIdempotencyTTL (request, optional) is the lifetime in seconds of
	// the key's stored outcome, fixed by the first admission.
	HeaderIdempotencyTTL = "Idempotency-TTL"
	// HeaderIdempotencyExpiresAt (response) is when the key's entry expires, on
	// every answer that carries a stored outcome.
	HeaderIdempotencyExpiresAt = "Idempotency-Expires-At"

	ContentTypeJSON    = "application/json"
	ContentTypeProblem = "application/problem+json"

	// DefaultTenant is the tenant of every request when the gate runs with no
	// token file.
	DefaultTenant = "default"

	// MaxListLimit bounds the limit parameter of GET /v1/jobs.
	MaxListLimit = 1000
	// DefaultListLimit is used when GET /v1/jobs has no limit parameter.
	DefaultListLimit = 100
)

// Code is the stable, machine-readable identity of an error. Clients match on it;
// its text never changes once released.
type Code string

// The error codes of API v1.
const (
	CodeIdempotencyKeyMissing  Code = "idempotency_key_missing"
	CodeIdempotencyKeyInvalid  Code = "idempotency_key_invalid"
	CodeInvalidRequest         Code = "invalid_request"
	CodeBodyTooLarge           Code = "body_too_large"
	CodeUnsupportedMediaType   Code = "unsupported_media_type"
	CodeJobRejected            Code = "job_rejected"
	CodeRequestInProgress      Code = "request_in_progress"
	CodeIdempotencyKeyReused   Code = "idempotency_key_reused"
	CodeIdempotencyKeyExpired  Code = "idempotency_key_expired"
	CodeIdempotencyKeyClaimed  Code = "idempotency_key_claimed" // 422: an omitted datacenters list whose key another datacenter's concurrent first attempt won
	CodeUnavailable            Code = "unavailable"
	CodeJobNotFound            Code = "job_not_found"
	CodeIdempotencyKeyNotFound Code = "idempotency_key_not_found"
	CodeUnauthorized           Code = "unauthorized"
	CodeNotFound               Code = "not_found"
	CodeMethodNotAllowed       Code = "method_not_allowed"
	CodeInternal               Code = "internal"
	// CodeTenantQuotaExceeded (429, with Retry-After): the tenant holds its
	// share of the datacenter's ledger; nothing was recorded, retry the key later.
	CodeTenantQuotaExceeded Code = "tenant_quota_exceeded"
	// CodeResponseTooLarge (500): a single job is larger than a read answer can
	// carry (it cannot happen with payloads within GATE_MAX_BODY_BYTES).
	CodeResponseTooLarge Code = "response_too_large"
	// CodeOutboxFull (503, with Retry-After): the datacenter's outbox holds
	// its maximum of multi-datacenter submissions that another datacenter
	// has not confirmed yet (one is unreachable); nothing was recorded, retry
	// the key later.
	CodeOutboxFull Code = "outbox_full"
)

// ProblemTypeBase prefixes a code to form a problem's type URI.
const ProblemTypeBase = "https://once.dev/problems/"

// Problem is an RFC 9457 problem details body with once's extension members.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   Code   `json:"code"`
	// Reason is set on job_rejected problems: why admission refused the job.
	Reason string `json:"reason,omitempty"`
}

// Error makes a Problem usable as an error by clients.
func (p *Problem) Error() string { return string(p.Code) + ": " + p.Detail }

// JobRequest is the body of POST /v1/jobs.
type JobRequest struct {
	Type        string          `json:"type"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Datacenters []string        `json:"datacenters,omitempty"`
}

// Job status values.
const (
	JobStatusCommitted = "committed"
	// The states of a job in the worker lifecycle (internal/ledger's
	// JobState): queued → running → succeeded | failed | dead, and
	// queued → cancelled (POST /v1/jobs/{id}/cancel); a retry
	// (POST /v1/jobs/{id}/retry) takes failed or dead back to queued.
	JobStatusQueued    = "queued"
	JobStatusRunning   = "running"
	JobStatusSucceeded = "succeeded"
	JobStatusFailed    = "failed"
	JobStatusDead      = "dead"
	JobStatusCancelled = "cancelled"
)

// Idempotency entry states as the API shows them.
const (
	KeyStatePending   = "pending"
	KeyStateCommitted = "committed"
	KeyStateRejected  = "rejected"
	// KeyStateClaimed: the key is held for a job that runs in another
	// datacenter (KeyInfo.Home): an omitted datacenters list in a federation.
	// Only a read naming the datacenter (?datacenter=) shows it; a read
	// naming none is answered by the home.
	KeyStateClaimed = "claimed"
)

// Job is the job body returned by POST /v1/jobs (201 and its replays) and by the
// read endpoints. Encoding a Job with encoding/json is deterministic, so every
// gate renders the same job as the same bytes.
type Job struct {
	JobID          string                      `json:"job_id"`
	Type           string                      `json:"type"`
	Status         string                      `json:"status"`
	IdempotencyKey string                      `json:"idempotency_key"`
	CreatedAt      string                      `json:"created_at"`
	Datacenters    map[string]DatacenterStatus `json:"datacenters"`
	Payload        json.RawMessage             `json:"payload"`
	// State is the job's place in the worker lifecycle (queued, running,
	// succeeded, failed, dead, cancelled; docs/workers.md). Absent in the admission
	// answer (POST /v1/jobs and its replays), whose bytes never change.
	State string `json:"state,omitempty"`
	// Attempts counts the leases the job has had.
	Attempts int `json:"attempts,omitempty"`
	// Result is what the worker reported when the job succeeded.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the last failed attempt's message (failed, dead, or queued
	// again after a failure).
	Error string `json:"error,omitempty"`
	// NamedDatacenters is, for a job whose submission named more than one
	// datacenter, the set it named (sorted): the datacenters that each hold
	// a copy of the job, each readable with ?datacenter=NAME. Absent for a
	// job of one datacenter, and in the admission answer (whose Datacenters
	// map names them all already).
	NamedDatacenters []string `json:"named_datacenters,omitempty"`
}

// Admission returns the job as its admission answer (POST /v1/jobs) shows
// it: without the worker lifecycle's members and the named datacenters,
// which reads add.
func (j Job) Admission() Job {
	j.State, j.Attempts, j.Result, j.Error, j.NamedDatacenters = "", 0, nil, "", nil
	return j
}

// DatacenterStatus is a job's outcome in one datacenter.
type DatacenterStatus struct {
	Status string `json:"status"`
	// Reason is set when Status is "rejected": the datacenter's reason.
	Reason string `json:"reason,omitempty"`
}

// JobList is the body of GET /v1/jobs.
type JobList struct {
	Jobs []Job   `json:"jobs"`
	Next *string `json:"next"`
}

// KeyInfo is the body of GET /v1/idempotency-keys/{key}. ClientID, Sequence and
// Nonce are present for structured keys only. JobID is null for a rejected key.
type KeyInfo struct {
	Key       string  `json:"key"`
	State     string  `json:"state"`
	JobID     *string `json:"job_id"`
	ExpiresAt string  `json:"expires_at"`
	ClientID  string  `json:"client_id,omitempty"`
	Sequence  *uint64 `json:"sequence,omitempty"`
	Nonce     string  `json:"nonce,omitempty"`
	// Home is the datacenter that runs the job of a claimed key.
	Home string `json:"home,omitempty"`
}

// TimeFormat is the layout of every timestamp in the API: RFC 3339 in UTC with
// millisecond precision, e.g. 2026-11-21T12:00:00.123Z.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTime renders t in the API's timestamp layout.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }
