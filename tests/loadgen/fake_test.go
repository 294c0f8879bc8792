package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/once-dev/once/pkg/api"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeGate is an in-memory gate that keeps the submit contract's dedup
// promise (one job per key; a duplicate with the identical body is replayed
// byte for byte; a different body is 422 idempotency_key_reused) and counts
// what it receives. Its servers listen on 127.0.0.1.
type fakeGate struct {
	// hook, if set, runs first for every POST, with the request's number
	// (from 1). It may block (a stall) and may return a status and problem
	// code to answer with instead of processing the request.
	hook func(n int64, r *http.Request) (status int, code string)
	// noDedup makes the gate create a new job for every request (a broken
	// gate, for checking that duplicates are detected).
	noDedup bool

	requests    atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64

	mu        sync.Mutex
	entries   map[string]*fakeEntry
	nextJob   int
	perServer []int64
	clients   []map[string]bool // per server: client_ids seen
}

type fakeEntry struct {
	body, resp []byte
}

var structuredKey = regexp.MustCompile(`^([A-Za-z0-9._@:-]{1,128}):(0|[1-9][0-9]*):([0-9a-f]{16})$`)

// startFake starts a fake gate behind n servers and returns their URLs.
func startFake(t testing.TB, n int, configure func(*fakeGate)) (*fakeGate, []string) {
	t.Helper()
	g := &fakeGate{entries: map[string]*fakeEntry{}, perServer: make([]int64, n), clients: make([]map[string]bool, n)}
	if configure != nil {
		configure(g)
	}
	var urls []string
	for i := range n {
		g.clients[i] = map[string]bool{}
		srv := httptest.NewServer(g.handler(i))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	return g, urls
}

func (g *fakeGate) handler(server int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		n := g.requests.Add(1)
		cur := g.inFlight.Add(1)
		defer g.inFlight.Add(-1)
		for {
			m := g.maxInFlight.Load()
			if cur <= m || g.maxInFlight.CompareAndSwap(m, cur) {
				break
			}
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if g.hook != nil {
			if st, code := g.hook(n, r); st != 0 {
				problem(w, st, api.Code(code))
				return
			}
		}
		key := r.Header.Get(api.HeaderIdempotencyKey)
		if key == "" {
			problem(w, 400, api.CodeIdempotencyKeyMissing)
			return
		}
		m := structuredKey.FindStringSubmatch(key)
		if m == nil {
			problem(w, 400, api.CodeIdempotencyKeyInvalid)
			return
		}
		if r.Header.Get("Content-Type") != api.ContentTypeJSON {
			problem(w, 415, api.CodeUnsupportedMediaType)
			return
		}
		var req api.JobRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if dec.Decode(&req) != nil || req.Type == "" {
			problem(w, 400, api.CodeInvalidRequest)
			return
		}

		g.mu.Lock()
		g.perServer[server]++
		g.clients[server][m[1]] = true
		e := g.entries[key]
		replayed := e != nil && !g.noDedup
		if replayed && !bytes.Equal(e.body, body) {
			g.mu.Unlock()
			problem(w, 422, api.CodeIdempotencyKeyReused)
			return
		}
		if !replayed {
			g.nextJob++
			job := api.Job{
				JobID:          fmt.Sprintf("job-%08d", g.nextJob),
				Type:           req.Type,
				Status:         api.JobStatusCommitted,
				IdempotencyKey: key,
				CreatedAt:      api.FormatTime(time.Now()),
				Datacenters:    map[string]api.DatacenterStatus{"dc1": {Status: api.JobStatusCommitted}},
				Payload:        req.Payload,
			}
			resp, _ := json.Marshal(job)
			e = &fakeEntry{body: body, resp: resp}
			g.entries[key] = e
		}
		g.mu.Unlock()

		w.Header().Set("Content-Type", api.ContentTypeJSON)
		w.Header().Set(api.HeaderReplayed, fmt.Sprint(replayed))
		w.WriteHeader(http.StatusCreated)
		w.Write(e.resp)
	})
	return mux
}

func problem(w http.ResponseWriter, status int, code api.Code) {
	w.Header().Set("Content-Type", api.ContentTypeProblem)
	if status == http.StatusServiceUnavailable || status == http.StatusConflict {
		w.Header().Set(api.HeaderRetryAfter, "1")
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.Problem{
		Type: api.ProblemTypeBase + string(code), Title: http.StatusText(status),
		Status: status, Detail: "fake gate", Code: code,
	})
}

func (g *fakeGate) servedBy(server int) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.perServer[server]
}

func (g *fakeGate) clientsOf(server int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for c := range g.clients[server] {
		out = append(out, c)
	}
	return out
}

// logResult logs a run's table through t.Log.
func logResult(t testing.TB, results ...Result) {
	t.Helper()
	var b strings.Builder
	if err := WriteTable(&b, results); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}

// waitTimer blocks for d (a stall the fake simulates) or until done.
func waitTimer(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
