package cache

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; never by their text.
var (
	// ErrInvalidConfig is matched by every error New returns (a *ConfigError).
	ErrInvalidConfig = errors.New("cache: invalid config")

	// ErrWaitTimeout is returned by Waiter.Wait when its context ends before the
	// owner resolves the entry. The error also wraps context.Cause(ctx), so
	// errors.Is(err, context.DeadlineExceeded) tells a timeout from a cancelled
	// client (context.Canceled). The gate answers 409 request_in_progress.
	ErrWaitTimeout = errors.New("cache: wait for pending entry ended before its outcome")

	// ErrAbandoned is returned by Waiter.Wait, together with the owner's value
	// and the state Abandoned, when the owner abandoned the entry after a
	// transient failure (a 503). Nothing was cached; a retry forwards anew.
	ErrAbandoned = errors.New("cache: owner abandoned the entry after a transient failure")

	// ErrResolved is returned by Owner.CompleteUntil and Owner.Abandon when the entry
	// was already completed or abandoned. The call changed nothing.
	ErrResolved = errors.New("cache: entry already resolved")

	// ErrInvalidState is returned by Owner.CompleteUntil for a state other
	// than Committed or Rejected. The call changed nothing.
	ErrInvalidState = errors.New("cache: invalid completion")
)

// ConfigError is a Config field that failed validation. It matches
// ErrInvalidConfig with errors.Is.
type ConfigError struct {
	Field string // the Config field, e.g. "MaxEntries"
	Value any    // the value given
	Want  string // what is accepted, e.g. "at least 1"
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("cache: invalid config: %s=%v: want %s", e.Field, e.Value, e.Want)
}

// Unwrap lets errors.Is match ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }
