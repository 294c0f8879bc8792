package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/pkg/api"
)

func runT(t *testing.T, s Spec) Result {
	t.Helper()
	res, err := Run(t.Context(), s)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	logResult(t, res)
	return res
}

func TestClosedLoopSendsRequestedCount(t *testing.T) {
	t.Parallel()
	g, urls := startFake(t, 2, nil)
	res := runT(t, Spec{Gates: urls, Concurrency: 8, Requests: 200})

	if got := g.requests.Load(); got != 200 {
		t.Errorf("fake received %d requests, want 200", got)
	}
	if res.Requests != 200 || res.Answered != 200 || res.Status[201] != 200 {
		t.Errorf("requests %d answered %d status %v, want 200 201s", res.Requests, res.Answered, res.Status)
	}
	if res.Keys != 200 || res.KeysWithJobID != 200 || res.JobIDs != 200 || res.MaxJobIDsPerKey != 1 {
		t.Errorf("keys %d with id %d job ids %d max/key %d, want 200/200/200/1", res.Keys, res.KeysWithJobID, res.JobIDs, res.MaxJobIDsPerKey)
	}
	if res.Replayed != 0 || res.Reused != 0 || res.Codes != nil || res.Errors != nil {
		t.Errorf("replayed %d reused %d codes %v errors %v, want none", res.Replayed, res.Reused, res.Codes, res.Errors)
	}
	if res.Latency.Count != 200 || res.Latency.MaxUS < res.Latency.P50US {
		t.Errorf("latency %+v", res.Latency)
	}
	// Round robin: each worker alternates, so the gates differ by at most one
	// request per worker.
	a, b := g.servedBy(0), g.servedBy(1)
	if a+b != 200 || math.Abs(float64(a-b)) > 8 {
		t.Errorf("gates served %d and %d, want about 100 each", a, b)
	}
}

func TestKeysAreStructured(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	_, urls := startFake(t, 1, func(g *fakeGate) {
		g.hook = func(_ int64, r *http.Request) (int, string) {
			mu.Lock()
			seen[r.Header.Get(api.HeaderIdempotencyKey)] = true
			mu.Unlock()
			return 0, ""
		}
	})
	res := runT(t, Spec{Gates: urls, Concurrency: 3, Requests: 30})
	if res.Status[201] != 30 {
		t.Fatalf("status %v codes %v, want 30 201s (the fake validates keys)", res.Status, res.Codes)
	}
	re := regexp.MustCompile(`^bench-[0-2]:[1-9][0-9]*:[0-9a-f]{16}$`)
	nonces := map[string]bool{}
	for k := range seen {
		if !re.MatchString(k) {
			t.Errorf("key %q is not bench-<worker>:<seq>:<16 hex>", k)
		}
		nonces[k[:strings.Index(k, ":")]+k[strings.LastIndex(k, ":"):]] = true
	}
	if len(seen) != 30 {
		t.Errorf("%d distinct keys, want 30", len(seen))
	}
	if len(nonces) > 3 {
		t.Errorf("%d client/nonce pairs, want one nonce per worker", len(nonces))
	}
}

func TestPerWorkerSpreadPinsWorkers(t *testing.T) {
	t.Parallel()
	g, urls := startFake(t, 2, nil)
	runT(t, Spec{Gates: urls, Concurrency: 4, Requests: 100, Spread: SpreadPerWorker})
	for server := range 2 {
		for _, c := range g.clientsOf(server) {
			var w int
			if _, err := fmt.Sscanf(c, "bench-%d", &w); err != nil || w%2 != server {
				t.Errorf("client %s reached gate %d, want gate worker%%2", c, server)
			}
		}
	}
}

