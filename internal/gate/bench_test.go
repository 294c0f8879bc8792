package gate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// benchGate is a gate with a real manager served in-process (managertest),
// driven through its handler directly: the benchmarks measure the gate's own
// submit path (and, for misses, the loopback RPC to the manager and its Raft
// commit), not a client's HTTP stack.
func benchGate(b *testing.B) http.Handler {
	b.Helper()
	_, addr := startManager(b, managertest.Options{})
	tg := startGate(b, []string{addr}, func(cfg *Config, deps *Deps) {
		deps.Logger = nil
		cfg.Idempotency.MaxEntries = 1 << 20
	})
	return tg.Handler()
}

func benchSubmit(b *testing.B, h http.Handler, key string) {
	req := httptest.NewRequest(http.MethodPost, "/v1/jobs", strings.NewReader(invoiceBody))
	req.Header.Set(api.HeaderIdempotencyKey, key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated {
		b.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
}

// BenchmarkSubmitReplay is the cache-hit path: parse the key, read, decode and
// fingerprint the body, find the COMMITTED entry, write the stored bytes.
func BenchmarkSubmitReplay(b *testing.B) {
	h := benchGate(b)
	benchSubmit(b, h, skey(1))
	b.ReportAllocs()
	for b.Loop() {
		benchSubmit(b, h, skey(1))
	}
}

// BenchmarkSubmitReplayParallel is the cache-hit path from many goroutines, on
// keys spread over the cache's shards.
func BenchmarkSubmitReplayParallel(b *testing.B) {
	h := benchGate(b)
	const keys = 256
	for i := range keys {
		benchSubmit(b, h, skey(i))
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			benchSubmit(b, h, skey(i%keys))
			i++
		}
	})
}

// BenchmarkSubmitMiss is the miss path: every submission is a new key,
// forwarded to the fake manager over loopback RPC and cached.
func BenchmarkSubmitMiss(b *testing.B) {
	h := benchGate(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		benchSubmit(b, h, fmt.Sprintf("bench:%d:%s", i, nonce))
		i++
	}
}

// benchPost serves a POST of body to path with an Idempotency-Key (as
// pkg/client sends on every worker call) and returns the answer's body.
func benchPost(b *testing.B, h http.Handler, path, key, body string) []byte {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set(api.HeaderIdempotencyKey, key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("POST %s: HTTP %d: %s", path, rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// BenchmarkJobLifecycle is a job's whole life through the gate, as the
// workers workload drives it, one op a job: its submission, a share of a
// lease of 16 jobs, and its completion, each an HTTP request to the gate's
// handler forwarded to the in-process manager (gate, RPC on both sides and
// the manager's Raft commits, in one process).
func BenchmarkJobLifecycle(b *testing.B) {
	const batch = 16
	h := benchGate(b)
	var leases []api.Lease
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if len(leases) == 0 {
			for j := range batch {
				benchSubmit(b, h, fmt.Sprintf("life:%d:%s", i+j, nonce))
			}
			var l api.LeaseList
			if err := json.Unmarshal(benchPost(b, h, "/v1/leases", fmt.Sprintf("w-lease-%d-%s", i, nonce),
				`{"max_jobs":16,"lease_seconds":30,"wait_seconds":1}`), &l); err != nil || len(l.Leases) != batch {
				b.Fatalf("lease: %d leases, %v", len(l.Leases), err)
			}
			leases = l.Leases
		}
		l := leases[0]
		leases = leases[1:]
		benchPost(b, h, "/v1/jobs/"+l.Job.JobID+"/complete", fmt.Sprintf("w-complete-%d-%s", i, nonce), `{"lease_id":"`+l.LeaseID+`","result":null}`)
		i++
	}
}
