package cache

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// ended is a context that has already ended: Wait on it returns the outcome
// if the entry is resolved, else ErrWaitTimeout, without blocking.
func ended() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

var errSizeBug = errors.New("size bug")

// A Size that panics in the owner's CompleteUntil must not leave the entry
// PENDING: its waiters get the outcome (not cached), the key is free for the
// next request, and the panic reaches the owner. (Fails on the old code: the
// panic left the entry PENDING, its waiters waiting until their timeout.)
func TestSizePanicStillResolvesTheEntry(t *testing.T) {
	c, _ := newCache(t, func(cfg *Config) {
		cfg.Shards, cfg.MaxBytes = 1, 100
		cfg.Size = func(v any) int64 {
			if v.(*response).body == nil {
				panic(errSizeBug)
			}
			return int64(len(v.(*response).body))
		}
	})
	owner := mustBegin(t, c, "k", "fp", LookupMiss).Owner
	w := mustBegin(t, c, "k", "fp", LookupPending).Waiter
	v := &response{status: 201}
	func() {
		defer func() {
			if p := recover(); p != errSizeBug {
				t.Errorf("CompleteUntil panicked with %v, want Size's panic", p)
			}
		}()
		_ = completeIn(owner, v, Committed, 0)
	}()
	if got, st, err := w.Wait(ended()); err != nil || got != v || st != Committed {
		t.Fatalf("waiter: %v %v %v; want the outcome at once", got, st, err)
	}
	if err := completeIn(owner, v, Committed, 0); !errors.Is(err, ErrResolved) {
		t.Fatalf("second CompleteUntil: %v", err)
	}
	mustBegin(t, c, "k", "fp", LookupMiss) // neither PENDING nor cached
	if st := c.Stats(); st.NotCached != 1 || c.bytes.Load() != 0 {
		t.Fatalf("stats %+v, bytes %d", st, c.bytes.Load())
	}
}

// Guard (the code is right): the bound full of PENDING entries does not
// refuse a new key; it evicts the longest-pending entry, whose owner and
// waiters keep it and get its outcome, while nothing of the evicted key's
// outcome is cached and a later duplicate of it becomes a new owner (one more
// forward; the ledger dedups). A completed entry always goes before a
// PENDING one, whatever their ages.
func TestFullOfPendingEvictsTheOldestAndKeepsItsWaiters(t *testing.T) {
	c, _ := newCache(t, func(cfg *Config) { cfg.MaxEntries, cfg.Shards = 2, 1 })
	ctx := guard(t)
	p1 := mustBegin(t, c, "p1", "fp", LookupMiss).Owner
	w1 := waitAsync(ctx, mustBegin(t, c, "p1", "fp", LookupPending).Waiter)
	p2 := mustBegin(t, c, "p2", "fp", LookupMiss).Owner
	p3 := mustBegin(t, c, "p3", "fp", LookupMiss).Owner // evicts p1
	if st := c.Stats(); st.PendingEvictions != 1 || c.Len() != 2 {
		t.Fatalf("stats %+v, len %d", st, c.Len())
	}
	p1again := mustBegin(t, c, "p1", "fp", LookupMiss).Owner // evicts p2
	v1 := &response{status: 201, key: "p1"}
	mustComplete(t, p1, v1, Committed, 0)
	if r := <-w1; r.err != nil || r.v != v1 {
		t.Fatalf("evicted entry's waiter: %+v", r)
	}
	// The late outcome did not displace the new owner's entry.
	mustBegin(t, c, "p1", "fp", LookupPending)
	mustComplete(t, p1again, &response{status: 201, key: "p1"}, Committed, 0)
	// p1 (completed, most recent) and p3 (PENDING, older): the completed
	// one goes first.
	mustBegin(t, c, "p4", "fp", LookupMiss)
	mustBegin(t, c, "p3", "fp", LookupPending)
	mustBegin(t, c, "p1", "fp", LookupMiss)
	if err := completeIn(p2, &response{}, Committed, 0); err != nil {
		t.Fatal(err)
	}
	if err := completeIn(p3, &response{}, Committed, 0); err != nil {
		t.Fatal(err)
	}
}

