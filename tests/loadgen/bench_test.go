package loadgen

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// trivialJob is what the trivial handler answers: a job body of realistic size.
var trivialJob = []byte(`{"job_id":"0193a5c8-0000-7000-8000-000000000000","type":"bench","status":"committed","idempotency_key":"bench-0:1:0123456789abcdef","created_at":"2026-11-21T12:00:00.123Z","datacenters":{"dc1":{"status":"committed"}},"payload":{"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}`)

func trivialHandler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "false")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(trivialJob)
}

// inProcess is a RoundTripper that calls the handler directly: no sockets,
// no server, so what remains is the generator's own cost per request
// (request building, key generation, recording).
type inProcess struct{ h http.HandlerFunc }

func (p inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	p.h(rec, req)
	if req.Body != nil {
		req.Body.Close()
	}
	return rec.Result(), nil
}

// benchRun runs b.N requests and reports the rate and the process CPU time
// per request (user+system, all goroutines: generator and handler). On a
// shared machine req/s moves with the neighbours' load; cpu-µs/req does not,
// and 2e6/cpu-µs is the ceiling on two dedicated cores.
func benchRun(b *testing.B, s Spec) {
	b.ReportAllocs()
	s.Requests = int64(b.N)
	if s.Open() {
		// Every request must be sent: with b.N above MaxOutstanding the
		// scheduler would drop the excess and the count check below fails.
		s.MaxOutstanding = max(s.MaxOutstanding, b.N)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	res, err := Run(b.Context(), s)
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if res.Status[201] != int64(b.N) {
		b.Fatalf("status %v errors %v", res.Status, res.Errors)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
	if !s.Open() {
		b.ReportMetric(float64(res.Latency.P99US), "p99-µs")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkOverhead measures the generator's ceiling: closed loop, 32
// workers, duplicate keys (the most bookkeeping), against a trivial handler.
//
//	loopback: a real net/http server on 127.0.0.1 sharing the cores (what a
//	  one-machine benchmark can reach at best);
//	in-process: the handler called in place of the network (the generator's
//	  own cost).
//
// cd tests && go test -tags hashicorpmetrics -run '^$' -bench Overhead -cpu 2 ./loadgen/
func BenchmarkOverhead(b *testing.B) {
	b.Run("loopback", func(b *testing.B) {
		srv := httptest.NewServer(http.HandlerFunc(trivialHandler))
		defer srv.Close()
		benchRun(b, Spec{Gates: []string{srv.URL}, Keys: KeysDuplicates, Concurrency: 32})
	})
	b.Run("loopback-bare", func(b *testing.B) {
		// The floor: the same requests from 32 goroutines with a plain
		// http.Client and no bookkeeping at all.
		srv := httptest.NewServer(http.HandlerFunc(trivialHandler))
		defer srv.Close()
		tr := NewTransport(32)
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		body := requestBody(Spec{JobType: "bench", PayloadBytes: DefaultPayloadBytes})
		b.ReportAllocs()
		b.ResetTimer()
		cpu0, start := cpuTime(), time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := range 32 {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/jobs", bytes.NewReader(body))
					req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-%d:%d:0123456789abcdef", w, i))
					req.Header.Set("Content-Type", "application/json")
					resp, err := c.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		elapsed, cpu := time.Since(start), cpuTime()-cpu0
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
	})
	b.Run("in-process", func(b *testing.B) {
		benchRun(b, Spec{Gates: []string{"http://in-process"}, Keys: KeysDuplicates, Concurrency: 32,
			Transport: inProcess{trivialHandler}})
	})
	b.Run("in-process-open", func(b *testing.B) {
		// Open loop at a rate far above the ceiling: the scheduler never sleeps.
		benchRun(b, Spec{Gates: []string{"http://in-process"}, Keys: KeysUnique, Concurrency: 32,
			Rate: 1e8, MaxOutstanding: 1 << 20, Transport: inProcess{trivialHandler}})
	})
}
