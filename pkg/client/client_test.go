package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/keys"
)

func TestMain(m *testing.M) {
	if keysChild() {
		return
	}
	goleak.VerifyTestMain(m)
}

const testKey = "c1:1:0123456789abcdef"

func writeProblem(w http.ResponseWriter, status int, code api.Code, retryAfter string) {
	w.Header().Set("Content-Type", api.ContentTypeProblem)
	if retryAfter != "" {
		w.Header().Set(api.HeaderRetryAfter, retryAfter)
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.Problem{Type: api.ProblemTypeBase + string(code), Status: status, Code: code, Detail: "d", Reason: "r"})
}

func writeJob(w http.ResponseWriter, replayed bool) {
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.Header().Set(api.HeaderReplayed, fmt.Sprint(replayed))
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(api.Job{JobID: "j1", Type: "demo", Status: "committed"})
}

type seen struct {
	mu     sync.Mutex
	keys   []string
	bodies []string
	times  []time.Time
}

func (s *seen) record(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, r.Header.Get(api.HeaderIdempotencyKey))
	s.bodies = append(s.bodies, string(b))
	s.times = append(s.times, time.Now())
}

func fastOpts() Options {
	return Options{InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, AttemptTimeout: time.Second}
}

// scripted is a gate that answers its n-th request (from 1) as its script
// says, recording every request.
type scripted struct {
	seen
	n atomic.Int32
}

// scriptedGate starts a scripted gate, closed when the test ends, and a
// client of it with opts.
func scriptedGate(t *testing.T, opts Options, answer func(n int32, w http.ResponseWriter, r *http.Request)) (*Client, *scripted) {
	t.Helper()
	g := &scripted{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.record(r)
		answer(g.n.Add(1), w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New([]string{srv.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, g
}

// sameKeyAndBody fails unless every attempt the gate saw carried testKey
// and the first attempt's body.
func (s *seen) sameKeyAndBody(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.keys {
		if s.keys[i] != testKey || s.bodies[i] != s.bodies[0] {
			t.Fatalf("attempt %d: key %q body %q; first: %q %q", i, s.keys[i], s.bodies[i], testKey, s.bodies[0])
		}
	}
}

func TestSubmitRetries503HonouringRetryAfterWithSameKeyAndBody(t *testing.T) {
	c, s := scriptedGate(t, fastOpts(), func(n int32, w http.ResponseWriter, _ *http.Request) {
		switch n {
		case 1:
			writeProblem(w, 503, api.CodeUnavailable, "1")
		case 2:
			writeProblem(w, 409, api.CodeRequestInProgress, "")
		default:
			writeJob(w, true)
		}
	})
	res, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo", Payload: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.JobID != "j1" || !res.Replayed || res.Key != testKey {
		t.Fatalf("result %+v", res)
	}
	if len(s.keys) != 3 {
		t.Fatalf("%d attempts, want 3", len(s.keys))
	}
	s.sameKeyAndBody(t)
	if gap := s.times[1].Sub(s.times[0]); gap < time.Second {
		t.Fatalf("retried after %v, before Retry-After: 1", gap)
	}
}

func TestSubmitFailsOverToSecondGate(t *testing.T) {
	var s seen
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	downURL := down.URL
	down.Close() // connection refused from now on
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		writeJob(w, false)
	}))
	defer up.Close()
	c, err := New([]string{downURL, up.URL}, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ { // whichever gate a call starts on, it ends on the live one
		if _, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if len(s.keys) != 4 {
		t.Fatalf("live gate saw %d requests, want 4", len(s.keys))
	}
}

func TestSubmitGivesUpAfterMaxAttempts(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		writeProblem(w, 503, api.CodeUnavailable, "")
	}))
	defer srv.Close()
	o := fastOpts()
	o.MaxAttempts = 3
	c, _ := New([]string{srv.URL}, o)
	_, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
	if !errors.Is(err, ErrUnavailable) || n.Load() != 3 {
		t.Fatalf("err %v after %d attempts", err, n.Load())
	}
}

