package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// TestSubmitRetriesOnlyTransientAnswers: each answer a gate (or a proxy)
// may give a submission, then a 201: the transient ones are retried with
// the same key and body, the final ones returned at once as their
// sentinel, never followed by another attempt (a 409 idempotency_key_expired
// or 422 idempotency_key_reused retried could only fail again, or worse).
// Guard: the code was right.
func TestSubmitRetriesOnlyTransientAnswers(t *testing.T) {
	problemOf := func(status int, code api.Code) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) { writeProblem(w, status, code, "0") }
	}
	text := func(status int) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) { http.Error(w, "proxy says no", status) }
	}
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter)
		final  error // nil: retried
	}{
		{"409 request_in_progress", problemOf(http.StatusConflict, api.CodeRequestInProgress), nil},
		{"409 idempotency_key_expired", problemOf(http.StatusConflict, api.CodeIdempotencyKeyExpired), ErrKeyExpired},
		{"422 idempotency_key_reused", problemOf(http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused), ErrKeyReused},
		{"422 idempotency_key_claimed", problemOf(http.StatusUnprocessableEntity, api.CodeIdempotencyKeyClaimed), nil},
		{"422 job_rejected", problemOf(http.StatusUnprocessableEntity, api.CodeJobRejected), ErrJobRejected},
		{"429 job_rejected", problemOf(http.StatusTooManyRequests, api.CodeJobRejected), ErrJobRejected},
		{"429 of a proxy", text(http.StatusTooManyRequests), nil},
		{"503 unavailable", problemOf(http.StatusServiceUnavailable, api.CodeUnavailable), nil},
		{"503 outbox_full", problemOf(http.StatusServiceUnavailable, api.CodeOutboxFull), nil},
		{"502 of a proxy", text(http.StatusBadGateway), nil},
		{"504 of a proxy", text(http.StatusGatewayTimeout), nil},
		{"500 internal", problemOf(http.StatusInternalServerError, api.CodeInternal), ErrInternal},
		{"413 body_too_large", problemOf(http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge), ErrBodyTooLarge},
		{"400 idempotency_key_invalid", problemOf(http.StatusBadRequest, api.CodeIdempotencyKeyInvalid), ErrKeyInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, g := scriptedGate(t, fastOpts(), func(n int32, w http.ResponseWriter, _ *http.Request) {
				if n == 1 {
					tc.answer(w)
					return
				}
				writeJob(w, true)
			})
			res, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo", Payload: []byte(`{"n":1}`)})
			switch {
			case tc.final == nil && (err != nil || !res.Replayed || g.n.Load() != 2):
				t.Fatalf("%v, %+v after %d attempts: want the replayed job after 2", err, res, g.n.Load())
			case tc.final != nil && (!errors.Is(err, tc.final) || g.n.Load() != 1):
				t.Fatalf("%v after %d attempts: want %v after 1", err, g.n.Load(), tc.final)
			}
			g.sameKeyAndBody(t)
		})
	}
}

// TestSubmitRetriesAConnectionCutAfterTheRequest: the gate reads the whole
// request and then the connection ends, with no answer or with part of
// one: the job may have been admitted, and the retry (the same key, the
// same body bytes) gets its replay. Guard: the code was right.
func TestSubmitRetriesAConnectionCutAfterTheRequest(t *testing.T) {
	for _, cut := range []string{"before the answer", "inside the answer's head", "inside the answer's body"} {
		t.Run(cut, func(t *testing.T) {
			c, g := scriptedGate(t, fastOpts(), func(n int32, w http.ResponseWriter, _ *http.Request) {
				if n > 1 {
					writeJob(w, true)
					return
				}
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				switch cut {
				case "inside the answer's head":
					buf.WriteString("HTTP/1.1 201 Created\r\nContent-Ty")
				case "inside the answer's body":
					buf.WriteString("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"job_id\":\"j")
				}
				buf.Flush()
				conn.Close()
			})
			res, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo", Payload: []byte(`{"n":1}`)})
			if err != nil || res.Job.JobID != "j1" || !res.Replayed {
				t.Fatalf("%v, %+v", err, res)
			}
			if n := g.n.Load(); n < 2 {
				t.Fatalf("%d attempts", n)
			}
			g.sameKeyAndBody(t)
		})
	}
}

// TestSubmitRetriesThroughAnotherGateWithTheSameKeyAndBody: the first
// gate's 503 is retried on the second gate of the list, which gets the key
// and the body bytes the first got. Guard: the code was right.
func TestSubmitRetriesThroughAnotherGateWithTheSameKeyAndBody(t *testing.T) {
	var s seen
	gates := make([]string, 2)
	hits := make([]int, 2)
	for i := range gates {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.record(r)
			s.mu.Lock()
			hits[i]++
			first := len(s.keys) == 1
			s.mu.Unlock()
			if first {
				writeProblem(w, http.StatusServiceUnavailable, api.CodeUnavailable, "0")
				return
			}
			writeJob(w, true)
		}))
		t.Cleanup(srv.Close)
		gates[i] = srv.URL
	}
	c, err := New(gates, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo", Payload: []byte(`{"b":[1,2]}`)}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	h := fmt.Sprint(hits)
	s.mu.Unlock()
	if h != "[1 1]" {
		t.Fatalf("attempts per gate %s, want one on each", h)
	}
	s.sameKeyAndBody(t)
}

