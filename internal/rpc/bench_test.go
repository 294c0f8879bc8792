package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// trivialSvc answers every submission at once, as a committed job.
type trivialSvc struct{ *fakeManager }

func (trivialSvc) Submit(ctx context.Context, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	id := "j-" + req.Key
	return &rpcpb.SubmitResponse{Outcome: OutcomeCommitted, JobId: id, Job: &rpcpb.Job{
		JobId: id, Type: req.GetJob().GetType(), Status: api.JobStatusCommitted, IdempotencyKey: req.Key,
		CreatedAt: "2026-11-23T20:00:00Z", Datacenters: map[string]*rpcpb.DatacenterStatus{"dc1": {Status: "committed"}},
		Payload: req.GetJob().GetPayload(), DatacentersSet: true,
	}}, nil
}

// httpSubmitHandler is the submit endpoint this package served before the
// stream (one JSON request and answer per HTTP/1.1 exchange), kept here only as
// the benchmark's baseline.
func httpSubmitHandler(svc Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req rpcpb.SubmitRequest
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxWorkerRequestBytes))
		if err == nil {
			err = json.Unmarshal(body, &req)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, Errorf(CodeInvalid, "decode submit request: %v", err))
			return
		}
		resp, err := svc.Submit(r.Context(), &req)
		if err != nil {
			writeError(w, http.StatusInternalServerError, Errorf(CodeInternal, "%v", err))
			return
		}
		b, _ := json.Marshal(resp)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
}

// httpSubmit is the client side of that baseline.
func httpSubmit(ctx context.Context, hc *http.Client, url string, req *rpcpb.SubmitRequest) (*rpcpb.SubmitResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	var out rpcpb.SubmitResponse
	return &out, json.Unmarshal(b, &out)
}

const benchConcurrency = 64

