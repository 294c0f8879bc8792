package loadgen

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// A gate that drops a keep-alive connection after answering on it (as one
// does when its idle timeout fires between two requests) must cost the run
// no error: the fast path redials and sends the request again, once.
func TestFastPathRedialsAConnectionTheGateDropped(t *testing.T) {
	t.Parallel()
	var served, dropped atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			return
		}
		n := served.Add(1)
		body := fmt.Sprintf(`{"job_id":"job-%s","status":"committed"}`, r.Header.Get("Idempotency-Key"))
		if n%3 != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(body))
			return
		}
		// Answer as if the connection stayed open, then close it.
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		fmt.Fprintf(bw, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		_ = bw.Flush()
		_ = c.Close()
		dropped.Add(1)
	}))
	defer srv.Close()
	res := runT(t, Spec{Gates: []string{srv.URL}, Keys: KeysUnique, Concurrency: 1, Requests: 30})
	if res.OK() != 30 || len(res.Errors) != 0 || res.MaxJobIDsPerKey != 1 {
		t.Fatalf("%d 2xx of 30, errors %v: a dropped keep-alive connection cost requests", res.OK(), res.Errors)
	}
	if dropped.Load() == 0 {
		t.Fatal("the gate never dropped a connection: the test tested nothing")
	}
}

// Every answer that says Connection: close is honoured: the next request
// goes on a new connection, and no request is lost.
func TestFastPathHonoursConnectionClose(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"job_id":"job-1"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	res := runT(t, Spec{Gates: []string{srv.URL}, Keys: KeysUnique, Concurrency: 2, Requests: 20})
	if res.OK() != 20 || len(res.Errors) != 0 {
		t.Fatalf("%d 2xx of 20, errors %v", res.OK(), res.Errors)
	}
	if conns.Load() < 20 {
		t.Fatalf("%d connections for 20 answers that each closed theirs", conns.Load())
	}
}
