package cache

import (
	"context"
	"fmt"
	"time"
)

// Owner is the handle of the caller that got LookupMiss: it alone resolves the
// entry, once, with Complete or Abandon.
//
// Owner and Waiter are the entry itself under another type (no allocation per
// handle).
type Owner[V any] entry[V]

// Waiter is the handle of a caller that got LookupPending.
type Waiter[V any] entry[V]

// Complete records the deterministic outcome v, in state Committed or Rejected,
// for ttl (0 means the state's configured TTL, counted from now), and wakes every
// waiter with it. If the entry is still in the cache it becomes a completed
// entry there; if it left (evicted, swept, expired) the waiters are
// woken all the same and nothing is cached: the ledger remains the authority for
// a later retry.
//
// A second Complete or Abandon returns ErrResolved and changes nothing. An
// invalid state or a negative ttl returns ErrInvalidState and changes nothing.
func (o *Owner[V]) Complete(v V, state State, ttl time.Duration) error {
	if state != Committed && state != Rejected {
		return fmt.Errorf("%w: state %v (want committed or rejected)", ErrInvalidState, state)
	}
	if ttl < 0 {
		return fmt.Errorf("%w: negative ttl %v", ErrInvalidState, ttl)
	}
	e := (*entry[V])(o)
	switch {
	case ttl > 0:
	case state == Rejected:
		ttl = e.s.c.cfg.RejectedTTL
	default:
		ttl = e.s.c.cfg.CommittedTTL
	}
	return e.resolve(v, state, e.s.c.now().Add(ttl))
}

// CompleteUntil is Complete with an absolute expiry: the outcome is cached
// until expires (an entry lives in [completed, expires)). An expires at or
// before now caches nothing, as an outcome that does not fit the byte bound
// (Stats.NotCached): every waiter still gets v, and a later duplicate misses.
// It lets a caller whose outcome carries its own expiry (the ledger's) never
// keep it past that expiry, not even for an instant.
//
// A second Complete or Abandon returns ErrResolved and changes nothing. An
// invalid state returns ErrInvalidState and changes nothing.
func (o *Owner[V]) CompleteUntil(v V, state State, expires time.Time) error {
	if state != Committed && state != Rejected {
		return fmt.Errorf("%w: state %v (want committed or rejected)", ErrInvalidState, state)
	}
	return (*entry[V])(o).resolve(v, state, expires)
}

// Abandon ends the entry after a transient failure (a 503): every waiter,
// current or racing, receives v with the state Abandoned and ErrAbandoned, and
// the entry leaves the cache so that nothing transient is cached and the next
// request forwards anew. A second Complete or Abandon returns ErrResolved.
func (o *Owner[V]) Abandon(v V) error {
	e := (*entry[V])(o)
	err := e.resolve(v, Abandoned, time.Time{})
	if err == nil {
		e.s.stats.abandons.Add(1)
	}
	return err
}

// Wait returns the owner's outcome once the entry is resolved, or when ctx ends,
// whichever comes first; if both have happened the outcome wins.
//
//   - Complete: (v, Committed|Rejected, nil);
//   - Abandon: (v, Abandoned, ErrAbandoned), v being the owner's transient answer;
//   - ctx ended first: (zero, Pending, error matching ErrWaitTimeout and
//     context.Cause(ctx)).
//
// Wait may be called any number of times, by any number of goroutines; a
// waiter that gives up affects no other. The waiter is never lost: the entry
// carries a channel that is closed exactly once when it is resolved, so a waiter
// that arrives after the owner's Complete returns at once, and an entry that
// left the cache still wakes its waiters.
func (w *Waiter[V]) Wait(ctx context.Context) (V, State, error) {
	e := (*entry[V])(w)
	select {
	case <-e.done:
	case <-ctx.Done():
		select {
		case <-e.done: // both ready: the outcome wins
		default:
			e.s.stats.waitTimeouts.Add(1)
			var zero V
			return zero, Pending, fmt.Errorf("%w: %w", ErrWaitTimeout, context.Cause(ctx))
		}
	}
	// done is closed: state and value are final (written before the close).
	if e.state == Abandoned {
		return e.value, Abandoned, ErrAbandoned
	}
	return e.value, e.state, nil
}
