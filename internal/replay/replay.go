// Package replay keeps the answers of calls made with an idempotency key, so
// that a retry with the same key is answered with the first call's answer
// instead of running again, and runs concurrent calls with one key once.
//
// The gate keeps worker calls' answers in one (docs/workers.md); the
// manager leader keeps lease answers in another, which every gate's retries
// reach. A Memory is bounded in answers and in bytes: past either bound the
// least recently used answers are dropped, and an answer is dropped once
// older than its time to live; a retry of a dropped answer runs again (it
// is a memory of answers, not a record: what it drops was decided and
// answered already).
package replay

import (
	"context"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// Memory keeps answers of type V by key. Its zero value is not usable: use
// New.
type Memory[V any] struct {
	opts    Options[V]
	answers *lru.Cache[string, kept[V]]
	bytes   atomic.Int64 // the sum of the kept answers' sizes
	flight  singleflight.Group
}

type kept[V any] struct {
	v    V
	at   time.Time
	size int64
}

// Options bound a Memory.
type Options[V any] struct {
	// MaxAnswers bounds how many answers are kept (required, > 0).
	MaxAnswers int
	// MaxBytes bounds the sum of the kept answers' Size (0: no bound but
	// MaxAnswers). Past it the least recently used answers are dropped.
	MaxBytes int64
	// Size is an answer's size in bytes (nil: every answer counts 0).
	Size func(V) int64
	// TTL is how long an answer is kept.
	TTL time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// New returns an empty Memory bounded by opts.
func New[V any](opts Options[V]) *Memory[V] {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := &Memory[V]{opts: opts}
	c, err := lru.NewWithEvict(opts.MaxAnswers, func(_ string, k kept[V]) { m.bytes.Add(-k.size) })
	if err != nil {
		panic("replay: " + err.Error()) // only for MaxAnswers <= 0
	}
	m.answers = c
	return m
}

// Get returns the answer kept for key, if it is younger than the time to
// live.
func (m *Memory[V]) Get(key string) (V, bool) {
	k, ok := m.answers.Get(key)
	if ok && m.opts.Now().Sub(k.at) >= m.opts.TTL {
		m.answers.Remove(key)
		ok = false
	}
	return k.v, ok
}

// Len is how many answers are kept (some may have outlived the time to live
// and not been dropped yet).
func (m *Memory[V]) Len() int { return m.answers.Len() }

// Bytes is the sum of the kept answers' sizes.
func (m *Memory[V]) Bytes() int64 { return m.bytes.Load() }

// keep adds v as key's answer, then drops the least recently used answers
// while the kept bytes are over the bound. An answer over the bound by
// itself is not kept (it would drop every other).
func (m *Memory[V]) keep(key string, v V) {
	var size int64
	if m.opts.Size != nil {
		size = m.opts.Size(v)
	}
	if m.opts.MaxBytes > 0 && size > m.opts.MaxBytes {
		return
	}
	m.answers.Remove(key) // an answer that outlived its TTL, never read since
	m.bytes.Add(size)
	m.answers.Add(key, kept[V]{v: v, at: m.opts.Now(), size: size})
	for m.opts.MaxBytes > 0 && m.bytes.Load() > m.opts.MaxBytes {
		if _, _, ok := m.answers.RemoveOldest(); !ok {
			return
		}
	}
}

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
			m.keep(key, v)
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
