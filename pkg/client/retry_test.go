package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/once-dev/once/pkg/api"
)

// A 408 (a proxy timed out reading the request) and a 429 that is not a
// gate's problem (a proxy's rate limit) never reached a gate: Submit
// retries them, with the same key and body, as it retries a 502.
func TestSubmitRetriesAnswersThatNeverReachedAGate(t *testing.T) {
	c, s := scriptedGate(t, fastOpts(), func(n int32, w http.ResponseWriter, _ *http.Request) {
		switch n {
		case 1:
			http.Error(w, "request timeout", http.StatusRequestTimeout)
		case 2:
			w.Header().Set(api.HeaderRetryAfter, "0")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		default:
			writeJob(w, false)
		}
	})
	res, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
	if err != nil {
		t.Fatalf("SubmitWithKey: %v", err)
	}
	if res.Job.JobID != "j1" || s.n.Load() != 3 {
		t.Fatalf("job %q after %d attempts, want j1 after 3", res.Job.JobID, s.n.Load())
	}
	s.sameKeyAndBody(t)
}

// A gate's own 429 (tenant_quota_exceeded, job_rejected) is still its
// answer: returned at once.
func TestSubmitReturnsAGate429AtOnce(t *testing.T) {
	c, g := scriptedGate(t, fastOpts(), func(_ int32, w http.ResponseWriter, _ *http.Request) {
		writeProblem(w, http.StatusTooManyRequests, api.CodeTenantQuotaExceeded, "0")
	})
	_, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
	if !errors.Is(err, ErrTenantQuotaExceeded) || g.n.Load() != 1 {
		t.Fatalf("err %v after %d attempts, want tenant_quota_exceeded after 1", err, g.n.Load())
	}
}

// An answer whose Retry-After ends past the context's deadline is not
// slept on until the deadline: the call returns at once, its error
// wrapping context.DeadlineExceeded and the answer, as if the context had
// run out.
func TestSubmitGivesUpAtOnceWhenRetryAfterPassesTheDeadline(t *testing.T) {
	c, g := scriptedGate(t, fastOpts(), func(_ int32, w http.ResponseWriter, _ *http.Request) {
		writeProblem(w, http.StatusServiceUnavailable, api.CodeUnavailable, "3600")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := c.SubmitWithKey(ctx, testKey, api.JobRequest{Type: "demo"})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v, want it to wrap context.DeadlineExceeded and unavailable", err)
	}
	if ctx.Err() != nil || g.n.Load() != 1 {
		t.Fatalf("returned after %d attempts with the context %v: want 1, before its deadline", g.n.Load(), ctx.Err())
	}
}

// Retry-After in both forms of RFC 9110: delta-seconds, and an HTTP date;
// a number of seconds too large for a time.Duration is the largest one,
// never a wrapped-around value.
func TestRetryAfterForms(t *testing.T) {
	for _, tc := range []struct {
		header string
		ok     func(time.Duration) bool
	}{
		{"7", func(d time.Duration) bool { return d == 7*time.Second }},
		{time.Now().Add(time.Hour).UTC().Format(http.TimeFormat), func(d time.Duration) bool { return d > 0 && d <= time.Hour }},
		{time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), func(d time.Duration) bool { return d == 0 }},
		{"99999999999999999", func(d time.Duration) bool { return d == time.Duration(1<<63-1) }},
		{"-1", func(d time.Duration) bool { return d == 0 }},
		{"soon", func(d time.Duration) bool { return d == 0 }},
	} {
		resp := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}}
		resp.Header.Set(api.HeaderRetryAfter, tc.header)
		if e := problem(resp, nil); !tc.ok(e.RetryAfter) {
			t.Errorf("Retry-After %q: %v", tc.header, e.RetryAfter)
		}
	}
}

