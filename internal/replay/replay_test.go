package replay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

func TestKeptAnswerIsReplayedUntilItsTTL(t *testing.T) {
	clk := testutil.NewClock(time.Unix(1000, 0))
	m := New(Options[int]{MaxAnswers: 10, TTL: time.Minute, Now: clk.Now})
	runs := 0
	run := func(context.Context) (int, bool) { runs++; return runs, true }
	ctx := context.Background()

	if v, replayed, err := m.Do(ctx, "k", run); err != nil || v != 1 || replayed {
		t.Fatalf("first call: %d %v %v", v, replayed, err)
	}
	clk.Advance(59 * time.Second)
	if v, replayed, err := m.Do(ctx, "k", run); err != nil || v != 1 || !replayed {
		t.Fatalf("retry within the TTL: %d %v %v, want the first answer replayed", v, replayed, err)
	}
	clk.Advance(time.Second)
	if v, replayed, err := m.Do(ctx, "k", run); err != nil || v != 2 || replayed {
		t.Fatalf("retry at the TTL: %d %v %v, want a new run", v, replayed, err)
	}
	if v, _, _ := m.Do(ctx, "other", run); v != 3 {
		t.Fatalf("another key: %d, want its own run", v)
	}
}

func TestAnswerNotKeptRunsAgain(t *testing.T) {
	m := New(Options[string]{MaxAnswers: 10, TTL: time.Minute})
	runs := 0
	run := func(context.Context) (string, bool) { runs++; return "unavailable", false }
	for range 3 {
		if _, replayed, _ := m.Do(context.Background(), "k", run); replayed {
			t.Fatal("an answer that was not kept was replayed")
		}
	}
	if runs != 3 || m.Len() != 0 {
		t.Fatalf("runs %d, kept %d; want 3 runs and nothing kept", runs, m.Len())
	}
}

func TestBoundDropsTheLeastRecentlyUsed(t *testing.T) {
	m := New(Options[string]{MaxAnswers: 2, TTL: time.Hour})
	keep := func(v string) func(context.Context) (string, bool) {
		return func(context.Context) (string, bool) { return v, true }
	}
	ctx := context.Background()
	m.Do(ctx, "a", keep("a1"))
	m.Do(ctx, "b", keep("b1"))
	m.Do(ctx, "a", keep("unused")) // a is now the most recent
	m.Do(ctx, "c", keep("c1"))     // drops b
	if m.Len() != 2 {
		t.Fatalf("%d answers kept, bound 2", m.Len())
	}
	if v, ok := m.Get("a"); !ok || v != "a1" {
		t.Fatalf("a: %q %v", v, ok)
	}
	if _, ok := m.Get("b"); ok {
		t.Fatal("b outlived the bound")
	}
}

// Concurrent calls with one key run once; every caller but the runner sees
// the answer as replayed.
func TestConcurrentCallsRunOnce(t *testing.T) {
	m := New(Options[int]{MaxAnswers: 10, TTL: time.Minute})
	var runs atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{})
	run := func(context.Context) (int, bool) {
		runs.Add(1)
		close(started)
		<-release
		return 7, true
	}
	const callers = 8
	type answer struct {
		v        int
		replayed bool
	}
	answers := make(chan answer, callers)
	go func() {
		v, r, _ := m.Do(context.Background(), "k", run)
		answers <- answer{v, r}
	}()
	<-started
	var wg sync.WaitGroup
	for range callers - 1 {
		wg.Go(func() {
			v, r, _ := m.Do(context.Background(), "k", run)
			answers <- answer{v, r}
		})
	}
	close(release)
	wg.Wait()
	replays := 0
	for range callers {
		a := <-answers
		if a.v != 7 {
			t.Fatalf("answer %d, want 7", a.v)
		}
		if a.replayed {
			replays++
		}
	}
	if runs.Load() != 1 || replays != callers-1 {
		t.Fatalf("%d runs and %d replays, want 1 and %d", runs.Load(), replays, callers-1)
	}
}

