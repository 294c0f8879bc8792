package gate

import (
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
