package e2e

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/once-dev/once/tests/localcluster"
)

// The rows of the contract that depend on time and capacity, through real
// processes: a capacity rejection is 429 job_rejected with Retry-After and is
// replayed as stored; once a committed key's entry has expired, a late retry
// of it is 409 idempotency_key_expired and the job is not executed again.
func TestGateCapacityAndExpiredKey(t *testing.T) {
	c := startCluster(t, 3, 1, func(o *localcluster.Options) {
		o.Env = append(o.Env,
			"IDEMPOTENCY_COMMITTED_TTL_SECONDS=1",
			"IDEMPOTENCY_REJECTED_TTL_SECONDS=30",
			"IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS=1",
			"MANAGER_MAX_QUEUED_JOBS=2")
	})
	ctx := ctxFor(t, 2*time.Minute)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	gate := c.GateURLs()[0]
	body := `{"type":"demo","payload":{}}`
	keyA := "svc-a:1:00000000000000aa"
	first, err := post(ctx, hc, gate, keyA, body)
	if err != nil || first.status != 201 {
		t.Fatalf("A: %d %s %v", first.status, first.body, err)
	}
	if b, err := post(ctx, hc, gate, "svc-a:2:00000000000000aa", body); err != nil || b.status != 201 {
		t.Fatalf("B: %d %s %v", b.status, b.body, err)
	}

	// The third job exceeds MANAGER_MAX_QUEUED_JOBS: 429 job_rejected, with a
	// Retry-After up to the rejected TTL, replayed with the same body.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gate+"/v1/jobs", bytes.NewBufferString(body))
	req.Header.Set("Idempotency-Key", "svc-a:3:00000000000000aa")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 429 || ra < 1 || ra > 30 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("capacity: %d Retry-After=%q Content-Type=%q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
	}
	rej1, _ := post(ctx, hc, gate, "svc-a:3:00000000000000aa", body)
	rej2, _ := post(ctx, hc, gate, "svc-a:3:00000000000000aa", body)
	if rej1.status != 429 || !bytes.Contains(rej1.body, []byte(`"job_rejected"`)) || !bytes.Contains(rej1.body, []byte(`"capacity"`)) ||
		!bytes.Equal(rej1.body, rej2.body) || rej2.replayed != "true" {
		t.Fatalf("rejection replay: %d %s / %s %q", rej1.status, rej1.body, rej2.body, rej2.replayed)
	}

	// Key A's committed entry expires after 1s (plus a cleanup interval); until
	// then a retry replays the job, after it the retry is refused as expired.
	deadline := time.Now().Add(30 * time.Second)
	for {
		a, err := post(ctx, hc, gate, keyA, body)
		if err != nil {
			t.Fatal(err)
		}
		if a.status == 409 {
			if !bytes.Contains(a.body, []byte(`"idempotency_key_expired"`)) {
				t.Fatalf("409 with the wrong code: %s", a.body)
			}
			break
		}
		if a.status != 201 || a.job.JobID != first.job.JobID {
			t.Fatalf("before expiry a retry must replay job %s; got %d %s", first.job.JobID, a.status, a.body)
		}
		if time.Now().After(deadline) {
			t.Fatal("key A never expired")
		}
		time.Sleep(200 * time.Millisecond) // poll interval while waiting for the TTL to pass
	}
	// The job itself is still there, once.
	jobs := listAll(ctx, t, hc, gate)
	n := 0
	for _, j := range jobs {
		if j.IdempotencyKey == keyA {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("key A has %d jobs after the expired retry, want 1", n)
	}
}