// Guard: a waiter whose client leaves gets ErrWaitTimeout wrapping
// context.Canceled and changes nothing: the owner's outcome is cached and a
// later retry is a hit. An owner that gives up (Abandon) wakes the remaining
// waiters with its transient answer, and the next request takes the key over.
func TestWaiterLeavingAndOwnerAbandoning(t *testing.T) {
	c, _ := newCache(t, nil)
	owner := mustBegin(t, c, "k", "fp", LookupMiss).Owner
	gone, leave := context.WithCancel(context.Background())
	left := waitAsync(gone, mustBegin(t, c, "k", "fp", LookupPending).Waiter)
	stays := waitAsync(guard(t), mustBegin(t, c, "k", "fp", LookupPending).Waiter)
	leave()
	if r := <-left; !errors.Is(r.err, ErrWaitTimeout) || !errors.Is(r.err, context.Canceled) || r.v != nil || r.st != Pending {
		t.Fatalf("the leaving waiter: %+v", r)
	}
	v := &response{status: 201}
	mustComplete(t, owner, v, Committed, 0)
	if r := <-stays; r.err != nil || r.v != v {
		t.Fatalf("the staying waiter: %+v", r)
	}
	if h := mustBegin(t, c, "k", "fp", LookupHit); h.Value != v {
		t.Fatalf("retry: %+v", h)
	}

	owner = mustBegin(t, c, "t", "fp", LookupMiss).Owner
	w := waitAsync(guard(t), mustBegin(t, c, "t", "fp", LookupPending).Waiter)
	unavailable := &response{status: 503}
	if err := owner.Abandon(unavailable); err != nil {
		t.Fatal(err)
	}
	if r := <-w; !errors.Is(r.err, ErrAbandoned) || r.v != unavailable || r.st != Abandoned {
		t.Fatalf("waiter of an abandoned entry: %+v", r)
	}
	retry := mustBegin(t, c, "t", "fp", LookupMiss).Owner
	mustComplete(t, retry, v, Committed, 0)
	mustBegin(t, c, "t", "fp", LookupHit)
}

// Guard: another fingerprint under a PENDING key is a mismatch that neither
// waits nor sees the pending outcome, and leaves the entry's expiry as it is;
// the PENDING entry expires at its PendingTTL, a completed one at the expiry
// CompleteUntil gave (never later: at exactly that instant it is gone).
func TestMismatchWhilePendingAndExpiryEdges(t *testing.T) {
	c, clk := newCache(t, nil)
	l := mustBegin(t, c, "k", "fp1", LookupMiss)
	clk.Advance(pendingTTL / 2)
	m := mustBegin(t, c, "k", "fp2", LookupMismatch)
	if m.State != Pending || m.Waiter != nil || m.Value != nil || !m.ExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("mismatch %+v", m)
	}
	clk.Advance(pendingTTL/2 - time.Nanosecond)
	mustBegin(t, c, "k", "fp1", LookupPending)
	clk.Advance(time.Nanosecond)
	next := mustBegin(t, c, "k", "fp2", LookupMiss).Owner // PendingTTL passed
	until := clk.Now().Add(time.Second)
	if err := next.CompleteUntil(&response{status: 201}, Committed, until); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second - time.Nanosecond)
	mustBegin(t, c, "k", "fp2", LookupHit)
	clk.Advance(time.Nanosecond)
	if _, ok := c.Replay("k", func(*response) bool { return true }); ok {
		t.Fatal("Replay answered at the entry's expiry")
	}
	mustBegin(t, c, "k", "fp1", LookupMiss)
	// The late owner of the first entry caches nothing over the new one.
	if err := completeIn(l.Owner, &response{status: 201}, Committed, 0); err != nil {
		t.Fatal(err)
	}
	mustBegin(t, c, "k", "fp1", LookupPending)
}

