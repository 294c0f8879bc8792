package ctl

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/once-dev/once/pkg/api"
)

// TestJobWatchTimeoutIsErrWatchTimeout: whatever call of job watch the
// --timeout ends, the command fails with ErrWatchTimeout's message (exit 1),
// never the Go client's own deadline error: here the gate answers 503 with
// a Retry-After longer than the time left, which the client gives up on
// before the deadline passes (a datacenter's copy read so is printed
// unreachable, and the watch goes on), and a gate that never answers.
func TestJobWatchTimeoutIsErrWatchTimeout(t *testing.T) {
	const id = "j-1"
	for name, h := range map[string]http.HandlerFunc{
		"retry-after past the deadline": func(w http.ResponseWriter, _ *http.Request) {
			writeUnavailable(w, "30")
		},
		"a datacenter's copy past the deadline": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("datacenter") == "dc2" {
				writeUnavailable(w, "30")
				return
			}
			w.Header().Set("Content-Type", api.ContentTypeJSON)
			_ = json.NewEncoder(w).Encode(api.Job{JobID: id, Status: api.JobStatusCommitted,
				Datacenters:      map[string]api.DatacenterStatus{"dc1": {Status: api.JobStatusCommitted}},
				NamedDatacenters: []string{"dc1", "dc2"}})
		},
		"no answer": func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(h)
			defer srv.Close()
			code, out, errOut := oncectl(t, "--gates", srv.URL, "--timeout", "300ms", "job", "watch", id, "--interval", "50ms")
			if code != ExitFailure || !strings.Contains(errOut, "oncectl: "+ErrWatchTimeout.Error()) || strings.Contains(errOut, "deadline") {
				t.Fatalf("job watch: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
			}
			if strings.Contains(name, "copy") && !strings.Contains(out, "dc1=committed dc2=unreachable") {
				t.Fatalf("a copy whose read gives up early is unreachable: %s", out)
			}
		})
	}
}

// TestJobWatchOutlastsGatesThatDoNotAnswer: a read of the job that fails
// for now (503 until the client's attempts run out) does not end the
// watch: it reads again after --interval, and exits 0 once every
// datacenter holds the job. A job not found anywhere still ends it (exit 1).
func TestJobWatchOutlastsGatesThatDoNotAnswer(t *testing.T) {
	const id = "j-1"
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 6 { // more than one read's 5 attempts
			writeUnavailable(w, "0")
			return
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		_ = json.NewEncoder(w).Encode(api.Job{JobID: id, Status: api.JobStatusCommitted,
			Datacenters: map[string]api.DatacenterStatus{"dc1": {Status: api.JobStatusCommitted}}})
	}))
	defer srv.Close()
	code, out, errOut := oncectl(t, "--gates", srv.URL, "--timeout", "30s", "job", "watch", id, "--interval", "10ms")
	if code != ExitOK || !strings.Contains(out, "dc1=committed") || n.Load() <= 6 {
		t.Fatalf("job watch: exit %d after %d requests\nstdout: %s\nstderr: %s", code, n.Load(), out, errOut)
	}

	missing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", api.ContentTypeProblem)
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(api.Problem{Type: api.ProblemTypeBase + string(api.CodeJobNotFound), Status: http.StatusNotFound,
			Code: api.CodeJobNotFound, Detail: "no job"})
	}))
	defer missing.Close()
	if code, out, errOut := oncectl(t, "--gates", missing.URL, "--timeout", "30s", "job", "watch", id); code != ExitFailure || !strings.Contains(errOut, string(api.CodeJobNotFound)) {
		t.Fatalf("a job not found: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// writeUnavailable answers as a gate without a leader does: 503
// unavailable with Retry-After retryAfter.
func writeUnavailable(w http.ResponseWriter, retryAfter string) {
	w.Header().Set("Content-Type", api.ContentTypeProblem)
	w.Header().Set(api.HeaderRetryAfter, retryAfter)
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(api.Problem{Type: api.ProblemTypeBase + string(api.CodeUnavailable), Status: http.StatusServiceUnavailable,
		Code: api.CodeUnavailable, Detail: "no leader"})
}

// TestJobWatchTimeoutSaysNoGateAnswered: a watch whose --timeout passes
// before any read of the job was answered says so, rather than end on
// ErrWatchTimeout with an empty "()", which reads as a job found but not
// yet everywhere; a read answered 503 until the client gave up is named.
func TestJobWatchTimeoutSaysNoGateAnswered(t *testing.T) {
	for name, c := range map[string]struct {
		h    http.HandlerFunc
		want string
	}{
		"no answer": {func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, "(no gate has answered a read of the job)"},
		"503":       {func(w http.ResponseWriter, _ *http.Request) { writeUnavailable(w, "0") }, "(no gate has answered a read of the job: "},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(c.h)
			defer srv.Close()
			code, out, errOut := oncectl(t, "--gates", srv.URL, "--timeout", "3s", "job", "watch", "j-1", "--interval", "10ms")
			if code != ExitFailure || !strings.Contains(errOut, ErrWatchTimeout.Error()+" "+c.want) || strings.Contains(errOut, "()") {
				t.Fatalf("job watch: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
			}
		})
	}
}