// TestSubmitErrorNamesItsKey: a Submit that drew its key and failed names
// the key in a *KeyError (still matching the answer's sentinel), so the
// caller can repeat the submission with it: the repeat carries the same key
// and gets the first attempt's job, not a second one.
func TestSubmitErrorNamesItsKey(t *testing.T) {
	var s seen
	var up atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		if !up.Load() {
			writeProblem(w, 503, api.CodeUnavailable, "")
			return
		}
		writeJob(w, true)
	}))
	defer srv.Close()
	k, err := OpenKeys(filepath.Join(t.TempDir(), "keys.json"), KeysOptions{ClientID: "host1.dc1:42"})
	if err != nil {
		t.Fatal(err)
	}
	o := fastOpts()
	o.Keys, o.MaxAttempts = k, 2
	c, _ := New([]string{srv.URL}, o)
	var submitted string
	for i, call := range []func() error{
		func() error { _, err := c.Submit(context.Background(), api.JobRequest{Type: "demo"}); return err },
		func() error { _, err := c.Cancel(context.Background(), "job-1", ""); return err },
	} {
		err := call()
		var ke *KeyError
		if !errors.As(err, &ke) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("error %v: want a *KeyError matching ErrUnavailable", err)
		}
		if last := s.keys[len(s.keys)-1]; ke.Key != last || !strings.Contains(err.Error(), last) {
			t.Fatalf("KeyError names %q, the attempts sent %q (%v)", ke.Key, last, err)
		}
		if i == 0 {
			submitted = ke.Key
		}
	}
	up.Store(true)
	res, err := c.SubmitWithKey(context.Background(), submitted, api.JobRequest{Type: "demo"})
	if err != nil || res.Key != submitted || s.keys[len(s.keys)-1] != submitted {
		t.Fatalf("repeat with the named key: %+v, %v; sent %q", res, err, s.keys[len(s.keys)-1])
	}
}

func TestErrorMappingForEveryCode(t *testing.T) {
	cases := []struct {
		code   api.Code
		status int
		want   error
	}{
		{api.CodeIdempotencyKeyMissing, 400, ErrKeyMissing},
		{api.CodeIdempotencyKeyInvalid, 400, ErrKeyInvalid},
		{api.CodeInvalidRequest, 400, ErrInvalidRequest},
		{api.CodeUnauthorized, 401, ErrUnauthorized},
		{api.CodeNotFound, 404, ErrNotFound},
		{api.CodeJobNotFound, 404, ErrJobNotFound},
		{api.CodeIdempotencyKeyNotFound, 404, ErrKeyNotFound},
		{api.CodeMethodNotAllowed, 405, ErrMethodNotAllowed},
		{api.CodeIdempotencyKeyExpired, 409, ErrKeyExpired},
		{api.CodeBodyTooLarge, 413, ErrBodyTooLarge},
		{api.CodeUnsupportedMediaType, 415, ErrUnsupportedMediaType},
		{api.CodeIdempotencyKeyReused, 422, ErrKeyReused},
		{api.CodeJobRejected, 422, ErrJobRejected},
		{api.CodeJobRejected, 429, ErrJobRejected},
		{api.CodeInternal, 500, ErrInternal},
		{api.CodeTenantQuotaExceeded, 429, ErrTenantQuotaExceeded},
		{api.CodeResponseTooLarge, 500, ErrResponseTooLarge},
	}
	all := []error{ErrTenantQuotaExceeded, ErrResponseTooLarge, ErrKeyMissing, ErrKeyInvalid, ErrInvalidRequest, ErrUnauthorized, ErrNotFound, ErrJobNotFound, ErrKeyNotFound, ErrMethodNotAllowed, ErrRequestInProgress, ErrKeyExpired, ErrBodyTooLarge, ErrUnsupportedMediaType, ErrKeyReused, ErrJobRejected, ErrInternal, ErrUnavailable, ErrOutboxFull}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d_%s", tc.status, tc.code), func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				writeProblem(w, tc.status, tc.code, "7")
			}))
			defer srv.Close()
			c, _ := New([]string{srv.URL}, fastOpts())
			_, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
			if n.Load() != 1 {
				t.Fatalf("%d attempts for a final answer", n.Load())
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != tc.status || e.Code != tc.code || e.Detail != "d" || e.Reason != "r" || e.RetryAfter != 7*time.Second {
				t.Fatalf("err %#v", err)
			}
			for _, s := range all {
				if got := errors.Is(err, s); got != (s == tc.want) {
					t.Fatalf("errors.Is(%v, %v) = %v", err, s, got)
				}
			}
		})
	}
	// The transient codes map too, once the attempts run out; each to its
	// own sentinel only.
	for _, tc := range []struct {
		code   api.Code
		status int
		want   error
	}{{api.CodeRequestInProgress, 409, ErrRequestInProgress}, {api.CodeUnavailable, 503, ErrUnavailable}, {api.CodeOutboxFull, 503, ErrOutboxFull}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeProblem(w, tc.status, tc.code, "")
		}))
		o := fastOpts()
		o.MaxAttempts = 2
		c, _ := New([]string{srv.URL}, o)
		_, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
		srv.Close()
		for _, s := range all {
			if got := errors.Is(err, s); got != (s == tc.want) {
				t.Fatalf("%s: errors.Is(%v, %v) = %v", tc.code, err, s, got)
			}
		}
	}
}

func TestSubmitStopsWithContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, 503, api.CodeUnavailable, "60")
	}))
	defer srv.Close()
	c, _ := New([]string{srv.URL}, fastOpts())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.SubmitWithKey(ctx, testKey, api.JobRequest{Type: "demo"})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err %v", err)
	}
}

func TestBearerTokenAndReads(t *testing.T) {
	mux := http.NewServeMux()
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer tok" {
				writeProblem(w, 401, api.CodeUnauthorized, "")
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /v1/jobs/{id}", auth(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.Job{JobID: r.PathValue("id")})
	}))
	mux.HandleFunc("GET /v1/idempotency-keys/{key}", auth(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.KeyInfo{Key: r.PathValue("key"), State: "committed"})
	}))
	mux.HandleFunc("GET /v1/jobs", auth(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("type") != "demo" || r.URL.Query().Get("limit") != "2" {
			writeProblem(w, 400, api.CodeInvalidRequest, "")
			return
		}
		var l api.JobList
		switch o, after := r.URL.Query().Get("order"), r.URL.Query().Get("after"); {
		case o == "" && after == "":
			next := "p/2"
			l = api.JobList{Jobs: []api.Job{{JobID: "a"}, {JobID: "b"}}, Next: &next}
		case o == "" && after == "p/2":
			l = api.JobList{Jobs: []api.Job{{JobID: "c"}}}
		case o == "desc" && after == "":
			next := "d/2"
			l = api.JobList{Jobs: []api.Job{{JobID: "c"}, {JobID: "b"}}, Next: &next}
		case o == "desc" && after == "d/2":
			l = api.JobList{Jobs: []api.Job{{JobID: "a"}}}
		default:
			writeProblem(w, 400, api.CodeInvalidRequest, "")
			return
		}
		json.NewEncoder(w).Encode(l)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	anon, _ := New([]string{srv.URL}, fastOpts())
	if _, err := anon.GetJob(context.Background(), "x"); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("without token: %v", err)
	}
	o := fastOpts()
	o.Token = "tok"
	c, _ := New([]string{strings.TrimPrefix(srv.URL, "http://")}, o)
	j, err := c.GetJob(context.Background(), "x")
	if err != nil || j.JobID != "x" {
		t.Fatalf("GetJob: %+v %v", j, err)
	}
	k, err := c.GetKey(context.Background(), "a/b:1:0123456789abcdef")
	if err != nil || k.Key != "a/b:1:0123456789abcdef" {
		t.Fatalf("GetKey: %+v %v", k, err)
	}
	var ids []string
	for j, err := range c.ListJobs(context.Background(), ListOptions{Type: "demo", Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.JobID)
	}
	if strings.Join(ids, ",") != "a,b,c" {
		t.Fatalf("listed %v", ids)
	}
	ids = nil
	for j, err := range c.ListJobs(context.Background(), ListOptions{Type: "demo", Limit: 2, Desc: true}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.JobID)
	}
	if strings.Join(ids, ",") != "c,b,a" {
		t.Fatalf("listed newest first %v", ids)
	}
}

// GetJobIn reads one datacenter's copy (?datacenter=) and reports a copy
// the datacenter does not hold as ErrJobNotFound, without retrying.
func TestGetJobInReadsOneDatacenter(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Query().Get("datacenter") != "dc1" {
			writeProblem(w, 404, api.CodeJobNotFound, "")
			return
		}
		json.NewEncoder(w).Encode(api.Job{JobID: strings.TrimPrefix(r.URL.Path, "/v1/jobs/"), Status: api.JobStatusCommitted})
	}))
	defer srv.Close()
	c, _ := New([]string{srv.URL}, fastOpts())
	j, err := c.GetJobIn(context.Background(), "j1", "dc1")
	if err != nil || j.JobID != "j1" {
		t.Fatalf("dc1: %+v %v", j, err)
	}
	calls.Store(0)
	if _, err := c.GetJobIn(context.Background(), "j1", "dc2"); !errors.Is(err, ErrJobNotFound) || calls.Load() != 1 {
		t.Fatalf("dc2: %v after %d calls; want ErrJobNotFound after one", err, calls.Load())
	}
}

func TestSubmitUsesKeys(t *testing.T) {
	var s seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		writeJob(w, false)
	}))
	defer srv.Close()
	k, err := OpenKeys(filepath.Join(t.TempDir(), "keys.json"), KeysOptions{ClientID: "host1.dc1:42"})
	if err != nil {
		t.Fatal(err)
	}
	o := fastOpts()
	o.Keys = k
	c, _ := New([]string{srv.URL}, o)
	for i := 0; i < 2; i++ {
		if _, err := c.Submit(context.Background(), api.JobRequest{Type: "demo"}); err != nil {
			t.Fatal(err)
		}
	}
	for i, raw := range s.keys {
		key, err := keys.Parse(raw)
		if err != nil || key.ClientID != "host1.dc1:42" || key.Sequence != uint64(i+1) || key.Nonce != k.Nonce() {
			t.Fatalf("key %d %q: %+v %v", i, raw, key, err)
		}
	}
	noKeys, _ := New([]string{srv.URL}, fastOpts())
	if _, err := noKeys.Submit(context.Background(), api.JobRequest{Type: "demo"}); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("Submit without Keys: %v", err)
	}
}