// A caller that leaves gets its context's error; the run goes on and its
// answer is kept for the retry.
func TestCallerLeavingDoesNotLoseTheAnswer(t *testing.T) {
	m := New(Options[int]{MaxAnswers: 10, TTL: time.Minute})
	release := make(chan struct{})
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(done)
		_, _, err := m.Do(ctx, "k", func(context.Context) (int, bool) { <-release; return 42, true })
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the caller that left got %v, want context.Canceled", err)
		}
	}()
	cancel()
	<-done
	close(release)
	// The run ends after the caller has left; the retry joins it or finds
	// its answer kept.
	v, replayed, err := m.Do(context.Background(), "k", func(context.Context) (int, bool) { return -1, true })
	if err != nil || v != 42 || !replayed {
		t.Fatalf("retry: %d %v %v, want the run's answer 42 replayed", v, replayed, err)
	}
}

// The byte bound drops the least recently used answers until the kept
// answers fit; an answer larger than the bound is not kept, and drops none.
func TestByteBoundDropsUntilTheAnswersFit(t *testing.T) {
	m := New(Options[string]{MaxAnswers: 100, MaxBytes: 10, TTL: time.Hour,
		Size: func(v string) int64 { return int64(len(v)) }})
	ctx := context.Background()
	keep := func(v string) func(context.Context) (string, bool) {
		return func(context.Context) (string, bool) { return v, true }
	}
	m.Do(ctx, "a", keep("aaaa"))
	m.Do(ctx, "b", keep("bbbb"))
	if m.Bytes() != 8 || m.Len() != 2 {
		t.Fatalf("%d bytes in %d answers, want 8 in 2", m.Bytes(), m.Len())
	}
	m.Do(ctx, "c", keep("cccc")) // 12 > 10: a goes
	if _, ok := m.Get("a"); ok || m.Bytes() != 8 {
		t.Fatalf("a kept past the byte bound (%d bytes)", m.Bytes())
	}
	m.Do(ctx, "big", keep("0123456789x"))
	if _, ok := m.Get("big"); ok || m.Bytes() != 8 || m.Len() != 2 {
		t.Fatalf("an answer over the bound by itself: kept %v, %d bytes in %d answers", ok, m.Bytes(), m.Len())
	}
}

// The run's context outlives the caller that started it while another caller
// of the key waits, and ends once the last one has left.
func TestRunLastsWhileACallerWaits(t *testing.T) {
	m := New(Options[int]{MaxAnswers: 10, TTL: time.Minute})
	runCtx := make(chan context.Context, 1)
	run := func(ctx context.Context) (int, bool) {
		runCtx <- ctx
		<-ctx.Done()
		return 0, false
	}
	call := func(ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, _, err := m.Do(ctx, "k", run)
			done <- err
		}()
		return done
	}
	first, leaveFirst := context.WithCancel(context.Background())
	second, leaveSecond := context.WithCancel(context.Background())
	defer leaveSecond()
	firstDone := call(first)
	ctx := <-runCtx
	secondDone := call(second)
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return m.Callers("k") == 2, "the second caller to join the run"
	})
	leaveFirst()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first caller got %v, want context.Canceled", err)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("the run's context ended with a caller still waiting: %v", err)
	}
	leaveSecond()
	if err := <-secondDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the second caller got %v, want context.Canceled", err)
	}
	<-ctx.Done() // the last caller left: the run ends
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return m.Callers("k") == 0, "the run to end"
	})
}

// A caller that joined a run whose answer was not kept gets the answer, not
// as a replay.
func TestJoinedAnswerNotKeptIsNoReplay(t *testing.T) {
	m := New(Options[string]{MaxAnswers: 10, TTL: time.Minute})
	release := make(chan struct{})
	run := func(context.Context) (string, bool) { <-release; return "unavailable", false }
	type answer struct {
		v        string
		replayed bool
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			v, r, _ := m.Do(context.Background(), "k", run)
			answers <- answer{v, r}
		}()
	}
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return m.Callers("k") == 2, "both callers to share the run"
	})
	close(release)
	for range 2 {
		if a := <-answers; a.v != "unavailable" || a.replayed {
			t.Fatalf("got %+v, want the run's answer, not replayed", a)
		}
	}
}

