package api

import "encoding/json"

// Worker API bounds (docs/workers.md): what a lease request may ask for.
const (
	DefaultLeaseJobs    = 1
	MaxLeaseJobs        = 100
	DefaultLeaseSeconds = 30
	MaxLeaseSeconds     = 3600
	MaxWaitSeconds      = 60
	// MaxLeaseTypes bounds the types one lease request may name: the gate
	// refuses more (400), and the ledger's Lease command holds at most this
	// many.
	MaxLeaseTypes = 16
	// MaxJobErrorBytes bounds a failed attempt's error message.
	MaxJobErrorBytes = 4096
)

// CodeLeaseLost (409): the call named a lease that is no longer the job's
// current one (it expired, another worker holds the job, or the job is
// finished); nothing changed, and the worker must stop working on the job.
const CodeLeaseLost Code = "lease_lost"

// CodeJobStateConflict (409): a cancel or retry named a job whose state the
// action does not apply to (a running or finished job cancelled; a queued,
// running, succeeded or cancelled job retried). Nothing changed.
const CodeJobStateConflict Code = "job_state_conflict"

// CodeBudgetExceeded (507): a completion's result, or a failure's error,
// would bring the datacenter's ledger, or the tenant's share of it, over
// its byte budget. Nothing was recorded: the job is still running under
// the lease, which the worker may fail instead (or let expire).
const CodeBudgetExceeded Code = "budget_exceeded"

// LeaseRequest is the body of POST /v1/leases. Every member is optional.
type LeaseRequest struct {
	// Types limits the jobs handed out to these types; empty: every type.
	Types []string `json:"types,omitempty"`
	// MaxJobs is how many jobs at most (1..MaxLeaseJobs; 0: 1).
	MaxJobs int `json:"max_jobs,omitempty"`
	// LeaseSeconds is how long the worker holds each job without a
	// heartbeat (1..MaxLeaseSeconds; 0: the managers' MANAGER_JOB_LEASE_DEFAULT).
	LeaseSeconds int `json:"lease_seconds,omitempty"`
	// WaitSeconds holds the request until a job is queued, at most this long
	// (0..MaxWaitSeconds; 0: answer at once).
	WaitSeconds int `json:"wait_seconds,omitempty"`
	// Worker names the worker in the job's lease (shown in reads); empty: the
	// gate names it after the connection.
	Worker string `json:"worker,omitempty"`
}

// Lease is one job handed to a worker.
type Lease struct {
	LeaseID   string `json:"lease_id"`
	Job       Job    `json:"job"`
	Attempt   int    `json:"attempt"`
	ExpiresAt string `json:"expires_at"`
}

// LeaseList is the body of the answer to POST /v1/leases: empty when nothing
// was queued before the wait ended.
type LeaseList struct {
	Leases []Lease `json:"leases"`
}

// HeartbeatRequest is the body of POST /v1/jobs/{id}/heartbeat.
type HeartbeatRequest struct {
	LeaseID string `json:"lease_id"`
	// LeaseSeconds extends the lease to now + this (0: the managers' MANAGER_JOB_LEASE_DEFAULT).
	LeaseSeconds int `json:"lease_seconds,omitempty"`
}

// HeartbeatResponse is the answer to a heartbeat.
type HeartbeatResponse struct {
	LeaseID   string `json:"lease_id"`
	ExpiresAt string `json:"expires_at"`
}

// CompleteRequest is the body of POST /v1/jobs/{id}/complete.
type CompleteRequest struct {
	LeaseID string `json:"lease_id"`
	// Result is any JSON value, stored with the job (null when absent).
	Result json.RawMessage `json:"result,omitempty"`
}

// FailRequest is the body of POST /v1/jobs/{id}/fail.
type FailRequest struct {
	LeaseID string `json:"lease_id"`
	Error   string `json:"error"`
	// Retry false makes the job failed at once; true (or absent) queues it
	// again after the leader's backoff, until its last attempt.
	Retry *bool `json:"retry,omitempty"`
}

// MaxCompletions bounds the items of one POST /v1/completions.
const MaxCompletions = 100

// Completion is one item of POST /v1/completions: a complete call's body
// and the job it names.
type Completion struct {
	JobID   string `json:"job_id"`
	LeaseID string `json:"lease_id"`
	// Result is any JSON value, stored with the job (null when absent).
	Result json.RawMessage `json:"result,omitempty"`
}

// CompletionsRequest is the body of POST /v1/completions: 1..MaxCompletions
// items, each judged as its own POST /v1/jobs/{id}/complete.
type CompletionsRequest struct {
	Completions []Completion `json:"completions"`
}

// CompletionResult is one item's answer: the job (what the single call
// answers 200), or the problem the single call would answer.
type CompletionResult struct {
	Job   *Job     `json:"job,omitempty"`
	Error *Problem `json:"error,omitempty"`
}

// CompletionsResponse is the 200 answer to POST /v1/completions: one result
// per item, in the items' order.
type CompletionsResponse struct {
	Results []CompletionResult `json:"results"`
}