// cpuTime is the process's CPU time so far (user + system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runConcurrent calls f b.N times from benchConcurrency goroutines and
// reports, besides ns/op, the process CPU time per call (client and server
// together), which neighbours on a shared machine disturb less than wall time.
func runConcurrent(b *testing.B, f func(i int64) (*rpcpb.SubmitResponse, error)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() {
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	}()
	for range benchConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				r, err := f(i)
				if err != nil {
					b.Error(err)
					return
				}
				if r.Outcome != OutcomeCommitted {
					b.Errorf("outcome %s", r.Outcome)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func benchRequest(i int64) *rpcpb.SubmitRequest {
	return &rpcpb.SubmitRequest{
		Tenant:      "tenant-1",
		Key:         fmt.Sprintf("c7b9a3e2-bench-%012d", i),
		Fingerprint: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Job:         &rpcpb.JobRequest{Type: "email.send", Payload: json.RawMessage(`{"to":"someone@example.com","template":"welcome","vars":{"name":"Ada"}}`)},
		WaitMillis:  5000,
	}
}

// BenchmarkSubmit compares one submission per HTTP/1.1 JSON exchange (the
// protocol before the stream) with the batched gRPC stream, at 64 concurrent
// callers on loopback, against a Service that answers at once: ns/op is the
// cost of the protocol on both sides (client and server share the process).
func BenchmarkSubmit(b *testing.B) {
	svc := trivialSvc{&fakeManager{leader: true}}
	ctx := context.Background()
	b.Run("http-json", func(b *testing.B) {
		srv := httptest.NewServer(httpSubmitHandler(svc))
		defer srv.Close()
		tr := &http.Transport{MaxIdleConnsPerHost: benchConcurrency}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr}
		runConcurrent(b, func(i int64) (*rpcpb.SubmitResponse, error) {
			return httpSubmit(ctx, hc, srv.URL+"/rpc/v1/submit", benchRequest(i))
		})
	})
	b.Run("stream", func(b *testing.B) {
		c := NewClient(ClientConfig{Resolver: StaticResolver{serve(b, svc)}})
		defer c.Close()
		s0, si0, r0, ri0 := batchStats.sent.Load(), batchStats.sentItems.Load(), batchStats.received.Load(), batchStats.receivedItems.Load()
		runConcurrent(b, func(i int64) (*rpcpb.SubmitResponse, error) {
			return c.Submit(ctx, benchRequest(i))
		})
		b.ReportMetric(float64(batchStats.sentItems.Load()-si0)/float64(max(batchStats.sent.Load()-s0, 1)), "subs/msg")
		b.ReportMetric(float64(batchStats.receivedItems.Load()-ri0)/float64(max(batchStats.received.Load()-r0, 1)), "answers/msg")
	})
}

// countingConn counts the reads and writes of a connection, each one a
// syscall on a TCP connection (ioCounts, for BenchmarkSubmit and
// BenchmarkWorkerCalls: reads/op and writes/op, both sides together).
type countingConn struct {
	net.Conn
	n *ioCounts
}

type ioCounts struct{ reads, writes atomic.Int64 }

func (c countingConn) Read(p []byte) (int, error) {
	c.n.reads.Add(1)
	return c.Conn.Read(p)
}

func (c countingConn) Write(p []byte) (int, error) {
	c.n.writes.Add(1)
	return c.Conn.Write(p)
}

// countingListener wraps every accepted connection in a countingConn.
type countingListener struct {
	net.Listener
	n *ioCounts
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

// countedClient serves svc and returns a client of it whose connections,
// and the server's, count their reads and writes in n.
func countedClient(b *testing.B, svc Service, n *ioCounts) *Client {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := NewServer(svc, ServerConfig{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(countingListener{ln, n}) }()
	b.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	var d net.Dialer
	c := NewClient(ClientConfig{Resolver: StaticResolver{ln.Addr().String()}, AttemptTimeout: time.Minute,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return countingConn{conn, n}, nil
		}})
	b.Cleanup(c.Close)
	return c
}

// reportIO reports the reads and writes since n0 per op.
func reportIO(b *testing.B, n *ioCounts, r0, w0 int64) {
	b.ReportMetric(float64(n.reads.Load()-r0)/float64(b.N), "reads/op")
	b.ReportMetric(float64(n.writes.Load()-w0)/float64(b.N), "writes/op")
}

// BenchmarkStreamIO is BenchmarkSubmit/stream with the reads and writes of
// both sides' connections counted (each a syscall), and the submit stream's
// messages: fewer, larger messages and flushes show as fewer writes/op.
func BenchmarkStreamIO(b *testing.B) {
	var n ioCounts
	c := countedClient(b, trivialSvc{&fakeManager{leader: true}}, &n)
	ctx := context.Background()
	if _, err := c.Submit(ctx, benchRequest(0)); err != nil { // connect first
		b.Fatal(err)
	}
	s0, r0 := batchStats.sent.Load(), batchStats.received.Load()
	nr, nw := n.reads.Load(), n.writes.Load()
	runConcurrent(b, func(i int64) (*rpcpb.SubmitResponse, error) {
		return c.Submit(ctx, benchRequest(i))
	})
	reportIO(b, &n, nr, nw)
	b.ReportMetric(float64(batchStats.sent.Load()-s0)/float64(b.N), "sends/op")
	b.ReportMetric(float64(batchStats.received.Load()-r0)/float64(b.N), "recvs/op")
}

// BenchmarkWorkerCalls measures a worker call's cost on both sides, client
// and server in one process, at 64 concurrent callers: complete (an item of
// the submit stream) and lease (a unary call), against stubWorkers.
func BenchmarkWorkerCalls(b *testing.B) {
	ctx := context.Background()
	b.Run("complete", func(b *testing.B) {
		var n ioCounts
		c := countedClient(b, workersManager{&fakeManager{leader: true}, stubWorkers{}}, &n)
		if _, err := c.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "t", JobId: "j", LeaseId: "l"}); err != nil {
			b.Fatal(err)
		}
		nr, nw := n.reads.Load(), n.writes.Load()
		runConcurrent(b, func(i int64) (*rpcpb.SubmitResponse, error) {
			id := fmt.Sprintf("j-%012d", i)
			_, err := c.Complete(ctx, &rpcpb.CompleteRequest{Tenant: "tenant-1", JobId: id, LeaseId: "l-" + id, Result: json.RawMessage(`{"ok":true}`)})
			return &rpcpb.SubmitResponse{Outcome: OutcomeCommitted}, err
		})
		reportIO(b, &n, nr, nw)
	})
	b.Run("lease", func(b *testing.B) {
		var n ioCounts
		c := countedClient(b, workersManager{&fakeManager{leader: true}, stubWorkers{}}, &n)
		req := func() *rpcpb.LeaseRequest {
			return &rpcpb.LeaseRequest{Tenant: "tenant-1", Worker: "127.0.0.1:5555", Types: []string{"email.send"}, MaxJobs: 16, LeaseForNanos: int64(30 * time.Second)}
		}
		if _, err := c.Lease(ctx, req()); err != nil {
			b.Fatal(err)
		}
		nr, nw := n.reads.Load(), n.writes.Load()
		runConcurrent(b, func(i int64) (*rpcpb.SubmitResponse, error) {
			_, err := c.Lease(ctx, req())
			return &rpcpb.SubmitResponse{Outcome: OutcomeCommitted}, err
		})
		reportIO(b, &n, nr, nw)
	})
}