func TestOpenLoopSchedulesRate(t *testing.T) {
	t.Parallel()
	g, urls := startFake(t, 1, nil)
	res := runT(t, Spec{Gates: urls, Rate: 200, Duration: Duration(500 * time.Millisecond), Concurrency: 8})
	// 200/s for 0.5 s: requests at 0, 5, ..., 495 ms.
	if n := res.Requests + res.Dropped; n < 99 || n > 101 {
		t.Errorf("scheduled %d requests, want 100±1", n)
	}
	if got := g.requests.Load(); got != res.Requests {
		t.Errorf("fake received %d, result says %d sent", got, res.Requests)
	}
	if res.Mode != "open" || res.ServiceLatency == nil {
		t.Errorf("mode %q service latency %v, want open with a service latency", res.Mode, res.ServiceLatency)
	}
	if res.DurationSec < 0.495 {
		t.Errorf("run lasted %.3fs, shorter than the timetable", res.DurationSec)
	}

	// A request bound ends the timetable early.
	res = runT(t, Spec{Gates: urls, Rate: 1000, Requests: 50})
	if res.Requests+res.Dropped != 50 {
		t.Errorf("scheduled %d, want 50", res.Requests+res.Dropped)
	}
}

// A server that stalls once for 200 ms while the open loop keeps its
// timetable: every request scheduled during the stall waits, so the latency
// measured from the intended send time has a p99 near 200 ms, although only a
// handful of requests (the workers') were actually in flight and saw a slow
// service time.
func TestOpenLoopCorrectsCoordinatedOmission(t *testing.T) {
	t.Parallel()
	var stall sync.RWMutex
	const stallAt, stallFor = 50, 200 * time.Millisecond
	_, urls := startFake(t, 1, func(g *fakeGate) {
		g.hook = func(n int64, r *http.Request) (int, string) {
			if n == stallAt {
				stall.Lock()
				waitTimer(stallFor, r.Context().Done())
				stall.Unlock()
				return 0, ""
			}
			stall.RLock() // blocks while the stall lasts
			stall.RUnlock()
			return 0, ""
		}
	})
	res := runT(t, Spec{Gates: urls, Rate: 500, Duration: Duration(600 * time.Millisecond), Concurrency: 4})
	t.Logf("corrected: %+v", res.Latency)
	t.Logf("service:   %+v", *res.ServiceLatency)
	if res.Latency.P99US < 150_000 {
		t.Errorf("p99 %d µs: the 200 ms stall is missing from the corrected latency", res.Latency.P99US)
	}
	if res.Latency.P90US < 50_000 {
		t.Errorf("p90 %d µs: the requests scheduled during the stall were not charged for it", res.Latency.P90US)
	}
	if res.ServiceLatency.MaxUS < 190_000 {
		t.Errorf("service max %d µs, want the stalled request's 200 ms", res.ServiceLatency.MaxUS)
	}
	if res.ServiceLatency.P90US >= res.Latency.P90US {
		t.Errorf("service p90 %d µs >= corrected p90 %d µs: no correction", res.ServiceLatency.P90US, res.Latency.P90US)
	}
}

func TestOpenLoopDropsBeyondMaxOutstanding(t *testing.T) {
	t.Parallel()
	// Every request hangs until the client gives up: two are outstanding
	// from the start, so the other 18 scheduled must be dropped.
	_, urls := startFake(t, 1, func(g *fakeGate) {
		g.hook = func(_ int64, r *http.Request) (int, string) {
			<-r.Context().Done()
			return 0, ""
		}
	})
	res := runT(t, Spec{Gates: urls, Rate: 1000, Requests: 20, Concurrency: 2, MaxOutstanding: 2,
		Timeout: Duration(300 * time.Millisecond), Timeline: true})
	if res.Dropped != 18 || res.Requests != 2 || res.Errors["timeout"] != 2 {
		t.Errorf("dropped %d requests %d errors %v, want 18 dropped and 2 timeouts", res.Dropped, res.Requests, res.Errors)
	}
	var dropped int64
	for _, b := range res.Timeline {
		dropped += b.Dropped
	}
	if dropped != 18 {
		t.Errorf("timeline drops %d, want 18", dropped)
	}
}

