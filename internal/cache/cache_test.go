package cache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/once-dev/once/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake clock the tests drive by hand.
type clock = testutil.Clock

func newClock() *clock { return testutil.NewClock(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)) }

// response stands in for the gate's rendered HTTP response.
type response struct {
	status int
	key    string
	fp     string
	body   []byte
}

const (
	pendingTTL   = 60 * time.Second
	committedTTL = 300 * time.Second
	rejectedTTL  = 60 * time.Second
)

func testConfig(clk *clock) Config {
	return Config{
		MaxEntries:      1000,
		PendingTTL:      pendingTTL,
		CleanupInterval: 10 * time.Second,
		Now:             clk.Now,
		// A nil channel never ticks: only the test sweeps.
		newTicker: func(time.Duration) (<-chan time.Time, func()) { return nil, func() {} },
	}
}

// newCache builds a cache on a fake clock, closed at cleanup; edit may change the
// config first.
func newCache(t testing.TB, edit func(*Config)) (*Cache[*response], *clock) {
	t.Helper()
	clk := newClock()
	cfg := testConfig(clk)
	if edit != nil {
		edit(&cfg)
	}
	c, err := New[*response](cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(c.Close)
	return c, clk
}

// guard is a context that only ends if the test is broken (a hang), so that a
// lost waiter fails the test instead of stalling the suite.
func guard(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustBegin(t *testing.T, c *Cache[*response], key, fp string, want Kind) Lookup[*response] {
	t.Helper()
	l := c.Begin(key, fp)
	if l.Kind != want {
		t.Fatalf("Begin(%q, %q) = %v (state %v), want %v", key, fp, l.Kind, l.State, want)
	}
	return l
}

// completeIn completes o with CompleteUntil, expiring ttl from now on the
// cache's clock; ttl 0 is the state's TTL (committedTTL or rejectedTTL), as
// the gate's configuration gives it.
func completeIn(o *Owner[*response], v *response, st State, ttl time.Duration) error {
	if ttl == 0 {
		ttl = committedTTL
		if st == Rejected {
			ttl = rejectedTTL
		}
	}
	return o.CompleteUntil(v, st, (*entry[*response])(o).s.c.now().Add(ttl))
}

func mustComplete(t *testing.T, o *Owner[*response], v *response, st State, ttl time.Duration) {
	t.Helper()
	if err := completeIn(o, v, st, ttl); err != nil {
		t.Fatalf("CompleteUntil: %v", err)
	}
}

type waitResult struct {
	v   *response
	st  State
	err error
}

// waitAsync starts a goroutine that waits on w; its result arrives on the channel.
func waitAsync(ctx context.Context, w *Waiter[*response]) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		v, st, err := w.Wait(ctx)
		ch <- waitResult{v, st, err}
	}()
	return ch
}

func TestNewValidates(t *testing.T) {
	clk := newClock()
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"MaxEntries", func(c *Config) { c.MaxEntries = 0 }},
		{"PendingTTL", func(c *Config) { c.PendingTTL = 0 }},
		{"CleanupInterval", func(c *Config) { c.CleanupInterval = 0 }},
		{"Shards", func(c *Config) { c.Shards = 3 }},
		{"Shards", func(c *Config) { c.Shards = 512 }},
		{"Shards", func(c *Config) { c.Shards = -1 }},
		{"Shards", func(c *Config) { c.MaxEntries, c.Shards = 4, 8 }},
	} {
		cfg := testConfig(clk)
		tc.edit(&cfg)
		c, err := New[int](cfg)
		if err == nil {
			c.Close()
			t.Fatalf("%s: New accepted %+v", tc.field, cfg)
		}
		var ce *ConfigError
		if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tc.field {
			t.Fatalf("%s: got %v", tc.field, err)
		}
		t.Log(err)
	}
	cfg := testConfig(clk)
	cfg.Now = nil // defaults to time.Now
	c, err := New[int](cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close() // idempotent
}

