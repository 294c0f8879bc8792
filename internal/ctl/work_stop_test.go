package ctl

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
)

// workGate is a gate for job work: it leases one job once, then holds
// every lease call until its caller leaves, and records the outcomes
// reported.
type workGate struct {
	mu         sync.Mutex
	leased     bool
	heartbeats int
	lose       bool     // heartbeats answer lease_lost
	completed  []string // the results of the complete calls
	failed     []string // the errors of the fail calls
}

func (g *workGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	job := api.Job{JobID: "j1", Type: "t"}
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch p := r.URL.Path; {
	case p == "/v1/leases":
		if !g.leased {
			g.leased = true
			reply(api.LeaseList{Leases: []api.Lease{{LeaseID: "l1", Job: job, Attempt: 1,
				ExpiresAt: time.Now().Add(time.Minute).UTC().Format(time.RFC3339)}}})
			return
		}
		g.mu.Unlock()
		<-r.Context().Done()
		g.mu.Lock()
	case strings.HasSuffix(p, "/heartbeat"):
		g.heartbeats++
		if g.lose {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(api.Problem{Title: "Lease lost", Status: http.StatusConflict, Code: api.CodeLeaseLost})
			return
		}
		reply(api.HeartbeatResponse{LeaseID: "l1", ExpiresAt: time.Now().Add(time.Minute).UTC().Format(time.RFC3339)})
	case p == "/v1/completions":
		var req api.CompletionsRequest
		_ = json.Unmarshal(body, &req)
		var res api.CompletionsResponse
		for _, c := range req.Completions {
			g.completed = append(g.completed, string(c.Result))
			res.Results = append(res.Results, api.CompletionResult{Job: &job})
		}
		reply(res)
	case strings.HasSuffix(p, "/complete"):
		var req api.CompleteRequest
		_ = json.Unmarshal(body, &req)
		g.completed = append(g.completed, string(req.Result))
		reply(job)
	case strings.HasSuffix(p, "/fail"):
		var req api.FailRequest
		_ = json.Unmarshal(body, &req)
		g.failed = append(g.failed, req.Error)
		reply(job)
	default:
		http.NotFound(w, r)
	}
}

func (g *workGate) beats() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.heartbeats
}

func (g *workGate) outcomes() (completed, failed []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.completed...), append([]string(nil), g.failed...)
}

// A worker told to stop (SIGINT, SIGTERM: Main's context ends) waits for
// the commands it runs, as docs/oncectl.md says, and reports their
// outcomes: it does not kill them and report each a failed attempt (which,
// on a job's last attempt, would make it dead for a stop of the worker).
func TestWorkWaitsForTheRunningCommandOnStop(t *testing.T) {
	gate := &workGate{}
	srv := httptest.NewServer(gate)
	defer srv.Close()
	dir := t.TempDir()
	started, proceed := filepath.Join(dir, "started"), filepath.Join(dir, "go")
	script := `touch "$1"; while [ ! -e "$2" ]; do sleep 0.01; done; echo '"done"'`

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"--gates", srv.URL, "--timeout", "1m", "job", "work", "--lease", "1s", "--",
			"sh", "-c", script, "sh", started, proceed}, io.Discard, io.Discard)
	}()
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		_, err := os.Stat(started)
		return err == nil, "the job's command to start"
	})
	beats := gate.beats()
	stop() // SIGTERM
	// A command killed by the stop is reported failed at once; one that
	// runs on still has its lease heartbeated (every third of --lease).
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		_, failed := gate.outcomes()
		return len(failed) > 0 || gate.beats() > beats, "a failure reported, or a heartbeat after the stop"
	})
	if err := os.WriteFile(proceed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != ExitOK {
			t.Errorf("exit %d after a stop; want 0", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("job work did not return after its command ended")
	}
	completed, failed := gate.outcomes()
	if len(failed) != 0 || len(completed) != 1 || completed[0] != `"done"` {
		t.Fatalf("after the stop: completed %q, failed %q; want the command's result completed, nothing failed", completed, failed)
	}
}

// A lost lease still kills the job's command while the worker runs (only a
// stop of the worker lets the commands finish), and nothing is reported.
func TestWorkKillsTheCommandOfALostLease(t *testing.T) {
	gate := &workGate{}
	srv := httptest.NewServer(gate)
	defer srv.Close()
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := `echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; while :; do sleep 0.01; done`

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"--gates", srv.URL, "--timeout", "1m", "job", "work", "--lease", "1s", "--",
			"sh", "-c", script, "sh", pidFile}, io.Discard, io.Discard)
	}()
	var pid int
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false, "the job's command to start"
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, "the command's pid"
	})
	gate.mu.Lock()
	gate.lose = true
	gate.mu.Unlock()
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		return syscall.Kill(pid, 0) == syscall.ESRCH, "the command of the lost lease to be killed"
	})
	stop()
	if c := <-code; c != ExitOK {
		t.Errorf("exit %d after a stop; want 0", c)
	}
	if completed, failed := gate.outcomes(); len(completed)+len(failed) != 0 {
		t.Fatalf("a lost lease's outcome reported: completed %q, failed %q", completed, failed)
	}
}