func TestStormIsConcurrentAndYieldsOneJob(t *testing.T) {
	t.Parallel()
	const n = 32
	arrived := atomic.Int64{}
	all := make(chan struct{})
	g, urls := startFake(t, 2, func(g *fakeGate) {
		// A barrier: no request is answered before all n are in the gate
		// (the timer is only a fail-safe).
		g.hook = func(_ int64, r *http.Request) (int, string) {
			if arrived.Add(1) == n {
				close(all)
			}
			if waitTimer(10*time.Second, all) {
				return 500, "barrier_timeout"
			}
			return 0, ""
		}
	})
	s, err := Workload("storm")
	if err != nil {
		t.Fatal(err)
	}
	s.Gates, s.Concurrency, s.Requests = urls, n, n
	res := runT(t, s)
	if got := g.maxInFlight.Load(); got != n {
		t.Errorf("at most %d requests in flight, want all %d", got, n)
	}
	if res.Status[201] != n || res.Replayed != n-1 {
		t.Errorf("status %v replayed %d codes %v, want %d 201s, %d replays", res.Status, res.Replayed, res.Codes, n, n-1)
	}
	if res.Keys != 1 || res.KeysWithJobID != 1 || res.JobIDs != 1 || res.MaxJobIDsPerKey != 1 || res.Reused != n-1 {
		t.Errorf("keys %d with id %d job ids %d max/key %d reused %d, want one key with one job", res.Keys, res.KeysWithJobID, res.JobIDs, res.MaxJobIDsPerKey, res.Reused)
	}
}

func TestStormDetectsDuplicateJobs(t *testing.T) {
	t.Parallel()
	_, urls := startFake(t, 1, func(g *fakeGate) { g.noDedup = true })
	res := runT(t, Spec{Gates: urls, Keys: KeysStorm, Concurrency: 8, Requests: 8})
	if res.MaxJobIDsPerKey != 8 || res.KeysWithMultipleJobIDs != 1 || res.JobIDs != 8 {
		t.Errorf("max/key %d keys with several %d job ids %d, want the 8 duplicates seen", res.MaxJobIDsPerKey, res.KeysWithMultipleJobIDs, res.JobIDs)
	}
	if len(res.Examples) != 1 || len(res.Examples[0].OtherJobIDs) != 7 || !strings.HasPrefix(res.Examples[0].Key, "bench-0:1:") {
		t.Errorf("examples %+v, want the storm key with 7 other ids", res.Examples)
	}
	var b strings.Builder
	WriteTable(&b, []Result{res})
	if !strings.Contains(b.String(), "DUP!") || !strings.Contains(b.String(), "DUPLICATE JOBS") {
		t.Errorf("table does not flag the duplicates:\n%s", b.String())
	}
}

func TestDuplicatesRatio(t *testing.T) {
	t.Parallel()
	_, urls := startFake(t, 1, nil)
	res := runT(t, Spec{Gates: urls, Keys: KeysDuplicates, DuplicateRatio: 0.9, Concurrency: 4, Requests: 400})
	ratio := float64(res.Replayed) / float64(res.Requests)
	if math.Abs(ratio-0.9) > 0.02 {
		t.Errorf("replayed %d of %d (%.3f), want 0.9±0.02", res.Replayed, res.Requests, ratio)
	}
	// Closed loop, per-worker keys: a reused key's first request was answered
	// before, so every reuse is a replay of the identical body (the fake
	// answers 422 to a different one).
	if res.Reused != res.Replayed || res.Codes != nil || res.Status[201] != 400 {
		t.Errorf("reused %d replayed %d status %v codes %v", res.Reused, res.Replayed, res.Status, res.Codes)
	}
	if res.Keys+res.Reused != 400 || res.JobIDs != res.Keys || res.MaxJobIDsPerKey != 1 {
		t.Errorf("keys %d reused %d job ids %d max/key %d", res.Keys, res.Reused, res.JobIDs, res.MaxJobIDsPerKey)
	}
}

