package gate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// boundedGate is a gate whose bodies are at most 1 KiB and whose bound of
// bodies in flight holds two of them.
func boundedGate(t *testing.T) (*testManager, *testGate) {
	t.Helper()
	mgr, addr := startManager(t, managertest.Options{})
	tg := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) {
		cfg.MaxBodyBytes = MinBodyBytes
		cfg.MaxInFlightBodyBytes = 2 * MinBodyBytes
	})
	return mgr, tg
}

// fullBody is a valid submission of exactly GATE_MAX_BODY_BYTES (1 KiB).
var fullBody = invoiceBody + strings.Repeat(" ", MinBodyBytes-len(invoiceBody))

// heldRequest is a submission on a connection of its own whose body the
// client holds: its headers and the first bytes of its body are sent, the
// rest when the test says.
type heldRequest struct {
	conn net.Conn
	rest string
}

// holdRequest sends the headers of a submission of body under key and its
// first 10 bytes; with chunked, the body is sent in chunks of unknown total
// length.
func holdRequest(t *testing.T, tg *testGate, key, body string, chunked bool) *heldRequest {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(tg.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	head := "POST /v1/jobs HTTP/1.1\r\nHost: gate\r\nContent-Type: application/json\r\n" + api.HeaderIdempotencyKey + ": " + key + "\r\n"
	first, rest := body[:10], body[10:]
	if chunked {
		head += "Transfer-Encoding: chunked\r\n\r\n"
		first = fmt.Sprintf("%x\r\n%s\r\n", len(first), first)
		rest = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(rest), rest)
	} else {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))
	}
	if _, err := io.WriteString(conn, head+first); err != nil {
		t.Fatal(err)
	}
	return &heldRequest{conn: conn, rest: rest}
}

// finish sends the rest of the body and reads the answer.
func (h *heldRequest) finish(t *testing.T) *http.Response {
	t.Helper()
	if _, err := io.WriteString(h.conn, h.rest); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(h.conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// waitReserved waits until the gate holds want bytes of bodies in flight.
func waitReserved(t *testing.T, tg *testGate, want int64) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		got := tg.bodies.reserved.Load()
		return got == want, fmt.Sprintf("%d bytes of bodies reserved (now %d)", want, got)
	})
}

// metricLine is the sample of the gate's metric name as /metrics serves it.
func metricLine(name string, v int64) string {
	return fmt.Sprintf("%s{datacenter=\"dc1\",node=\"test-gate\"} %d\n", name, v)
}

