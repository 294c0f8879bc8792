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
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Memory keeps answers of type V by key. Its zero value is not usable: use
// New.
type Memory[V any] struct {
	opts    Options[V]
	answers *lru.Cache[string, kept[V]]
	bytes   atomic.Int64 // the sum of the kept answers' sizes
	// answersMu orders the changes of answers that read before they write
	// (keep, and Get dropping an expired answer), so that a drop never
	// drops an answer kept since it read.
	answersMu sync.Mutex
	gen       atomic.Uint64 // numbers the kept answers

	mu      sync.Mutex
	flights map[string]*flight[V] // the calls running, by key
}

type kept[V any] struct {
	v    V
	at   time.Time
	size int64
	gen  uint64 // which keep kept it
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
	m := &Memory[V]{opts: opts, flights: map[string]*flight[V]{}}
	c, err := lru.NewWithEvict(opts.MaxAnswers, func(_ string, k kept[V]) { m.bytes.Add(-k.size) })
	if err != nil {
		panic("replay: " + err.Error()) // only for MaxAnswers <= 0
	}
	m.answers = c
	return m
}

// Get returns the answer kept for key, if it is younger than the time to
// live. An answer older than that is dropped, unless another was kept for
// key since Get read it: that one is the answer.
func (m *Memory[V]) Get(key string) (V, bool) {
	k, ok := m.answers.Get(key)
	if !ok || m.opts.Now().Sub(k.at) < m.opts.TTL {
		return k.v, ok
	}
	m.answersMu.Lock()
	defer m.answersMu.Unlock()
	cur, ok := m.answers.Peek(key)
	if ok && cur.gen == k.gen {
		m.answers.Remove(key)
		ok = false
	}
	if ok && m.opts.Now().Sub(cur.at) < m.opts.TTL {
		return cur.v, true // kept since the read above
	}
	var zero V
	return zero, false
}

// Len is how many answers are kept (some may have outlived the time to live
// and not been dropped yet).
func (m *Memory[V]) Len() int { return m.answers.Len() }

// Bytes is the sum of the kept answers' sizes.
func (m *Memory[V]) Bytes() int64 { return m.bytes.Load() }

// keep drops the least recently used answers until v fits the byte bound,
// adds v as key's answer, and reports whether it kept v. An
// answer over the bound by itself is not kept (it would drop every other).
func (m *Memory[V]) keep(key string, v V) bool {
	var size int64
	if m.opts.Size != nil {
		size = m.opts.Size(v)
	}
	if m.opts.MaxBytes > 0 && size > m.opts.MaxBytes {
		return false
	}
	m.answersMu.Lock()
	defer m.answersMu.Unlock()
	m.answers.Remove(key) // an answer that outlived its TTL, never read since
	// Room is made before v is counted, so that the count, read at any
	// moment (a metric), never passes the bound.
	for m.opts.MaxBytes > 0 && m.bytes.Load()+size > m.opts.MaxBytes {
		if _, _, ok := m.answers.RemoveOldest(); !ok {
			break
		}
	}
	m.bytes.Add(size)
	m.answers.Add(key, kept[V]{v: v, at: m.opts.Now(), size: size, gen: m.gen.Add(1)})
	return true
}

// Do answers the call with key: with the answer kept for it, or by running
// run, once for all the callers asking with key at the same time. run's
// answer is kept when keep is true (an answer that decided nothing, such as
// "no leader", is not: a retry must run again) and it is within the byte
// bound by itself. replayed is true when the
// answer was kept and is not the one this caller's own run produced: kept
// from an earlier call, or by a concurrent caller's run. A concurrent
// caller's answer that was not kept is passed on as it is, not as a replay.
//
// When ctx ends before the answer, Do returns ctx's error; the run goes on
// for the callers still waiting and its answer is kept all the same. run's
// context carries the values of the first caller's ctx and ends only once
// every caller asking with key has left: a caller that hangs up and retries
// with the key does not cut the run short for its own retry waiting on it.
// A caller that comes after they all left does not take the answer of the
// run they cut short: it waits for that run to end, then is answered with
// what it kept, or runs again.
//
// A run that panics keeps nothing and frees the key: every caller waiting
// for it panics in its own goroutine with a *PanicError (as it would have,
// had it run the call itself), rather than the run's goroutine, where no
// caller could recover it, taking the process down.
func (m *Memory[V]) Do(ctx context.Context, key string, run func(ctx context.Context) (v V, keep bool)) (v V, replayed bool, err error) {
	for {
		if v, ok := m.Get(key); ok {
			return v, true, nil
		}
		m.mu.Lock()
		f, joined := m.flights[key]
		if joined && f.callers == 0 {
			// Every caller of this run has left, and its context has
			// ended: its answer, unless kept, is that of a run cut short,
			// not one for this caller, which waits for it to end and looks
			// again, at the answer it kept or at no run (then it runs).
			f.after++
			m.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
			}
			m.mu.Lock()
			f.after--
			m.mu.Unlock()
			if err := ctx.Err(); err != nil {
				var zero V
				return zero, false, err
			}
			continue
		}
		if !joined {
			// A run that ended since the look above kept its answer before
			// it left flights.
			if v, ok := m.Get(key); ok {
				m.mu.Unlock()
				return v, true, nil
			}
			runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			f = &flight[V]{done: make(chan struct{}), cancel: cancel}
			m.flights[key] = f
			go m.fly(runCtx, key, f, run)
		}
		f.callers++
		m.mu.Unlock()
		select {
		case <-f.done:
			if f.panicked != nil {
				panic(f.panicked)
			}
			return f.v, joined && f.kept, nil
		case <-ctx.Done():
			m.mu.Lock()
			if f.callers--; f.callers == 0 {
				f.cancel()
			}
			m.mu.Unlock()
			var zero V
			return zero, false, ctx.Err()
		}
	}
}

// flight is a run of a key's call and its callers.
type flight[V any] struct {
	done     chan struct{} // closed once v and kept are set
	v        V
	kept     bool
	panicked *PanicError        // the run's panic (nil: it returned), set with v
	callers  int                // waiting for done (guarded by Memory.mu)
	after    int                // waiting for the run, ended early, to end (guarded by Memory.mu)
	cancel   context.CancelFunc // ends the run's context
}

// fly runs f's call, keeps its answer as run says (and the byte bound
// allows), and hands it to f's callers.
func (m *Memory[V]) fly(ctx context.Context, key string, f *flight[V], run func(context.Context) (V, bool)) {
	defer f.cancel()
	v, keep, panicked := call(ctx, run)
	keep = keep && m.keep(key, v)
	m.mu.Lock()
	delete(m.flights, key)
	m.mu.Unlock()
	f.v, f.kept, f.panicked = v, keep, panicked
	close(f.done)
}

// call runs run, recovering a panic as a *PanicError (and nothing to keep).
func call[V any](ctx context.Context, run func(context.Context) (V, bool)) (v V, keep bool, panicked *PanicError) {
	defer func() {
		if p := recover(); p != nil {
			panicked = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	v, keep = run(ctx)
	return v, keep, nil
}

// PanicError is what the callers of a run that panicked panic with: the
// run's panic value and the stack of the run's goroutine where it panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("replay: the run panicked: %v\n\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Callers is how many callers wait for the run of key's call (0 when none
// runs), those waiting for a run whose callers all left to end included.
func (m *Memory[V]) Callers(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.flights[key]; ok {
		return f.callers + f.after
	}
	return 0
}