func TestTimelineAndGap(t *testing.T) {
	t.Parallel()
	const stallFor = 200 * time.Millisecond
	_, urls := startFake(t, 1, func(g *fakeGate) {
		g.hook = func(n int64, r *http.Request) (int, string) {
			switch {
			case n == 20:
				waitTimer(stallFor, r.Context().Done())
			case n >= 30 && n < 35:
				return http.StatusServiceUnavailable, string(api.CodeUnavailable)
			}
			return 0, ""
		}
	})
	// One worker: while request 20 stalls nothing else can succeed.
	res := runT(t, Spec{Gates: urls, Concurrency: 1, Requests: 40, Timeline: true})
	if res.Gap == nil || res.Gap.LengthMS < 200 {
		t.Fatalf("longest gap %+v, want at least the 200 ms stall", res.Gap)
	}
	var ok, failed int64
	for _, b := range res.Timeline {
		ok += b.OK
		failed += b.Failed
	}
	if ok != 35 || failed != 5 || res.Status[503] != 5 || res.Codes["unavailable"] != 5 {
		t.Errorf("timeline ok %d failed %d, status %v codes %v; want 35 ok, 5×503 unavailable", ok, failed, res.Status, res.Codes)
	}
	if !strings.Contains(tableOf(t, res), "503×5 (unavailable×5)") {
		t.Errorf("table lacks the 503 breakdown")
	}
	var b strings.Builder
	if err := WriteTimeline(&b, res); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}

func TestLongestGap(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	for _, c := range []struct {
		ok      []time.Duration
		end     time.Duration
		at, len float64
	}{
		{nil, 100 * ms, 0, 100},
		{[]time.Duration{10 * ms, 20 * ms, 90 * ms}, 100 * ms, 20, 70},
		{[]time.Duration{50 * ms, 5 * ms}, 60 * ms, 5, 45},
		{[]time.Duration{10 * ms}, 200 * ms, 10, 190},
	} {
		g := longestGap(c.ok, c.end)
		if g.StartMS != c.at || g.LengthMS != c.len {
			t.Errorf("longestGap(%v, %v) = %+v, want %v ms from %v ms", c.ok, c.end, g, c.len, c.at)
		}
	}
}

func TestDisruptCalledOnceOnTime(t *testing.T) {
	t.Parallel()
	_, urls := startFake(t, 1, nil)
	var calls atomic.Int64
	res := runT(t, Spec{Gates: urls, Rate: 200, Duration: Duration(300 * time.Millisecond), Timeline: true,
		Disrupt: DisruptKillLeader, DisruptAt: Duration(100 * time.Millisecond),
		OnDisrupt: func(context.Context) error { calls.Add(1); return errors.New("no leader to kill") }})
	if calls.Load() != 1 || res.DisruptedAtMS == nil || *res.DisruptedAtMS < 100 {
		t.Errorf("OnDisrupt called %d times at %v ms, want once after 100 ms", calls.Load(), res.DisruptedAtMS)
	}
	if res.DisruptError != "no leader to kill" {
		t.Errorf("disrupt error %q", res.DisruptError)
	}

	// A run that ends before DisruptAt does not disrupt, and does not wait.
	res = runT(t, Spec{Gates: urls, Requests: 5, DisruptAt: Duration(time.Hour),
		OnDisrupt: func(context.Context) error { calls.Add(1); return nil }})
	if calls.Load() != 1 || res.DisruptedAtMS != nil {
		t.Errorf("OnDisrupt called after the run ended")
	}
}

func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, urls := startFake(t, 1, func(g *fakeGate) {
		g.hook = func(n int64, _ *http.Request) (int, string) {
			if n == 10 {
				cancel()
			}
			return 0, ""
		}
	})
	res, err := Run(ctx, Spec{Gates: urls, Concurrency: 2, Duration: Duration(time.Minute)})
	if !errors.Is(err, context.Canceled) || !res.Interrupted {
		t.Fatalf("err %v interrupted %v, want context.Canceled", err, res.Interrupted)
	}
	if res.Requests < 8 || res.Errors["canceled"] != 0 {
		t.Errorf("requests %d errors %v: want the answered ones, no canceled ones", res.Requests, res.Errors)
	}
}

