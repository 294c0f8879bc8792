package cache

import (
	"context"
	"fmt"
	"time"
)

// Owner is the handle of the caller that got LookupMiss: it alone resolves the
// entry, once, with CompleteUntil or Abandon.
//
// Owner and Waiter are the entry itself under another type (no allocation per
// handle).
type Owner[V any] entry[V]

// Waiter is the handle of a caller that got LookupPending.
type Waiter[V any] entry[V]

// CompleteUntil records the deterministic outcome v, in state Committed or
// Rejected, until expires (an entry lives in [completed, expires)), and wakes
// every waiter with it. If the entry is still in the cache it becomes a
// completed entry there; if it left (evicted, swept, expired) the waiters are
// woken all the same and nothing is cached: the ledger remains the authority
// for a later retry. An expires at or before now caches nothing, as an
// outcome that does not fit the byte bound (Stats.NotCached): every waiter
// still gets v, and a later duplicate misses. So a caller whose outcome
// carries its own expiry (the ledger's) never keeps it past that expiry, not
// even for an instant. expires is kept as now plus the time left, on the
// cache's clock (its monotonic reading, for time.Now), so that an instant
// read from a wall clock alone stays put when the wall clock steps. A
// Config.Size that panics leaves nothing PENDING: the entry is resolved as an
// outcome that does not fit (waiters get v, nothing is cached), then the
// panic goes on in CompleteUntil.
//
// A second CompleteUntil or Abandon returns ErrResolved and changes nothing.
// An invalid state returns ErrInvalidState and changes nothing.
func (o *Owner[V]) CompleteUntil(v V, state State, expires time.Time) error {
	if state != Committed && state != Rejected {
		return fmt.Errorf("%w: state %v (want committed or rejected)", ErrInvalidState, state)
	}
	return (*entry[V])(o).resolve(v, state, expires)
}

// Abandon ends the entry after a transient failure (a 503): every waiter,
// current or racing, receives v with the state Abandoned and ErrAbandoned, and
// the entry leaves the cache so that nothing transient is cached and the next
// request forwards anew. A second CompleteUntil or Abandon returns ErrResolved.
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
//   - CompleteUntil: (v, Committed|Rejected, nil);
//   - Abandon: (v, Abandoned, ErrAbandoned), v being the owner's transient answer;
//   - ctx ended first: (zero, Pending, error matching ErrWaitTimeout and
//     context.Cause(ctx)).
//
// Wait may be called any number of times, by any number of goroutines; a
// waiter that gives up affects no other. The waiter is never lost: the entry
// carries a channel that is closed exactly once when it is resolved, so a waiter
// that arrives after the owner's CompleteUntil returns at once, and an entry that
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