// A non-2xx answer with an endless body (a misbehaving proxy's error page)
// is read up to a bound, not until the attempt times out: the call sees
// the 502 and retries it at once.
func TestSubmitReadsAnErrorBodyUpToABound(t *testing.T) {
	o := fastOpts()
	o.AttemptTimeout = time.Hour
	c, g := scriptedGate(t, o, func(n int32, w http.ResponseWriter, r *http.Request) {
		if n > 1 {
			writeJob(w, false)
			return
		}
		w.WriteHeader(http.StatusBadGateway)
		chunk := make([]byte, 32<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return // the client hung up
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.SubmitWithKey(ctx, testKey, api.JobRequest{Type: "demo"})
	if err != nil || res.Job.JobID != "j1" || g.n.Load() != 2 {
		t.Fatalf("after %d attempts: %+v, %v; want j1 after 2", g.n.Load(), res, err)
	}
}

// A 301, 302 or 303 in front of the gate (a proxy sending http:// on to
// https://, say) makes net/http follow a POST with a GET of the new
// address, without the body: the submission never reaches a gate, and the
// GET's answer (a list of jobs) must not be taken for its job. The call
// fails with the redirect's status, at once; a 307 or 308, which repeats
// the method, the key and the body, is followed.
func TestSubmitRedirectedToAGetIsAnErrorNotAJob(t *testing.T) {
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther} {
		c, g := scriptedGate(t, fastOpts(), func(_ int32, w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/jobs" && r.Method == http.MethodPost {
				http.Redirect(w, r, "/moved/v1/jobs", status)
				return
			}
			w.Header().Set("Content-Type", api.ContentTypeJSON)
			w.Write([]byte(`{"jobs":[],"next":null}`))
		})
		res, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
		var e *Error
		if !errors.As(err, &e) || e.Status != status {
			t.Fatalf("%d: SubmitWithKey = %+v, %v; want an *Error of status %d", status, res, err, status)
		}
		if n := g.n.Load(); n != 2 {
			t.Fatalf("%d: the gate saw %d requests, want the POST and the GET it was redirected to, once", status, n)
		}
	}
	c, g := scriptedGate(t, fastOpts(), func(_ int32, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/jobs" {
			http.Redirect(w, r, "/moved/v1/jobs", http.StatusTemporaryRedirect)
			return
		}
		writeJob(w, false)
	})
	res, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
	if err != nil || res.Job.JobID != "j1" {
		t.Fatalf("307: SubmitWithKey = %+v, %v; want job j1", res, err)
	}
	g.sameKeyAndBody(t)
}

// A context that ends while an attempt is in flight ends the call with an
// error wrapping both the context's error and the last answer a gate gave
// (here a 503), as when it ends during the wait between attempts: the
// caller still reads the answer's problem with errors.Is and errors.As.
func TestSubmitCancelledDuringAnAttemptKeepsTheLastAnswer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, g := scriptedGate(t, fastOpts(), func(n int32, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			writeProblem(w, http.StatusServiceUnavailable, api.CodeUnavailable, "0")
			return
		}
		cancel() // the caller gives up while this attempt is in flight
		<-r.Context().Done()
	})
	_, err := c.SubmitWithKey(ctx, testKey, api.JobRequest{Type: "demo"})
	var e *Error
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("err %v, want it to wrap context.Canceled and the 503 unavailable", err)
	}
	if n := g.n.Load(); n != 2 {
		t.Fatalf("the gate saw %d attempts, want 2 (none after the cancel)", n)
	}
	g.sameKeyAndBody(t)
}

// A proxy's 502 error page (HTML, not a problem) on every attempt: each is
// retried with the same key and body, and the call's *Error carries the
// page's start as its Detail, cut at a whole UTF-8 character within 200
// bytes. Detail was cut at byte 200, inside a character, and was not
// UTF-8.
func TestSubmitGivesAProxyErrorPageAsValidUTF8(t *testing.T) {
	page := "<html><title>Passerelle défaillante</title>x" + strings.Repeat("é", 200) + "</html>"
	o := fastOpts()
	o.MaxAttempts = 3
	c, g := scriptedGate(t, o, func(_ int32, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte(page))
	})
	_, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusBadGateway || e.Code != "" || g.n.Load() != 3 {
		t.Fatalf("err %v after %d attempts, want a code-less 502 after 3", err, g.n.Load())
	}
	g.sameKeyAndBody(t)
	if !utf8.ValidString(e.Detail) || len(e.Detail) > 200 || len(e.Detail) < 196 || !strings.HasPrefix(page, e.Detail) {
		t.Fatalf("Detail %q (%d bytes): want the page's first whole characters within 200 bytes", e.Detail, len(e.Detail))
	}
}