func TestAutoShards(t *testing.T) {
	for _, tc := range []struct{ max, want int }{
		{1, 1}, {1000, 1}, {2048, 2}, {16 * 1024, 16}, {100000, 16},
	} {
		c, _ := newCache(t, func(c *Config) { c.MaxEntries = tc.max })
		if got := len(c.shards); got != tc.want {
			t.Errorf("MaxEntries %d: %d shards, want %d", tc.max, got, tc.want)
		}
		total := 0
		for i := range c.shards {
			total += c.shards[i].capacity
		}
		if total != tc.max {
			t.Errorf("MaxEntries %d: shard capacities sum to %d", tc.max, total)
		}
	}
}

func TestKeyScopesByTenant(t *testing.T) {
	if Key("a", "b:c") == Key("a:b", "c") || Key("t1", "k") == Key("t2", "k") {
		t.Fatal("Key is ambiguous")
	}
	if Key("t", "k") != Key("t", "k") {
		t.Fatal("Key is not deterministic")
	}
}

func TestMissThenHit(t *testing.T) {
	c, clk := newCache(t, nil)
	l := mustBegin(t, c, "k", "fp", LookupMiss)
	if l.Owner == nil || l.Waiter != nil || l.State != Pending || !l.ExpiresAt.Equal(clk.Now().Add(pendingTTL)) {
		t.Fatalf("miss: %+v", l)
	}
	if w := mustBegin(t, c, "k", "fp", LookupPending); w.State != Pending || !w.ExpiresAt.Equal(l.ExpiresAt) {
		t.Fatalf("pending: %+v", w)
	}
	want := &response{status: 201, body: []byte(`{"job_id":"j1"}`)}
	mustComplete(t, l.Owner, want, Committed, 0)
	for range 3 {
		h := mustBegin(t, c, "k", "fp", LookupHit)
		if h.Value != want || h.State != Committed || !h.ExpiresAt.Equal(clk.Now().Add(committedTTL)) || h.Owner != nil {
			t.Fatalf("hit: %+v", h)
		}
	}
	st := c.Stats()
	if st.Misses != 1 || st.Hits != 3 || c.Len() != 1 {
		t.Fatalf("stats %+v len %d", st, c.Len())
	}
	if r, ok := c.Replay("k", func(v *response) bool { return v == want }); !ok || r.State != Committed || r.Value != want {
		t.Fatalf("replay committed: %+v %v", r, ok)
	}
}