// A caller that comes once every caller of a run has left is not answered
// by that run, cut short for their leaving (its answer, not kept, is what a
// canceled run says): it waits for the run to end, then runs again.
func TestCallerAfterEveryoneLeftIsNotAnsweredByTheEndedRun(t *testing.T) {
	m := New(Options[string]{MaxAnswers: 10, TTL: time.Minute})
	started := make(chan context.Context, 1)
	release := make(chan struct{})
	var runs atomic.Int32
	run := func(ctx context.Context) (string, bool) {
		if runs.Add(1) > 1 {
			return "answer", true
		}
		started <- ctx
		<-ctx.Done()
		<-release
		return "canceled", false
	}
	first, leaveFirst := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, _, err := m.Do(first, "k", run)
		firstDone <- err
	}()
	runCtx := <-started
	leaveFirst()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first caller got %v, want context.Canceled", err)
	}
	<-runCtx.Done() // the only caller left: the run is cut short, not ended yet

	type answer struct {
		v        string
		replayed bool
		err      error
	}
	retry := make(chan answer, 1)
	go func() {
		v, r, err := m.Do(context.Background(), "k", run)
		retry <- answer{v, r, err}
	}()
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		return m.Callers("k") == 1, "the retry to wait on the key"
	})
	close(release)
	got := <-retry
	if want := (answer{"answer", false, nil}); got != want {
		t.Fatalf("the retry got %+v, want %+v (its own run's answer)", got, want)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}

// A caller that finds its key's answer expired drops it only if it is still
// the one it read: an answer kept meanwhile, by a run another caller
// started for the key, is that caller's answer too. Before, it dropped
// the new answer and ran the call again: two runs for one key, one
// right after the other.
func TestExpiredAnswerDropNeverDropsANewerOne(t *testing.T) {
	clk := testutil.NewClock(time.Unix(1000, 0))
	var armed atomic.Bool
	paused, resume := make(chan struct{}), make(chan struct{})
	now := func() time.Time {
		if armed.CompareAndSwap(true, false) {
			close(paused) // this caller has read the expired answer
			<-resume
		}
		return clk.Now()
	}
	m := New(Options[int]{MaxAnswers: 10, TTL: time.Minute, Now: now})
	var runs atomic.Int32
	run := func(context.Context) (int, bool) { return int(runs.Add(1)), true }
	ctx := context.Background()
	if v, _, _ := m.Do(ctx, "k", run); v != 1 {
		t.Fatalf("first call: %d", v)
	}
	clk.Advance(2 * time.Minute) // the answer has expired

	armed.Store(true)
	type answer struct {
		v        int
		replayed bool
	}
	late := make(chan answer, 1)
	go func() {
		v, replayed, _ := m.Do(ctx, "k", run)
		late <- answer{v, replayed}
	}()
	<-paused
	// Meanwhile another caller finds the answer expired too, runs the
	// call and keeps its answer.
	if v, replayed, _ := m.Do(ctx, "k", run); v != 2 || replayed {
		t.Fatalf("the call after the expiry: %d %v, want a new run's 2", v, replayed)
	}
	close(resume)
	if a := <-late; a.v != 2 || !a.replayed || runs.Load() != 2 {
		t.Fatalf("the caller that read the expired answer first: %d (replayed %v) after %d runs; want the new answer 2 replayed, 2 runs",
			a.v, a.replayed, runs.Load())
	}
}