// The default transport keeps a connection per concurrent call: rounds of
// 64 calls at once, each held at the gate until all 64 have arrived, open
// 64 connections in the first round and reuse them in the next (net/http's
// default transport keeps 2 idle per host, and so opened ~62 a round).
func TestDefaultTransportReusesConnections(t *testing.T) {
	const concurrent, rounds = 64, 5
	var conns atomic.Int64
	var mu sync.Mutex
	arrived := 0
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		wait := release
		if arrived++; arrived == concurrent {
			arrived = 0
			close(release)
			release = make(chan struct{})
		}
		mu.Unlock()
		<-wait
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		_ = json.NewEncoder(w).Encode(api.Job{JobID: "j1", Status: "succeeded"})
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	opts := fastOpts()
	opts.AttemptTimeout = time.Minute // a round waits for its slowest call
	c, err := New([]string{srv.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.hc.CloseIdleConnections()
	for range rounds {
		var wg sync.WaitGroup
		for i := range concurrent {
			wg.Go(func() {
				if _, err := c.Complete(context.Background(), fmt.Sprintf("j%d", i), "l", nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	// The first round's 64, and at most another round's worth for calls
	// that started before their connection was back in the idle pool.
	if n := conns.Load(); n < concurrent || n > 2*concurrent {
		t.Fatalf("%d rounds of %d concurrent calls opened %d connections, want %d to %d", rounds, concurrent, n, concurrent, 2*concurrent)
	}
}

// A 422 idempotency_key_claimed says another datacenter's concurrent first
// attempt won the key, and that a retry with the same key gets that job's
// answer (docs/api.md): Submit retries it with the same key and body and
// returns the job, rather than an error for a job that exists.
func TestSubmitRetriesAClaimedKeyForItsJob(t *testing.T) {
	c, s := scriptedGate(t, fastOpts(), func(n int32, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			writeProblem(w, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyClaimed, "")
			return
		}
		writeJob(w, true)
	})
	res, err := c.SubmitWithKey(context.Background(), testKey, api.JobRequest{Type: "demo"})
	if err != nil {
		t.Fatalf("SubmitWithKey: %v", err)
	}
	if res.Job.JobID != "j1" || !res.Replayed {
		t.Fatalf("result %+v", res)
	}
	if s.n.Load() != 2 {
		t.Fatalf("%d attempts, want 2", s.n.Load())
	}
	s.sameKeyAndBody(t)
	if !errors.Is(&Error{Status: 422, Code: api.CodeIdempotencyKeyClaimed}, ErrKeyClaimed) {
		t.Fatal("ErrKeyClaimed does not match idempotency_key_claimed")
	}
}

// TestNewRefusesAGateWithoutHost: a gate address net/http could never send
// to (no host, an empty entry, another scheme, a port past 65535) is New's error, not a call
// that retries "no Host in request URL" until its attempts run out.
func TestNewRefusesAGateWithoutHost(t *testing.T) {
	for _, g := range []string{"", "http://", "https:///v1", "ftp://gate:21", "/path", "gate:99999", "http://gate:0"} {
		if c, err := New([]string{"http://127.0.0.1:8080", g}, Options{}); err == nil {
			t.Errorf("New took gate %q: %v", g, c.gates)
		}
	}
	for _, g := range []string{"gate:8080", "http://gate", "https://gate:8443/", "127.0.0.1:8080", "[::1]:8080", "http://gate:65535"} {
		if _, err := New([]string{g}, Options{}); err != nil {
			t.Errorf("gate %q: %v", g, err)
		}
	}
}

// TestNewRefusesATokenAnHTTPHeaderCannotCarry: a token with a control
// character (the trailing newline of a file or secret) is New's error,
// which does not echo it, not a call that net/http refuses at every
// attempt until they run out.
func TestNewRefusesATokenAnHTTPHeaderCannotCarry(t *testing.T) {
	for _, tok := range []string{"secret-token\n", "secret\r\ntoken", "secret\x00", "secret\x7f"} {
		_, err := New([]string{"http://127.0.0.1:8080"}, Options{Token: tok})
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("token %q: %v", tok, err)
		}
	}
	if _, err := New([]string{"http://127.0.0.1:8080"}, Options{Token: "a-token with\tspace"}); err != nil {
		t.Errorf("a token net/http sends: %v", err)
	}
}