func TestPerStateTTL(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state State
		ttl   time.Duration // from completion to the expiry given to CompleteUntil
		lives time.Duration
	}{
		{"committed", Committed, 0, committedTTL},
		{"rejected", Rejected, 0, rejectedTTL},
		{"custom", Rejected, 7 * time.Second, 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, clk := newCache(t, nil)
			l := mustBegin(t, c, "k", "fp", LookupMiss)
			clk.Advance(30 * time.Second) // the TTL counts from completion
			want := &response{status: 429}
			mustComplete(t, l.Owner, want, tc.state, tc.ttl)

			clk.Advance(tc.lives - time.Nanosecond)
			h := mustBegin(t, c, "k", "fp", LookupHit)
			if h.State != tc.state || h.ExpiresAt.Sub(clk.Now()) != time.Nanosecond {
				t.Fatalf("hit before expiry: %+v", h)
			}
			clk.Advance(time.Nanosecond)
			if _, ok := c.Replay("k", func(*response) bool { return true }); ok {
				t.Fatal("an expired entry was replayed")
			}
			mustBegin(t, c, "k", "fp", LookupMiss)
			if st := c.Stats(); st.Expirations != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// An owner that never completes is bounded by PendingTTL: then a new Begin
// becomes owner; the old owner's late Complete wakes the old waiters and does
// not touch the new entry; old waiters wait only up to their ctx.
func TestOwnerOverrunsPendingTTL(t *testing.T) {
	c, clk := newCache(t, nil)
	ctx := guard(t)
	old := mustBegin(t, c, "k", "fp", LookupMiss).Owner
	clk.Advance(pendingTTL - time.Nanosecond)
	w := mustBegin(t, c, "k", "fp", LookupPending).Waiter
	got := waitAsync(ctx, w)
	impatient, cancel := context.WithCancel(ctx)
	gotImpatient := waitAsync(impatient, w)

	clk.Advance(time.Nanosecond)
	fresh := mustBegin(t, c, "k", "fp", LookupMiss).Owner
	if fresh == old {
		t.Fatal("the expired entry was reused")
	}
	cancel()
	if r := <-gotImpatient; !errors.Is(r.err, ErrWaitTimeout) || !errors.Is(r.err, context.Canceled) || r.st != Pending {
		t.Fatalf("impatient waiter: %+v", r)
	}

	late := &response{status: 201, body: []byte("late")}
	mustComplete(t, old, late, Committed, 0)
	if r := <-got; r.err != nil || r.v != late || r.st != Committed {
		t.Fatalf("old waiter: %+v", r)
	}
	if l := c.Begin("k", "fp"); l.Kind != LookupPending {
		t.Fatalf("the late Complete replaced the new entry: %v %v", l.Kind, l.State)
	}
	newer := &response{status: 201, body: []byte("new")}
	mustComplete(t, fresh, newer, Committed, 0)
	if h := mustBegin(t, c, "k", "fp", LookupHit); h.Value != newer {
		t.Fatalf("hit %+v", h)
	}
}

func TestSweep(t *testing.T) {
	c, clk := newCache(t, nil)
	ctx := guard(t)
	mustComplete(t, mustBegin(t, c, "committed", "fp", LookupMiss).Owner, &response{}, Committed, 0)
	mustComplete(t, mustBegin(t, c, "rejected", "fp", LookupMiss).Owner, &response{}, Rejected, 0)
	mustComplete(t, mustBegin(t, c, "long", "fp", LookupMiss).Owner, &response{}, Rejected, time.Hour)
	owner := mustBegin(t, c, "pending", "fp", LookupMiss).Owner
	w := mustBegin(t, c, "pending", "fp", LookupPending).Waiter
	got := waitAsync(ctx, w)

	if n := c.Sweep(); n != 0 {
		t.Fatalf("swept %d live entries", n)
	}
	clk.Advance(60 * time.Second)
	if n := c.Sweep(); n != 2 || c.Len() != 2 {
		t.Fatalf("swept %d, len %d; want 2, 2", n, c.Len())
	}
	// Two entries left, both live: rejected and pending did not survive.
	for _, k := range []string{"committed", "long"} {
		if _, ok := c.Replay(k, func(*response) bool { return true }); !ok {
			t.Fatalf("the sweep removed %s, a live entry", k)
		}
	}
	// The swept PENDING entry still wakes its waiter, and is not cached.
	v := &response{status: 201}
	mustComplete(t, owner, v, Committed, 0)
	if r := <-got; r.err != nil || r.v != v {
		t.Fatalf("waiter of swept entry: %+v", r)
	}
	if c.Len() != 2 {
		t.Fatalf("len %d: a swept entry came back on Complete", c.Len())
	}
	clk.Advance(committedTTL)
	if n := c.Sweep(); n != 1 || c.Len() != 1 {
		t.Fatalf("swept %d, len %d; want 1, 1", n, c.Len())
	}
	if st := c.Stats(); st.Expirations != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// The sweeper goroutine sweeps on each tick and exits on Close.
func TestSweeperGoroutine(t *testing.T) {
	tick := make(chan time.Time)
	swept := make(chan int)
	var tickerStopped atomic.Bool
	var interval time.Duration
	c, clk := newCache(t, func(cfg *Config) {
		cfg.newTicker = func(d time.Duration) (<-chan time.Time, func()) {
			interval = d
			return tick, func() { tickerStopped.Store(true) }
		}
		cfg.swept = func(n int) { swept <- n }
	})
	if interval != 10*time.Second {
		t.Fatalf("ticker interval %v", interval)
	}
	for i := range 5 {
		mustComplete(t, mustBegin(t, c, fmt.Sprint(i), "fp", LookupMiss).Owner, &response{}, Rejected, 0)
	}
	tick <- clk.Now()
	if n := <-swept; n != 0 {
		t.Fatalf("first tick swept %d", n)
	}
	clk.Advance(rejectedTTL)
	tick <- clk.Now()
	if n := <-swept; n != 5 || c.Len() != 0 {
		t.Fatalf("second tick swept %d, len %d", n, c.Len())
	}
	c.Close()
	if !tickerStopped.Load() {
		t.Fatal("Close did not stop the ticker")
	}
}

func TestCapacityBound(t *testing.T) {
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprint("shards=", shards), func(t *testing.T) {
			const max = 100
			c, _ := newCache(t, func(cfg *Config) { cfg.MaxEntries, cfg.Shards = max, shards })
			for i := range 1000 {
				l := mustBegin(t, c, fmt.Sprint("k", i), "fp", LookupMiss)
				if i%50 != 1 { // 20 stay PENDING
					mustComplete(t, l.Owner, &response{}, Committed, 0)
				}
				// Keep k0 hot: LRU keeps it.
				if i > 0 {
					mustBegin(t, c, "k0", "fp", LookupHit)
				}
				if n := c.Len(); n > max {
					t.Fatalf("after %d inserts: len %d > %d", i+1, n, max)
				}
			}
			st := c.Stats()
			if c.Len() != max || st.Evictions != 1000-max {
				t.Fatalf("len %d, stats %+v", c.Len(), st)
			}
			if shards == 1 {
				// Completed entries go first, so the oldest pending survive too.
				if l := c.Begin("k1", "fp"); l.Kind != LookupPending {
					t.Fatal("an old pending entry was evicted while completed ones remained")
				}
				if st.PendingEvictions != 0 {
					t.Fatalf("stats %+v", st)
				}
			}
		})
	}
}

func TestEvictionPrefersCompleted(t *testing.T) {
	c, _ := newCache(t, func(cfg *Config) { cfg.MaxEntries, cfg.Shards = 3, 1 })
	mustBegin(t, c, "p1", "fp", LookupMiss)
	mustBegin(t, c, "p2", "fp", LookupMiss)
	mustComplete(t, mustBegin(t, c, "c1", "fp", LookupMiss).Owner, &response{}, Committed, 0)
	mustBegin(t, c, "p3", "fp", LookupMiss) // evicts c1, the only completed entry
	if _, ok := c.Replay("c1", func(*response) bool { return true }); ok {
		t.Fatal("c1 present=true")
	}
	for _, k := range []string{"p1", "p2", "p3"} {
		mustBegin(t, c, k, "fp", LookupPending)
	}
	mustBegin(t, c, "p4", "fp", LookupMiss) // only pending left: evicts p1, the oldest
	if st := c.Stats(); st.Evictions != 2 || st.PendingEvictions != 1 {
		t.Fatalf("stats %+v", st)
	}
	if l := c.Begin("p1", "fp"); l.Kind != LookupMiss {
		t.Fatalf("p1 not evicted: %v", l.Kind)
	}
}

// An expired entry is reclaimed before a live one is evicted.
func TestEvictionTakesExpiredFirst(t *testing.T) {
	c, clk := newCache(t, func(cfg *Config) { cfg.MaxEntries, cfg.Shards = 2, 1 })
	mustComplete(t, mustBegin(t, c, "a", "fp", LookupMiss).Owner, &response{}, Committed, 0)
	mustBegin(t, c, "p", "fp", LookupMiss)
	clk.Advance(pendingTTL)
	mustBegin(t, c, "b", "fp", LookupMiss) // p expired: it goes, a stays
	if _, ok := c.Replay("a", func(*response) bool { return true }); !ok {
		t.Fatal("a live entry was evicted while an expired one remained")
	}
	if st := c.Stats(); st.Evictions != 0 || st.Expirations != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestEvictedPendingStillWakesWaiters(t *testing.T) {
	c, _ := newCache(t, func(cfg *Config) { cfg.MaxEntries = 1 })
	ctx := guard(t)
	owner := mustBegin(t, c, "a", "fp", LookupMiss).Owner
	var results []<-chan waitResult
	for range 5 {
		results = append(results, waitAsync(ctx, mustBegin(t, c, "a", "fp", LookupPending).Waiter))
	}
	mustBegin(t, c, "b", "fp", LookupMiss) // evicts a
	if st := c.Stats(); st.PendingEvictions != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Late waiters may still hold the evicted entry's handle.
	results = append(results, waitAsync(ctx, (*Waiter[*response])(owner)))
	v := &response{status: 201}
	mustComplete(t, owner, v, Committed, 0)
	for i, ch := range results {
		if r := <-ch; r.err != nil || r.v != v || r.st != Committed {
			t.Fatalf("waiter %d: %+v", i, r)
		}
	}
	if _, ok := c.Replay("a", func(*response) bool { return true }); ok {
		t.Fatal("the evicted entry came back")
	}
	if l := c.Begin("b", "fp"); l.Kind != LookupPending {
		t.Fatalf("the late Complete displaced b: %v", l.Kind)
	}
	mustBegin(t, c, "a", "fp", LookupMiss)
}

// 1000 concurrent duplicates: one owner, 999 waiters, one identical value.
func TestCoalesceThousand(t *testing.T) {
	const n = 1000
	c, _ := newCache(t, nil)
	ctx := guard(t)
	want := &response{status: 201, body: []byte(`{"job_id":"j"}`)}
	var (
		start           = make(chan struct{})
		begun, finished sync.WaitGroup
		owners, waiters atomic.Int32
		results         [n]waitResult
	)
	begun.Add(n)
	finished.Add(n)
	for i := range n {
		go func() {
			defer finished.Done()
			<-start
			l := c.Begin("key", "fp")
			begun.Done()
			switch l.Kind {
			case LookupMiss:
				owners.Add(1)
				begun.Wait() // every other caller has its Lookup: they all see PENDING
				results[i] = waitResult{want, Committed, completeIn(l.Owner, want, Committed, 0)}
			case LookupPending:
				waiters.Add(1)
				v, st, err := l.Waiter.Wait(ctx)
				results[i] = waitResult{v, st, err}
			default:
				results[i] = waitResult{err: fmt.Errorf("unexpected %v", l.Kind)}
			}
		}()
	}
	close(start)
	finished.Wait()
	if owners.Load() != 1 || waiters.Load() != n-1 {
		t.Fatalf("%d owners, %d waiters", owners.Load(), waiters.Load())
	}
	for i, r := range results {
		if r.err != nil || r.v != want || r.st != Committed {
			t.Fatalf("caller %d: %+v", i, r)
		}
	}
	if st := c.Stats(); st.Misses != 1 || st.Waits != n-1 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("1 owner, %d waiters, one value", waiters.Load())
}

func TestWaiterTimeoutDoesNotAffectOthers(t *testing.T) {
	c, _ := newCache(t, nil)
	ctx := guard(t)
	owner := mustBegin(t, c, "k", "fp", LookupMiss).Owner
	w := mustBegin(t, c, "k", "fp", LookupPending).Waiter

	var patient []<-chan waitResult
	for range 5 {
		patient = append(patient, waitAsync(ctx, w))
	}
	// A waiter whose deadline has passed returns at once.
	past, cancelPast := context.WithDeadline(ctx, time.Unix(0, 0))
	defer cancelPast()
	if _, st, err := w.Wait(past); !errors.Is(err, ErrWaitTimeout) || !errors.Is(err, context.DeadlineExceeded) || st != Pending {
		t.Fatalf("expired ctx: %v %v", st, err)
	}
	// A blocked waiter returns when its ctx ends, not later.
	cctx, cancel := context.WithCancel(ctx)
	blocked := waitAsync(cctx, w)
	cancel()
	if r := <-blocked; !errors.Is(r.err, ErrWaitTimeout) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %+v", r)
	}
	if l := c.Begin("k", "fp"); l.Kind != LookupPending {
		t.Fatalf("a waiter's timeout resolved the entry: %v", l.Kind)
	}
	v := &response{status: 201}
	mustComplete(t, owner, v, Committed, 0)
	for i, ch := range patient {
		if r := <-ch; r.err != nil || r.v != v {
			t.Fatalf("patient waiter %d: %+v", i, r)
		}
	}
	// Waiting again after a timeout gets the outcome.
	if got, _, err := w.Wait(cctx); err != nil || got != v {
		t.Fatalf("re-wait: %v %v", got, err)
	}
	if st := c.Stats(); st.WaitTimeouts != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// A waiter that registers while the owner completes (or abandons) never hangs,
// whichever side wins, and gets the owner's value.
func TestWaitRacesResolution(t *testing.T) {
	c, clk := newCache(t, func(cfg *Config) { cfg.MaxEntries = 4 })
	ctx := guard(t)
	iterations := 3000
	if testing.Short() {
		iterations = 300
	}
	for i := range iterations {
		key := fmt.Sprint("k", i%8)
		l := c.Begin(key, "fp")
		if l.Kind != LookupMiss {
			t.Fatalf("iteration %d: %v", i, l.Kind)
		}
		abandon := i%3 == 0
		v := &response{status: 201 + i}
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		check := func(who string, got *response, st State, err error) {
			switch {
			case abandon && (!errors.Is(err, ErrAbandoned) || st != Abandoned || got != v),
				!abandon && (err != nil || st != Committed || got != v):
				errs <- fmt.Errorf("iteration %d, %s: %v %v %v", i, who, got, st, err)
			}
		}
		early := l.Owner // the pre-registered waiter: same entry
		wg.Go(func() {
			got, st, err := (*Waiter[*response])(early).Wait(ctx)
			check("registered waiter", got, st, err)
		})
		wg.Go(func() {
			// Registers racing the resolution: PENDING, completed, or gone.
			r := c.Begin(key, "fp")
			switch r.Kind {
			case LookupPending:
				got, st, err := r.Waiter.Wait(ctx)
				check("racing waiter", got, st, err)
			case LookupHit:
				if abandon || r.Value != v {
					errs <- fmt.Errorf("iteration %d: hit %+v", i, r)
				}
			case LookupMiss: // abandoned (or evicted) before we looked
				r.Owner.Abandon(nil)
			default:
				errs <- fmt.Errorf("iteration %d: %v", i, r.Kind)
			}
		})
		wg.Go(func() {
			runtime.Gosched()
			if abandon {
				l.Owner.Abandon(v)
			} else {
				completeIn(l.Owner, v, Committed, 0)
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		clk.Advance(committedTTL) // the key's outcome expires: the next Begin of it misses
	}
}

func TestAbandon(t *testing.T) {
	c, _ := newCache(t, nil)
	ctx := guard(t)
	owner := mustBegin(t, c, "k", "fp", LookupMiss).Owner
	var results []<-chan waitResult
	for range 3 {
		results = append(results, waitAsync(ctx, mustBegin(t, c, "k", "fp", LookupPending).Waiter))
	}
	unavailable := &response{status: 503}
	if err := owner.Abandon(unavailable); err != nil {
		t.Fatal(err)
	}
	for i, ch := range results {
		if r := <-ch; !errors.Is(r.err, ErrAbandoned) || r.st != Abandoned || r.v != unavailable {
			t.Fatalf("waiter %d: %+v", i, r)
		}
	}
	if c.Len() != 0 {
		t.Fatalf("len %d after Abandon", c.Len())
	}
	if _, ok := c.Replay("k", func(*response) bool { return true }); ok {
		t.Fatal("an abandoned entry is cached")
	}
	if err := completeIn(owner, &response{status: 201}, Committed, 0); !errors.Is(err, ErrResolved) {
		t.Fatalf("Complete after Abandon: %v", err)
	}
	if err := owner.Abandon(unavailable); !errors.Is(err, ErrResolved) {
		t.Fatalf("Abandon twice: %v", err)
	}
	mustBegin(t, c, "k", "fp", LookupMiss) // the next request forwards anew
	if st := c.Stats(); st.Abandons != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMismatch(t *testing.T) {
	c, clk := newCache(t, nil)
	owner := mustBegin(t, c, "k", "fp1", LookupMiss).Owner
	if l := mustBegin(t, c, "k", "fp2", LookupMismatch); l.State != Pending || l.Owner != nil || l.Waiter != nil {
		t.Fatalf("mismatch on pending: %+v", l)
	}
	mustBegin(t, c, "k", "fp1", LookupPending) // nothing changed
	v := &response{status: 422}
	mustComplete(t, owner, v, Rejected, 0)
	if l := mustBegin(t, c, "k", "fp2", LookupMismatch); l.State != Rejected || l.Value != nil {
		t.Fatalf("mismatch on rejected: %+v", l)
	}
	if h := mustBegin(t, c, "k", "fp1", LookupHit); h.Value != v {
		t.Fatalf("hit %+v", h)
	}
	if st := c.Stats(); st.Mismatches != 2 || c.Len() != 1 {
		t.Fatalf("stats %+v", st)
	}
	clk.Advance(rejectedTTL)
	mustBegin(t, c, "k", "fp2", LookupMiss) // only expiry frees the key
}

func TestCompleteOnce(t *testing.T) {
	c, _ := newCache(t, nil)
	owner := mustBegin(t, c, "k", "fp", LookupMiss).Owner
	for _, bad := range []State{Pending, Abandoned, 0} {
		if err := completeIn(owner, &response{}, bad, time.Hour); !errors.Is(err, ErrInvalidState) {
			t.Fatalf("CompleteUntil(%v): %v", bad, err)
		}
	}
	mustBegin(t, c, "k", "fp", LookupPending)
	first := &response{status: 201}
	mustComplete(t, owner, first, Committed, 0)
	if err := completeIn(owner, &response{status: 500}, Rejected, time.Hour); !errors.Is(err, ErrResolved) {
		t.Fatalf("second Complete: %v", err)
	}
	if err := owner.Abandon(&response{status: 503}); !errors.Is(err, ErrResolved) {
		t.Fatalf("Abandon after Complete: %v", err)
	}
	if h := mustBegin(t, c, "k", "fp", LookupHit); h.Value != first || h.State != Committed {
		t.Fatalf("hit %+v", h)
	}
}

// A Lookup's ExpiresAt is its entry's: the PENDING deadline while it is
// pending, then the completed entry's expiry, counted from the Complete.
func TestLookupExpiresAt(t *testing.T) {
	c, clk := newCache(t, nil)
	owner := mustBegin(t, c, "k", "fp", LookupMiss).Owner
	pending := mustBegin(t, c, "k", "fp", LookupPending)
	if !pending.ExpiresAt.Equal(clk.Now().Add(pendingTTL)) {
		t.Fatalf("pending ExpiresAt %v", pending.ExpiresAt)
	}
	clk.Advance(time.Second)
	mustComplete(t, owner, &response{status: 429}, Rejected, 0)
	if _, _, err := pending.Waiter.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := mustBegin(t, c, "k", "fp", LookupHit); !h.ExpiresAt.Equal(clk.Now().Add(rejectedTTL)) {
		t.Fatalf("rejected ExpiresAt %v", h.ExpiresAt)
	}
}

// Random operations from many goroutines on few keys, with the clock, sweeps
// and eviction racing: every waiter gets its own entry's outcome, none hangs,
// and the bound holds.
func TestRandomInterleavings(t *testing.T) {
	const (
		workers = 8
		keys    = 6
		max     = 4
	)
	ops := 2000
	if testing.Short() {
		ops = 200
	}
	c, clk := newCache(t, func(cfg *Config) { cfg.MaxEntries = max })
	ctx := guard(t)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for range ops {
				key := fmt.Sprint("k", rng.IntN(keys))
				fp := fmt.Sprint("fp", rng.IntN(2))
				switch op := rng.IntN(100); {
				case op < 3:
					clk.Advance(time.Duration(rng.IntN(20)) * time.Second)
				case op < 5:
					c.Sweep()
				default:
					l := c.Begin(key, fp)
					switch l.Kind {
					case LookupMiss:
						v := &response{key: key, fp: fp}
						runtime.Gosched()
						if rng.IntN(4) == 0 {
							l.Owner.Abandon(v)
						} else {
							completeIn(l.Owner, v, Committed, time.Duration(rng.IntN(3))*time.Second)
						}
					case LookupPending:
						v, st, err := l.Waiter.Wait(ctx)
						if errors.Is(err, ErrWaitTimeout) || v == nil || v.key != key || v.fp != fp ||
							(st != Committed && st != Abandoned) {
							errs <- fmt.Errorf("wait on %s/%s: %+v %v %v", key, fp, v, st, err)
							return
						}
					case LookupHit:
						if l.Value.key != key || l.Value.fp != fp {
							errs <- fmt.Errorf("hit on %s/%s: %+v", key, fp, l.Value)
							return
						}
					}
				}
				if n := c.Len(); n > max {
					errs <- fmt.Errorf("len %d > %d", n, max)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("stats %+v", c.Stats())
}

// The gate renders states with String: they must match the API's spelling.
func TestNames(t *testing.T) {
	for st, want := range map[State]string{Pending: "pending", Committed: "committed",
		Rejected: "rejected", Abandoned: "abandoned", 0: "State(0)"} {
		if st.String() != want {
			t.Errorf("%d: %q, want %q", st, st.String(), want)
		}
	}
	for k, want := range map[Kind]string{LookupMiss: "miss", LookupHit: "hit",
		LookupPending: "pending", LookupMismatch: "mismatch", 0: "Kind(0)"} {
		if k.String() != want {
			t.Errorf("%d: %q, want %q", k, k.String(), want)
		}
	}
}

// Replay answers only a completed, unexpired entry whose value the caller
// recognises, and leaves the cache and its statistics alone otherwise.
func TestReplay(t *testing.T) {
	c, clk := newCache(t, nil)
	mine := func(r *response) bool { return string(r.body) == `{"job_id":"j1"}` }
	if _, ok := c.Replay("k", mine); ok {
		t.Fatal("replay of an absent key")
	}
	l := mustBegin(t, c, "k", "fp", LookupMiss)
	if _, ok := c.Replay("k", mine); ok {
		t.Fatal("replay of a PENDING entry")
	}
	want := &response{status: 201, body: []byte(`{"job_id":"j1"}`)}
	mustComplete(t, l.Owner, want, Committed, 0)
	if _, ok := c.Replay("k", func(*response) bool { return false }); ok {
		t.Fatal("replay of a value the caller does not recognise")
	}
	if st := c.Stats(); st.Hits != 0 || st.Misses != 1 {
		t.Fatalf("refused replays counted: %+v", st)
	}
	h, ok := c.Replay("k", mine)
	if !ok || h.Kind != LookupHit || h.Value != want || h.State != Committed || !h.ExpiresAt.Equal(clk.Now().Add(committedTTL)) {
		t.Fatalf("replay: %+v %v", h, ok)
	}
	if st := c.Stats(); st.Hits != 1 {
		t.Fatalf("a replay is a hit: %+v", st)
	}
	clk.Advance(committedTTL)
	if _, ok := c.Replay("k", mine); ok {
		t.Fatal("replay of an expired entry")
	}
}

// CompleteUntil caches the outcome until its absolute expiry, and an outcome
// whose expiry is at or before now not at all: its waiters get it, a later
// duplicate misses (never a hit on an entry already past its expiry).
func TestCompleteUntil(t *testing.T) {
	c, clk := newCache(t, nil)
	owner := mustBegin(t, c, "k", "fp", LookupMiss).Owner
	if err := owner.CompleteUntil(&response{}, Pending, clk.Now().Add(time.Hour)); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("CompleteUntil(Pending): %v", err)
	}
	expires := clk.Now().Add(5 * time.Second)
	if err := owner.CompleteUntil(&response{status: 201}, Committed, expires); err != nil {
		t.Fatal(err)
	}
	if h := mustBegin(t, c, "k", "fp", LookupHit); !h.ExpiresAt.Equal(expires) {
		t.Fatalf("hit ExpiresAt %v, want %v", h.ExpiresAt, expires)
	}
	clk.Advance(5 * time.Second)
	mustBegin(t, c, "k", "fp", LookupMiss)

	for _, past := range []time.Duration{0, -time.Millisecond} {
		key := fmt.Sprintf("expired%v", past)
		owner := mustBegin(t, c, key, "fp", LookupMiss).Owner
		waiter := mustBegin(t, c, key, "fp", LookupPending).Waiter
		v := &response{status: 201}
		if err := owner.CompleteUntil(v, Committed, clk.Now().Add(past)); err != nil {
			t.Fatal(err)
		}
		if got, st, err := waiter.Wait(guard(t)); got != v || st != Committed || err != nil {
			t.Fatalf("waiter got %v, %v, %v", got, st, err)
		}
		if _, ok := c.Replay(key, func(*response) bool { return true }); ok {
			t.Fatalf("expiry now%+v: Replay answered from an expired entry", past)
		}
		mustBegin(t, c, key, "fp", LookupMiss)
	}
	if n := c.Stats().NotCached; n != 2 {
		t.Fatalf("NotCached = %d, want 2", n)
	}
}