func TestTransportErrorsAreClassified(t *testing.T) {
	t.Parallel()
	url := deadURL(t)
	res := runT(t, Spec{Gates: []string{url}, Concurrency: 2, Requests: 4})
	if res.Errors["connection_refused"] != 4 || res.Answered != 0 || res.ErrorSamples["connection_refused"] == "" {
		t.Errorf("errors %v samples %v answered %d, want 4 connection_refused", res.Errors, res.ErrorSamples, res.Answered)
	}
}

func TestResultJSONRoundTrip(t *testing.T) {
	t.Parallel()
	_, urls := startFake(t, 1, func(g *fakeGate) {
		g.hook = func(n int64, _ *http.Request) (int, string) {
			if n%10 == 0 {
				return http.StatusServiceUnavailable, string(api.CodeUnavailable)
			}
			return 0, ""
		}
	})
	res := runT(t, Spec{Gates: urls, Keys: KeysDuplicates, Rate: 400, Duration: Duration(250 * time.Millisecond), Timeline: true})
	res2 := runT(t, Spec{Gates: []string{deadURL(t)}, Requests: 2, Concurrency: 1})
	for _, r := range []Result{res, res2} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Result
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r, back) {
			t.Errorf("round trip changed the result:\n%+v\n%+v\n%s", r, back, b)
		}
	}
	rep := NewReport([]Result{res, res2})
	b, _ := json.Marshal(rep)
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(rep, back) {
		t.Errorf("report round trip: %v", err)
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	rs := []Result{
		{Name: "unique", Mode: "closed", Spec: Spec{Concurrency: 32}, Requests: 1000, Answered: 1000, DurationSec: 2,
			RequestsPerSec: 500, Status: map[int]int64{201: 1000}, Keys: 1000, MaxJobIDsPerKey: 1,
			Latency: Latency{Count: 1000, P50US: 1500, P90US: 2500, P99US: 9000, P999US: 12000, MaxUS: 15000}},
		{Name: "failover", Mode: "open", Spec: Spec{Rate: 500, Concurrency: 64, Disrupt: DisruptKillLeader},
			Requests: 10000, Answered: 9900, Dropped: 3, Status: map[int]int64{201: 9800, 503: 100},
			Codes: map[string]int64{"unavailable": 100}, Errors: map[string]int64{"connection_refused": 100},
			Gap: &Gap{StartMS: 10010, LengthMS: 1234.5}, DisruptedAtMS: new(10000.0),
			ServiceLatency: &Latency{Count: 9900, P50US: 1000, P99US: 3000, MaxUS: 5000}},
	}
	out := tableOf(t, rs...)
	for _, want := range []string{"workload", "p99.9 ms", "req/s", "job ids/key", "unique", "closed c=32", "9.00", "open 500/s c=64",
		"failover: non-2xx: 503×100 (unavailable×100)", "errors: connection_refused×100",
		"longest gap without a 2xx: 1234.5 ms from 10010.0 ms", "kill-leader at 10000.0 ms", "service time"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || !slices.ContainsFunc(lines[1:3], func(l string) bool { return strings.Contains(l, "1000") }) {
		t.Errorf("unexpected layout:\n%s", out)
	}
}

func TestSpecValidation(t *testing.T) {
	t.Parallel()
	good := Spec{Gates: []string{"http://127.0.0.1:1"}}
	for name, mut := range map[string]func(*Spec){
		"gates":           func(s *Spec) { s.Gates = nil },
		"spread":          func(s *Spec) { s.Spread = "random" },
		"keys":            func(s *Spec) { s.Keys = "random" },
		"dup_ratio":       func(s *Spec) { s.Keys, s.DuplicateRatio = KeysDuplicates, 1.5 },
		"client_prefix":   func(s *Spec) { s.ClientPrefix = "a b" },
		"concurrency":     func(s *Spec) { s.Concurrency = -1 },
		"rate":            func(s *Spec) { s.Rate = math.NaN() },
		"max_outstanding": func(s *Spec) { s.Rate, s.MaxOutstanding = 10, -1 },
		"duration":        func(s *Spec) { s.Duration = -1 },
		"requests":        func(s *Spec) { s.Requests = -1 },
		"payload_bytes":   func(s *Spec) { s.PayloadBytes = -1 },
		"timeout":         func(s *Spec) { s.Timeout = -1 },
	} {
		s := good
		mut(&s)
		_, err := s.Normalize()
		var se *SpecError
		if !errors.Is(err, ErrInvalidSpec) || !errors.As(err, &se) || se.Field != name {
			t.Errorf("%s: got %v, want a SpecError on %s", name, err, name)
		}
	}
	for _, g := range []string{"127.0.0.1:8080", "ftp://x", "http://", "http://h/?q=1"} {
		if _, err := (Spec{Gates: []string{g}}).Normalize(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("gate %q accepted", g)
		}
	}
	if _, err := Run(t.Context(), Spec{}); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Run accepted an empty spec: %v", err)
	}
	n, err := good.Normalize()
	if err != nil || n.Concurrency != DefaultConcurrency || n.Duration != Duration(DefaultDuration) || n.Keys != KeysUnique || n.Name != "unique" {
		t.Errorf("defaults: %+v %v", n, err)
	}
	n, _ = Spec{Gates: good.Gates, Rate: 5000}.Normalize()
	if n.Concurrency != DefaultOpenConcurrency || n.MaxOutstanding != 5000 {
		t.Errorf("open-loop defaults: concurrency %d max outstanding %d", n.Concurrency, n.MaxOutstanding)
	}
	n, _ = Spec{Gates: good.Gates, Keys: KeysStorm, Concurrency: 7}.Normalize()
	if n.Requests != 7 || n.Duration != 0 {
		t.Errorf("storm default: %d requests, duration %v", n.Requests, n.Duration)
	}
}

