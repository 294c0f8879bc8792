package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/localcluster"
)

// near fails unless a time the cluster stamped is within 5 s of the real
// clock's reading at (a skewed stamp is off by minutes).
func near(t *testing.T, what string, stamped string, at time.Time) {
	t.Helper()
	ts, err := time.Parse(api.TimeFormat, stamped)
	if err != nil {
		t.Fatalf("%s: %q: %v", what, stamped, err)
	}
	if d := ts.Sub(at); d < -5*time.Second || d > 5*time.Second {
		t.Fatalf("%s: stamped %v, real %v (off by %v)", what, ts, at, d)
	}
}

// Real processes with skewed clocks (the clock failpoint of
// oncemanager-faults): the manager that leads first keeps the right time, one
// follower runs 10 minutes ahead, the other 10 minutes behind. Each skewed
// manager is made leader in turn (leadership transferred to it, again after
// it hands leadership away for its clock). While it leads, through both
// gates: every committed key replays its job (IDEMPOTENCY_COMMITTED_TTL is 5
// minutes, so a leader using its own clock 10 minutes ahead would expire
// them all at its first sweep), GET /v1/jobs/{id} finds every job, a new job
// and a canary key's expiry are stamped with the real time, and the canary
// (Idempotency-TTL: 2) is removed by a sweep of that leader — so its sweeps
// ran and expired nothing early. Ledger time never goes back. At the end every
// key has exactly one job.
func TestSkewedLeadersKeepEveryKey(t *testing.T) {
	c := startCluster(t, 3, 2, func(o *localcluster.Options) {
		o.Failpoints = true
		o.Env = append(o.Env, "IDEMPOTENCY_COMMITTED_TTL_SECONDS=300", "MANAGER_JOB_RETENTION_SECONDS=300",
			"IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS=1")
	})
	ctx := ctxFor(t, 4*time.Minute)
	first, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	gates := c.GateURLs()
	hc := &http.Client{Timeout: 30 * time.Second}
	body := func(key string) string { return `{"type":"demo","payload":{"key":"` + key + `"}}` }

	type sub struct{ key, job string }
	var subs []sub
	// submitNew sends a new key and checks its job was stamped with the real time.
	submitNew := func(key string, gate string) {
		t.Helper()
		at := time.Now()
		r, err := post(ctx, hc, gate, key, body(key))
		if err != nil || r.status != http.StatusCreated || r.replayed != "false" {
			t.Fatalf("first submission of %s: %d replayed=%q %s %v", key, r.status, r.replayed, r.body, err)
		}
		near(t, key+" created_at", r.job.CreatedAt, at)
		subs = append(subs, sub{key, r.job.JobID})
	}
	for i := 0; i < 8; i++ {
		submitNew(fmt.Sprintf("skew-%d", i), gates[i%len(gates)])
	}

	var ahead, behind *localcluster.Node
	for _, m := range c.Managers {
		switch {
		case m == first:
		case ahead == nil:
			ahead = m
		default:
			behind = m
		}
	}
	skews := map[*localcluster.Node]time.Duration{first: 0, ahead: 10 * time.Minute, behind: -10 * time.Minute}
	for n, d := range skews {
		if d != 0 {
			if err := c.SetClockOffset(ctx, n, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every manager measures its group: the skewed ones see themselves 10
	// minutes off and stamp with the group's clock; the right one does not.
	testutil.WaitFor(t, 60*time.Second, func() (bool, string) {
		for n, d := range skews {
			st, err := c.Status(ctx, n)
			if err != nil || st.ClockGroupOffset == nil || st.ClockClamped != (d != 0) {
				return false, "every manager to measure its group's clock"
			}
			if off := time.Duration(*st.ClockGroupOffset * float64(time.Second)); off-d < -2*time.Second || off-d > 2*time.Second {
				return false, fmt.Sprintf("%s to measure itself %v off its group (now %v)", n.Name, d, off)
			}
		}
		return true, ""
	})

	// lead makes n the leader and returns its term.
	lead := func(n *localcluster.Node) uint64 {
		t.Helper()
		var term uint64
		testutil.WaitFor(t, 60*time.Second, func() (bool, string) {
			if l, err := c.Leader(ctx); err == nil && l == n {
				if st, err := c.Status(ctx, n); err == nil && st.IsLeader {
					term = st.Term
					return true, ""
				}
			}
			// A refused or failed transfer is tried again on the next poll.
			_ = c.TransferLeadership(ctx, n)
			return false, n.Name + " to lead"
		})
		return term
	}
	var lastLedgerTime time.Time
	for _, target := range []*localcluster.Node{ahead, behind} {
		ledOnce := false
		for attempt := 0; attempt < 3 && !ledOnce; attempt++ {
			term := lead(target)
			// Retries of every key, through both gates, replay its job; the job is there.
			for i, s := range subs {
				gate := gates[(i+attempt)%len(gates)]
				r, err := post(ctx, hc, gate, s.key, body(s.key))
				if err != nil || r.status != http.StatusCreated || r.replayed != "true" || r.job.JobID != s.job {
					t.Fatalf("with %s (%v) leading: retry of %s answered %d replayed=%q job %q, want %s: %v",
						target.Name, skews[target], s.key, r.status, r.replayed, r.job.JobID, s.job, err)
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gate+"/v1/jobs/"+url.PathEscape(s.job), nil)
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(s.key)) {
					t.Fatalf("with %s leading: GET job %s of %s: HTTP %d %.200s", target.Name, s.job, s.key, resp.StatusCode, b)
				}
			}
			submitNew(fmt.Sprintf("new-at-%s-%d", target.Name, attempt), gates[attempt%len(gates)])

			// A canary with a 2 s TTL: its expiry is stamped with the real time,
			// and a sweep removes it.
			canary := fmt.Sprintf("canary-%s-%d", target.Name, attempt)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gates[0]+"/v1/jobs", bytes.NewBufferString(body(canary)))
			req.Header.Set("Idempotency-Key", canary)
			req.Header.Set("Idempotency-TTL", "2")
			at := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("canary %s: HTTP %d", canary, resp.StatusCode)
			}
			near(t, canary+" Idempotency-Expires-At", resp.Header.Get("Idempotency-Expires-At"), at.Add(2*time.Second))
			testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
				_, _, status, err := keyState(ctx, hc, gates[1], canary)
				return err == nil && status == http.StatusNotFound, "the canary " + canary + " to expire"
			})
			// It counts if target led throughout (a handoff for its clock may
			// have come in between; the next attempt finds it in its backoff).
			if st, err := c.Status(ctx, target); err == nil && st.IsLeader && st.Term == term {
				ledOnce = true
			} else {
				t.Logf("%s handed leadership over during attempt %d; again", target.Name, attempt)
			}
		}
		if !ledOnce {
			t.Fatalf("%s (%v) never led through a whole round", target.Name, skews[target])
		}
		st, err := c.Status(ctx, target)
		if err != nil {
			t.Fatal(err)
		}
		lt, err := time.Parse(time.RFC3339Nano, st.LedgerTime)
		if err != nil {
			t.Fatalf("ledger time %q of %s: %v", st.LedgerTime, target.Name, err)
		}
		if lt.Before(lastLedgerTime) {
			t.Fatalf("ledger time went back after %s led: %v < %v", target.Name, lt, lastLedgerTime)
		}
		if d := time.Since(lt); d < -5*time.Second || d > 5*time.Second {
			t.Fatalf("ledger time after %s (%v) led: %v, real %v", target.Name, skews[target], lt, time.Now())
		}
		lastLedgerTime = lt
	}

	// Every key still names its one job, through both gates, and the list
	// holds exactly one job per key.
	for i, s := range subs {
		state, job, status, err := keyState(ctx, hc, gates[i%len(gates)], s.key)
		if err != nil || status != http.StatusOK || state != "committed" || job != s.job {
			t.Fatalf("key %s: HTTP %d %q job %q, want committed %s: %v", s.key, status, state, job, s.job, err)
		}
	}
	perKey := map[string]int{}
	for _, j := range listAll(ctx, t, hc, gates[0]) {
		perKey[j.IdempotencyKey]++
	}
	for _, s := range subs {
		if perKey[s.key] != 1 {
			t.Fatalf("key %s has %d jobs, want 1", s.key, perKey[s.key])
		}
	}
}