// TestInFlightBodiesRefuseBeyondTheBound: requests whose bodies are held
// fill GATE_MAX_IN_FLIGHT_BODY_BYTES; the next submission is refused 503
// unavailable with Retry-After, a problem, nothing forwarded or cached,
// while requests without a body (a worker's lease) are served; once the
// held requests end (one answered, one hung up mid-body) the bound is
// empty again, and the refused request's retry with the same key is
// admitted and then deduplicated as usual.
func TestInFlightBodiesRefuseBeyondTheBound(t *testing.T) {
	mgr, tg := boundedGate(t)
	a := holdRequest(t, tg, "held-a", fullBody, false)
	b := holdRequest(t, tg, "held-b", fullBody, false)
	waitReserved(t, tg, 2*MinBodyBytes)

	r := tg.submit(t, "refused", invoiceBody)
	p := wantProblem(t, r, http.StatusServiceUnavailable, api.CodeUnavailable)
	wantHeader(t, r, api.HeaderRetryAfter, "1")
	if !strings.Contains(p.Detail, EnvMaxInFlightBodyBytes) {
		t.Errorf("detail %q does not name %s", p.Detail, EnvMaxInFlightBodyBytes)
	}
	if n := mgr.Submits(); n != 0 {
		t.Fatalf("%d submissions reached the manager, want none", n)
	}
	// No body, nothing reserved: never refused by the bound.
	wantStatus(t, tg.do(t, http.MethodPost, "/v1/leases", nil), http.StatusOK)
	wantStatus(t, tg.get(t, "/v1/jobs"), http.StatusOK)
	m := string(tg.get(t, "/metrics").body)
	for _, want := range []string{
		metricLine("once_gate_http_requests_refused_total", 1),
		metricLine("once_gate_http_request_body_bytes_in_flight", 2*MinBodyBytes),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	wantStatus(t, result{status: a.finish(t).StatusCode}, http.StatusCreated)
	b.conn.Close() // the client hangs up mid-body
	waitReserved(t, tg, 0)

	wantJob(t, tg.submit(t, "refused", invoiceBody), http.StatusCreated)
	r = tg.submit(t, "refused", invoiceBody)
	wantJob(t, r, http.StatusCreated)
	wantHeader(t, r, api.HeaderReplayed, "true")
	if n := mgr.Submits(); n != 2 {
		t.Fatalf("%d submissions reached the manager, want 2 (held-a, refused)", n)
	}
	if !strings.Contains(string(tg.get(t, "/metrics").body), metricLine("once_gate_http_request_body_bytes_in_flight", 0)) {
		t.Error("the reserved bytes' gauge is not back to 0")
	}
}

// TestInFlightBodiesNeverLeak: whatever becomes of a request, answered
// (201, 400, 413) or abandoned by its client mid-body, with a
// Content-Length or chunked, the bytes it reserved are given back; a
// chunked body gives back what it did not use as soon as it has been read.
func TestInFlightBodiesNeverLeak(t *testing.T) {
	mgr, tg := boundedGate(t)
	chunked := func(s string) io.Reader { return struct{ io.Reader }{strings.NewReader(s)} } // no length known
	for _, c := range []struct {
		name   string
		body   io.Reader
		status int
	}{
		{"success", strings.NewReader(invoiceBody), http.StatusCreated},
		{"success chunked", chunked(invoiceBody), http.StatusCreated},
		{"invalid", strings.NewReader(`{"type":`), http.StatusBadRequest},
		{"invalid chunked", chunked(`{"type":`), http.StatusBadRequest},
		{"too large", strings.NewReader(fullBody + " "), http.StatusRequestEntityTooLarge},
		{"too large chunked", chunked(fullBody + " "), http.StatusRequestEntityTooLarge},
	} {
		r := tg.do(t, http.MethodPost, "/v1/jobs", c.body, api.HeaderIdempotencyKey, "leak-"+strings.ReplaceAll(c.name, " ", "-"))
		wantStatus(t, r, c.status)
		waitReserved(t, tg, 0)
	}
	for _, isChunked := range []bool{false, true} {
		h := holdRequest(t, tg, "hangup", fullBody, isChunked)
		waitReserved(t, tg, MinBodyBytes)
		h.conn.Close()
		waitReserved(t, tg, 0)
	}

	// A chunked body reserves GATE_MAX_BODY_BYTES while it is read, then
	// only its length while its submission is forwarded.
	arrived, release := holdFirstSubmit(t, mgr)
	h := holdRequest(t, tg, "shrink", invoiceBody, true)
	waitReserved(t, tg, MinBodyBytes)
	done := make(chan *http.Response, 1)
	go func() {
		_, _ = io.WriteString(h.conn, h.rest)
		res, err := http.ReadResponse(bufio.NewReader(h.conn), nil)
		if err != nil {
			done <- nil
			return
		}
		res.Body.Close()
		done <- res
	}()
	<-arrived
	waitReserved(t, tg, int64(len(invoiceBody)))
	release()
	if res := <-done; res == nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("held chunked submission: %v", res)
	}
	waitReserved(t, tg, 0)
}

// TestInFlightBodiesBoundBelowTheBodyLimitIsRefused: one request of the
// largest body must always fit, so a bound below GATE_MAX_BODY_BYTES is a
// configuration error naming the variable.
func TestInFlightBodiesBoundBelowTheBodyLimitIsRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 4 << 20
	cfg.MaxInFlightBodyBytes = 2 << 20
	err := cfg.Validate()
	if !errors.Is(err, config.ErrInvalid) || !errors.Is(err, config.ErrOutOfRange) {
		t.Fatalf("Validate: %v, want an out-of-range configuration error", err)
	}
	for _, want := range []string{EnvMaxInFlightBodyBytes, EnvMaxBodyBytes} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	_, err = LoadConfig(nil, func(k string) (string, bool) {
		v, ok := map[string]string{EnvMaxBodyBytes: "8388608", EnvMaxInFlightBodyBytes: "8388607"}[k]
		return v, ok
	}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), EnvMaxInFlightBodyBytes) {
		t.Fatalf("LoadConfig: %v, want an error naming %s", err, EnvMaxInFlightBodyBytes)
	}
	cfg.MaxInFlightBodyBytes = cfg.MaxBodyBytes
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a bound of one largest body: %v", err)
	}
}