func TestRequestBody(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 9, 10, 64, 1000} {
		b := requestBody(Spec{JobType: "bench", PayloadBytes: n, Datacenters: []string{"dc1"}})
		var req api.JobRequest
		if err := json.Unmarshal(b, &req); err != nil {
			t.Fatalf("payload %d: %v: %s", n, err, b)
		}
		want := n
		if n < 10 {
			want = 2
		}
		if len(req.Payload) != want || req.Type != "bench" || !reflect.DeepEqual(req.Datacenters, []string{"dc1"}) {
			t.Errorf("payload-bytes %d: payload is %d bytes, body %s", n, len(req.Payload), b)
		}
	}
}

func TestWorkloadsAreValid(t *testing.T) {
	t.Parallel()
	for _, s := range Workloads() {
		s.Gates = []string{"http://127.0.0.1:8080"}
		if _, err := s.Normalize(); err != nil {
			t.Errorf("workload %s: %v", s.Name, err)
		}
		b, _ := json.Marshal(s)
		back, err := ReadWorkloads(strings.NewReader("[" + string(b) + "]"))
		if err != nil || !reflect.DeepEqual(back[0], s) {
			t.Errorf("workload %s does not round-trip as data: %v\n%s", s.Name, err, b)
		}
	}
	if _, err := Workload("nope"); !errors.Is(err, ErrUnknownWorkload) {
		t.Errorf("Workload(nope) = %v", err)
	}
	if _, err := ReadWorkloads(strings.NewReader(`[{"name":"x","concurency":3}]`)); err == nil {
		t.Error("a misspelt field was accepted")
	}
}

func tableOf(t *testing.T, rs ...Result) string {
	t.Helper()
	var b strings.Builder
	if err := WriteTable(&b, rs); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	return b.String()
}

// deadURL returns the URL of a 127.0.0.1 port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}
