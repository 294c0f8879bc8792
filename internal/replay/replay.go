// Package replay keeps the answers of calls made with an idempotency key, so
// that a retry with the same key is answered with the first call's answer
// instead of running again, and runs concurrent calls with one key once.
//
// The gate keeps worker calls' answers in one (docs/workers.md); the
// manager leader keeps lease answers in another, which every gate's retries
// reach. A Memory is bounded: past its size the least recently used answer
// is dropped, and an answer is dropped once older than its time to live; a
// retry of a dropped answer runs again.
package replay

import (
	"context"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// Memory keeps answers of type V by key. Its zero value is not usable: use
// New.
type Memory[V any] struct {
	ttl     time.Duration
	now     func() time.Time
	answers *lru.Cache[string, kept[V]]
	flight  singleflight.Group
}

type kept[V any] struct {
	v  V
	at time.Time
}

// New returns a Memory of at most max answers, each kept for ttl by now's
// clock (time.Now when nil). max must be positive.
func New[V any](max int, ttl time.Duration, now func() time.Time) *Memory[V] {
	if now == nil {
		now = time.Now
	}
	c, err := lru.New[string, kept[V]](max)
	if err != nil {
		panic("replay: " + err.Error()) // only for max <= 0
	}
	return &Memory[V]{ttl: ttl, now: now, answers: c}
}

// Get returns the answer kept for key, if it is younger than the time to
// live.
func (m *Memory[V]) Get(key string) (V, bool) {
	k, ok := m.answers.Get(key)
	if ok && m.now().Sub(k.at) >= m.ttl {
		m.answers.Remove(key)
		ok = false
	}
	return k.v, ok
}

// Len is how many answers are kept (some may have outlived the time to live
// and not been dropped yet).
func (m *Memory[V]) Len() int { return m.answers.Len() }

// Do answers the call with key: with the answer kept for it, or by running
// run, once for all the callers asking with key at the same time. run's
// answer is kept when keep is true (an answer that decided nothing, such as
// "no leader", is not: a retry must run again). replayed is true when the
// answer is not the one this caller's own run produced: kept from an
// earlier call, or produced by a concurrent caller's run.
//
// When ctx ends before the answer, Do returns ctx's error; the run goes on
// for the callers still waiting and its answer is kept all the same.
func (m *Memory[V]) Do(ctx context.Context, key string, run func() (v V, keep bool)) (v V, replayed bool, err error) {
	if v, ok := m.Get(key); ok {
		return v, true, nil
	}
	mine := false
	ch := m.flight.DoChan(key, func() (any, error) {
		if v, ok := m.Get(key); ok {
			return v, nil
		}
		mine = true
		v, keep := run()
		if keep {
			m.answers.Add(key, kept[V]{v: v, at: m.now()})
		}
		return v, nil
	})
	select {
	case r := <-ch:
		// mine is written by this caller's run, if it ran, before the
		// result is sent: the receive orders the read after the write.
		return r.Val.(V), !mine, nil
	case <-ctx.Done():
		var zero V
		return zero, false, ctx.Err()
	}
}
