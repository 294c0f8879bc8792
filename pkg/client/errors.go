package client

import (
	"fmt"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// Error is an answer of the gate that is not a success: the RFC 9457 problem
// it carried (docs/api.md, Errors). Match it with errors.Is against the
// sentinels below (one per problem code), or get the details with errors.As.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the problem's stable code; empty when the answer was not a
	// problem (a proxy's error page, for example).
	Code api.Code
	// Title and Detail are the problem's texts for humans.
	Title  string
	Detail string
	// Reason is set on job_rejected: the ledger's machine-readable reason.
	Reason string
	// RetryAfter is the Retry-After header, zero when absent.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("once: HTTP %d: %s", e.Status, e.Detail)
	}
	return fmt.Sprintf("once: %d %s: %s", e.Status, e.Code, e.Detail)
}

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	s, ok := target.(*sentinel)
	return ok && e.Code != "" && s.code == e.Code
}

// KeyError is the error of a call that drew its idempotency key itself
// (Submit; Cancel and Retry given no key): Key is the key every attempt
// used, and Err what ended them (it matches the sentinels through errors.Is).
// After an error that may have left the call done (an attempt timed out, a
// 503, the context ended), repeat it with Key (SubmitWithKey, or Cancel and
// Retry given Key): a new key is a new submission, and may make a second
// job.
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string { return fmt.Sprintf("%v (idempotency key %s)", e.Err, e.Key) }

// Unwrap returns Err.
func (e *KeyError) Unwrap() error { return e.Err }

type sentinel struct{ code api.Code }

func (s *sentinel) Error() string { return "once: " + string(s.code) }

// Sentinels, one per problem code of docs/api.md. errors.Is(err, ErrKeyReused)
// holds for an *Error whose Code is idempotency_key_reused, and so on.
var (
	ErrKeyMissing           = &sentinel{api.CodeIdempotencyKeyMissing}
	ErrKeyInvalid           = &sentinel{api.CodeIdempotencyKeyInvalid}
	ErrInvalidRequest       = &sentinel{api.CodeInvalidRequest}
	ErrUnauthorized         = &sentinel{api.CodeUnauthorized}
	ErrNotFound             = &sentinel{api.CodeNotFound}
	ErrJobNotFound          = &sentinel{api.CodeJobNotFound}
	ErrKeyNotFound          = &sentinel{api.CodeIdempotencyKeyNotFound}
	ErrMethodNotAllowed     = &sentinel{api.CodeMethodNotAllowed}
	ErrRequestInProgress    = &sentinel{api.CodeRequestInProgress}
	ErrKeyExpired           = &sentinel{api.CodeIdempotencyKeyExpired}
	ErrBodyTooLarge         = &sentinel{api.CodeBodyTooLarge}
	ErrUnsupportedMediaType = &sentinel{api.CodeUnsupportedMediaType}
	ErrKeyReused            = &sentinel{api.CodeIdempotencyKeyReused}
	// ErrKeyClaimed: another datacenter's concurrent first attempt of the
	// key won it (an omitted datacenters list in a federation); a retry
	// with the same key gets that job's answer, and Submit makes it.
	ErrKeyClaimed          = &sentinel{api.CodeIdempotencyKeyClaimed}
	ErrJobRejected         = &sentinel{api.CodeJobRejected}
	ErrInternal            = &sentinel{api.CodeInternal}
	ErrUnavailable         = &sentinel{api.CodeUnavailable}
	ErrTenantQuotaExceeded = &sentinel{api.CodeTenantQuotaExceeded}
	// ErrOutboxFull: the datacenter's outbox holds its maximum of
	// multi-datacenter submissions another datacenter has not confirmed
	// (503, retried by Submit); nothing was recorded.
	ErrOutboxFull       = &sentinel{api.CodeOutboxFull}
	ErrResponseTooLarge = &sentinel{api.CodeResponseTooLarge}
	// ErrLeaseLost: a worker call named a lease that is no longer the job's
	// current one; stop working on the job (Run does).
	ErrLeaseLost = &sentinel{api.CodeLeaseLost}
	// ErrBudgetExceeded: the ledger's byte budget (or the tenant's share)
	// cannot hold a completion's result or a failure's error; nothing was
	// recorded and the job is still the caller's (Run fails the attempt).
	ErrBudgetExceeded = &sentinel{api.CodeBudgetExceeded}
	// ErrJobStateConflict: a Cancel or Retry named a job whose state the
	// action does not apply to (a running or finished job cancelled, a job
	// that is not failed or dead retried); nothing changed.
	ErrJobStateConflict = &sentinel{api.CodeJobStateConflict}
)