// An expiry given as a wall-clock instant alone (the ledger's Unix expiry:
// no monotonic reading) is kept on the cache's clock, time.Now, with its
// monotonic reading, so that a step of the wall clock backwards cannot keep
// the entry past the ledger's expiry. (Fails on the old code: the entry kept
// the wall-only instant, compared by wall time.) Entries the cache inserts
// (PENDING) expire on the monotonic clock too. A test cannot step the wall
// clock; Time.String shows the monotonic reading as its "m=" field.
func TestExpiryFollowsTheMonotonicClock(t *testing.T) {
	c, err := New[*response](Config{MaxEntries: 10, PendingTTL: pendingTTL, CleanupInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	owner := mustBegin(t, c, "k", "fp", LookupMiss)
	if !strings.Contains(owner.ExpiresAt.String(), " m=") {
		t.Fatalf("PENDING entry's expiry %v has no monotonic reading", owner.ExpiresAt)
	}
	wall := time.Now().Add(time.Hour).Round(0) // as time.Unix(0, ExpiresAtUnixNano) gives it
	if err := owner.Owner.CompleteUntil(&response{status: 201}, Committed, wall); err != nil {
		t.Fatal(err)
	}
	h := mustBegin(t, c, "k", "fp", LookupHit)
	if !strings.Contains(h.ExpiresAt.String(), " m=") || !h.ExpiresAt.Equal(wall) {
		t.Fatalf("expiry %v, want %v on the monotonic clock", h.ExpiresAt, wall)
	}
}

// Guard: an owner whose entry left the cache (evicted, here; expired is
// the same) and whose key has a new owner since may still Abandon: its own
// waiters get its transient answer, and the new owner's PENDING entry stays
// as it is, its waiters still waiting for the new owner's outcome, which is
// cached. Abandon of a stale entry counts as an abandon, never as an
// outcome not cached.
func TestLateAbandonLeavesTheNewOwnersEntry(t *testing.T) {
	c, _ := newCache(t, func(cfg *Config) { cfg.MaxEntries, cfg.Shards = 1, 1 })
	ctx := guard(t)
	old := mustBegin(t, c, "k", "fp", LookupMiss).Owner
	oldWaiter := waitAsync(ctx, mustBegin(t, c, "k", "fp", LookupPending).Waiter)
	mustBegin(t, c, "other", "fp", LookupMiss) // evicts k's PENDING entry
	other := c.Begin("other", "fp")
	fresh := mustBegin(t, c, "k", "fp", LookupMiss).Owner // evicts other's
	if other.Kind != LookupPending || fresh == old {
		t.Fatalf("other %v, fresh owner is the old one: %v", other.Kind, fresh == old)
	}
	newWaiter := waitAsync(ctx, mustBegin(t, c, "k", "fp", LookupPending).Waiter)

	unavailable := &response{status: 503}
	if err := old.Abandon(unavailable); err != nil {
		t.Fatal(err)
	}
	if r := <-oldWaiter; !errors.Is(r.err, ErrAbandoned) || r.v != unavailable {
		t.Fatalf("the old entry's waiter: %+v", r)
	}
	mustBegin(t, c, "k", "fp", LookupPending)
	select {
	case r := <-newWaiter:
		t.Fatalf("the new entry's waiter woke on the old owner's Abandon: %+v", r)
	default:
	}
	v := &response{status: 201}
	mustComplete(t, fresh, v, Committed, 0)
	if r := <-newWaiter; r.err != nil || r.v != v {
		t.Fatalf("the new entry's waiter: %+v", r)
	}
	if h := mustBegin(t, c, "k", "fp", LookupHit); h.Value != v {
		t.Fatalf("hit %+v", h)
	}
	if st := c.Stats(); st.Abandons != 1 || st.NotCached != 0 || st.PendingEvictions != 2 {
		t.Fatalf("stats %+v", st)
	}
}