// TestSubmitRefusesA2xxThatIsNotAJob: a 2xx answer whose body is not a
// JSON object (a proxy's page, "null", nothing, half a job) is a clear
// error naming the key, never a panic and never a Result holding an empty
// job as if it had been admitted ("null" decoded into nothing was one).
func TestSubmitRefusesA2xxThatIsNotAJob(t *testing.T) {
	for _, body := range []string{"null", " null\n", "", "<html>ok</html>", `{"job_id":`, `"j1"`, `[]`} {
		t.Run(fmt.Sprintf("%q", body), func(t *testing.T) {
			c, g := scriptedGate(t, fastOpts(), func(_ int32, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", api.ContentTypeJSON)
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte(body))
			})
			res, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
			if err == nil || res != nil {
				t.Fatalf("answer %q: %+v, %v; want an error", body, res, err)
			}
			if null := strings.TrimSpace(body) == "null"; null != errors.Is(err, errNullAnswer) {
				t.Fatalf("answer %q: %v", body, err)
			}
			if g.n.Load() != 1 {
				t.Fatalf("%d attempts", g.n.Load())
			}
		})
	}
}

// TestSubmitGivesUpAtOnceOnARetryAfterNoGateSends: with no deadline, a
// Retry-After of years (a proxy's; a gate's is at most an hour) ends the
// call at once with the answer, rather than sleeping it (Submit hung).
// Within the bound it is honoured (TestSubmitRetries503HonouringRetryAfter...).
func TestSubmitGivesUpAtOnceOnARetryAfterNoGateSends(t *testing.T) {
	for _, ra := range []string{"99999999", "3601"} {
		c, g := scriptedGate(t, fastOpts(), func(_ int32, w http.ResponseWriter, _ *http.Request) {
			writeProblem(w, http.StatusServiceUnavailable, api.CodeUnavailable, ra)
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := c.SubmitWithKey(ctx, testKey, api.JobRequest{Type: "demo"})
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Minute): // a failure detector, not a wait for a condition
			cancel()
			<-done
			t.Fatalf("Retry-After %s: the call is still waiting after a minute", ra)
		}
		cancel()
		if !errors.Is(err, errRetryWaitTooLong) || !errors.Is(err, ErrUnavailable) || g.n.Load() != 1 {
			t.Fatalf("Retry-After %s: %v after %d attempts, want unavailable after 1", ra, err, g.n.Load())
		}
	}
}

// TestSubmitRefusesA2xxOverTheBound: a 2xx answer longer than any a gate
// sends, well-formed or endless, is read up to the bound and refused with
// an error (not retried: the submission may have been admitted), never
// read on until the process runs out of memory (it was read whole).
func TestSubmitRefusesA2xxOverTheBound(t *testing.T) {
	old := maxAnswerBytes
	maxAnswerBytes = 1 << 20
	t.Cleanup(func() { maxAnswerBytes = old })
	o := fastOpts()
	o.AttemptTimeout = time.Hour
	for _, endless := range []bool{false, true} {
		c, g := scriptedGate(t, o, func(_ int32, w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", api.ContentTypeJSON)
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"job_id":"j1","type":"demo","payload":"`))
			chunk := []byte(strings.Repeat("a", 64<<10))
			for n := 0; endless || n < 32; n++ { // 2 MiB, or until the client hangs up
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			w.Write([]byte(`"}`))
		})
		res, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
		if !errors.Is(err, errAnswerTooLarge) || res != nil || g.n.Load() != 1 {
			t.Fatalf("endless %v: %v, %v after %d attempts; want the answer refused after 1", endless, res != nil, err, g.n.Load())
		}
	}
	// At the bound, the answer is read.
	maxAnswerBytes = 2<<20 + 64
	c, _ := scriptedGate(t, o, func(_ int32, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"job_id":"j1","type":"demo","payload":"` + strings.Repeat("a", 2<<20) + `"}`))
	})
	if res, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"}); err != nil || res.Job.JobID != "j1" {
		t.Fatalf("an answer within the bound: %v", err)
	}
}

// TestBackoffNeverWrapsToAShortWait: InitialBackoff doubled past what an
// int64 holds is MaxBackoff (drawn from [MaxBackoff/2, MaxBackoff]), not
// whatever the shift wrapped to (2^34+1 ns shifted by 30 was about 1 s).
func TestBackoffNeverWrapsToAShortWait(t *testing.T) {
	for _, initial := range []time.Duration{1<<34 + 1, 3 * time.Second, time.Millisecond, 1} {
		c, err := New([]string{"http://gate:1"}, Options{InitialBackoff: initial, MaxBackoff: time.Minute, MaxAttempts: 100})
		if err != nil {
			t.Fatal(err)
		}
		for attempt := 1; attempt < 100; attempt++ {
			want := time.Minute
			if attempt-1 < 62 && initial <= time.Minute>>(attempt-1) {
				want = initial << (attempt - 1)
			}
			if d := c.backoff(attempt, nil); d < want/2 || d > want {
				t.Fatalf("InitialBackoff %v, attempt %d: waits %v, want within [%v, %v]", initial, attempt, d, want/2, want)
			}
		}
	}
}