// A run that panics does not take the process down from its own goroutine,
// where nobody can recover it: every caller waiting on it panics in its own
// goroutine instead (where the gate recovers a handler's panic and answers
// 500), with a *PanicError carrying the run's panic and stack. Nothing is
// kept and the key is free: the next call runs again.
func TestRunPanicReachesEveryCaller(t *testing.T) {
	m := New(Options[int]{MaxAnswers: 10, TTL: time.Minute})
	release := make(chan struct{})
	run := func(context.Context) (int, bool) {
		<-release
		panic("boom")
	}
	const callers = 2
	recovered := make(chan any, callers)
	for range callers {
		go func() {
			defer func() { recovered <- recover() }()
			m.Do(context.Background(), "k", run)
		}()
	}
	testutil.WaitFor(t, time.Minute, func() (bool, string) {
		return m.Callers("k") == callers, "both callers to share the run"
	})
	close(release)
	for range callers {
		p := <-recovered
		pe, ok := p.(*PanicError)
		if !ok || pe.Value != "boom" || len(pe.Stack) == 0 {
			t.Fatalf("a caller recovered %v, want a *PanicError of the run's panic with its stack", p)
		}
	}
	if v, replayed, err := m.Do(context.Background(), "k", func(context.Context) (int, bool) { return 7, true }); v != 7 || replayed || err != nil {
		t.Fatalf("the call after the panic: %d %v %v, want a new run's 7", v, replayed, err)
	}
}

// An answer its run would keep but that is over the byte bound by itself is
// not kept: a caller that joined the run gets it as it is, not as a replay
// (the gate tells a joined caller of another request that the key decided
// that request only when the answer was kept), and the next call runs.
func TestAnswerOverTheByteBoundIsNoReplay(t *testing.T) {
	m := New(Options[string]{MaxAnswers: 10, MaxBytes: 10, TTL: time.Minute,
		Size: func(v string) int64 { return int64(len(v)) }})
	release := make(chan struct{})
	run := func(context.Context) (string, bool) { <-release; return "0123456789x", true }
	type answer struct {
		v        string
		replayed bool
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			v, r, _ := m.Do(context.Background(), "k", run)
			answers <- answer{v, r}
		}()
	}
	testutil.WaitFor(t, time.Minute, func() (bool, string) {
		return m.Callers("k") == 2, "both callers to share the run"
	})
	close(release)
	for range 2 {
		if a := <-answers; a.v != "0123456789x" || a.replayed {
			t.Fatalf("got %+v, want the run's answer, not replayed: it was not kept", a)
		}
	}
	if _, ok := m.Get("k"); ok || m.Len() != 0 {
		t.Fatalf("an answer over the byte bound was kept (%d answers)", m.Len())
	}
}

// Calls, expiries and drops from many goroutines keep the kept bytes within
// the byte bound and the answers within their bound, and the byte count
// equal, once they stop, to the sizes of the answers kept.
func TestBoundsHoldUnderConcurrency(t *testing.T) {
	const (
		workers  = 8
		keys     = 64
		maxBytes = 100
		maxKept  = 8
	)
	clk := testutil.NewClock(time.Unix(1000, 0))
	m := New(Options[string]{MaxAnswers: maxKept, MaxBytes: maxBytes, TTL: 30 * time.Second, Now: clk.Now,
		Size: func(v string) int64 { return int64(len(v)) }})
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for range 2000 {
				if rng.IntN(100) < 3 {
					clk.Advance(time.Duration(rng.IntN(20)) * time.Second)
				}
				size := rng.IntN(40)
				m.Do(context.Background(), fmt.Sprint("k", rng.IntN(keys)), func(context.Context) (string, bool) {
					return strings.Repeat("x", size), rng.IntN(4) > 0
				})
				if b, n := m.Bytes(), m.Len(); b < 0 || b > maxBytes || n > maxKept {
					errs <- fmt.Errorf("%d bytes in %d answers, bounds %d and %d", b, n, maxBytes, maxKept)
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
	var sum int64
	for _, k := range m.answers.Values() {
		sum += k.size
	}
	if b := m.Bytes(); b != sum {
		t.Fatalf("byte count %d, the kept answers hold %d", b, sum)
	}
}
