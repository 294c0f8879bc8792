package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

// A second manager process started on the data directory of a running one is
// refused (docs/operations.md, troubleshooting): it exits at once with exit
// code 1 (docs/configuration.md: it could not start) and the message
// `manager: open raft log: walstore: lock …: walstore: locked by another open
// store`, whether the first runs or is paused with SIGSTOP (still holding the
// lock). The running manager goes on serving through the gate, and after a
// kill -9 and a restart of it on that directory every acknowledged job is
// still there.
func TestManagerStartedTwiceOnOneDataDirIsRefused(t *testing.T) {
	c := startCluster(t, 1, 1, nil)
	ctx := ctxFor(t, 3*time.Minute)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	first := c.Managers[0]
	gate := c.GateURLs()[0]
	hc := &http.Client{Timeout: 30 * time.Second}

	acked := map[string]string{} // key -> job id
	body := func(key string) string { return `{"type":"demo","payload":{"k":"` + key + `"}}` }
	// submit posts key until the gate acknowledges it (201), waiting out a
	// gate that has not found the leader again yet (503).
	submit := func(key string) {
		t.Helper()
		var last string
		testutil.WaitFor(t, left(ctx), func() (bool, string) {
			a, err := post(ctx, hc, gate, key, body(key))
			if err != nil || a.status != http.StatusCreated {
				last = fmt.Sprintf("%d %s %v", a.status, a.body, err)
				return false, "submit " + key + " acknowledged (last: " + last + ")"
			}
			if prev, ok := acked[key]; ok && prev != a.job.JobID {
				t.Fatalf("key %s answered with two job ids: %s then %s", key, prev, a.job.JobID)
			}
			acked[key] = a.job.JobID
			return true, ""
		})
	}
	// allFound waits until every acknowledged key replays its job through
	// the gate, then checks the gate's list holds every one of them.
	allFound := func(stage string) {
		t.Helper()
		for key, id := range acked {
			testutil.WaitFor(t, left(ctx), func() (bool, string) {
				a, err := post(ctx, hc, gate, key, body(key))
				if err != nil || a.status != http.StatusCreated {
					return false, fmt.Sprintf("%s: replay of %s (last: %d %s %v)", stage, key, a.status, a.body, err)
				}
				if a.job.JobID != id || a.replayed != "true" {
					t.Fatalf("%s: key %s: job %s (replayed %q), acknowledged %s", stage, key, a.job.JobID, a.replayed, id)
				}
				return true, ""
			})
		}
		listed := map[string]bool{}
		for _, j := range listAll(ctx, t, hc, gate) {
			listed[j.JobID] = true
		}
		for key, id := range acked {
			if !listed[id] {
				t.Fatalf("%s: job %s of key %s missing from the gate's list", stage, id, key)
			}
		}
	}
	n := 0
	submitSome := func(k int) {
		t.Helper()
		for range k {
			n++
			submit(fmt.Sprintf("twice-%d-0123456789abcdef", n))
		}
	}

	// tryTwice starts a second manager process with first's identity and data
	// directory on ports of its own, and checks that it is refused.
	tryTwice := func(stage string) {
		t.Helper()
		dup, err := c.AddManager("MANAGER_NODE_ID="+first.Name, "MANAGER_DATA_DIR="+first.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		if err := dup.Start(); err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
			return !dup.Running(), stage + ": the second manager process exits"
		})
		t.Logf("%s: second process (%s on %s) exited with %d after %v", stage, dup.Name, first.DataDir, dup.ExitCode(), time.Since(started))
		if code := dup.ExitCode(); code != 1 {
			t.Errorf("%s: second process exit code %d, want 1 (docs/configuration.md: could not start)", stage, code)
		}
		// The node's log file is the process's stdout and stderr; the manager
		// writes nothing on stdout.
		out, err := os.ReadFile(dup.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"manager: open raft log: walstore: lock ", ": walstore: locked by another open store"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s: second process's stderr lacks %q:\n%s", stage, want, out)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}

	submitSome(20)

	// 1. The first manager runs.
	tryTwice("running")
	if !first.Running() {
		t.Fatal("the first manager stopped")
	}
	submitSome(5)
	allFound("after a refused second start")

	// 2. The first manager is paused (SIGSTOP): it still holds the lock.
	if err := first.Pause(); err != nil {
		t.Fatal(err)
	}
	tryTwice("paused")
	if err := first.Resume(); err != nil {
		t.Fatal(err)
	}
	submitSome(5)
	allFound("after a refused start beside a paused manager")

	// 3. kill -9 of the first manager and a restart on its directory: every
	// acknowledged job is still there.
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	allFound("after kill -9 and restart")
	submitSome(1)
	allFound("after kill -9, restart and a new submission")
}
