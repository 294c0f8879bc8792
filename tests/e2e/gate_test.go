package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/localcluster"
)

type answer struct {
	status   int
	replayed string
	body     []byte
	job      api.Job
}

func post(ctx context.Context, hc *http.Client, gate, key, body string) (answer, error) {
	return postPath(ctx, hc, gate, "/v1/jobs", key, body)
}

// postPath POSTs body to the gate's path with the Idempotency-Key key.
func postPath(ctx context.Context, hc *http.Client, gate, path, key, body string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gate+path, bytes.NewBufferString(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed"), body: b}
	if resp.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(b, &a.job); err != nil {
			return a, fmt.Errorf("201 body: %w", err)
		}
	}
	return a, nil
}

// listAll pages through GET /v1/jobs.
func listAll(ctx context.Context, t *testing.T, hc *http.Client, gate string) []api.Job {
	t.Helper()
	var all []api.Job
	after := ""
	for {
		u := gate + "/v1/jobs?limit=1000"
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		var page api.JobList
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("list: HTTP %d: %v", resp.StatusCode, err)
		}
		all = append(all, page.Jobs...)
		if page.Next == nil {
			return all
		}
		after = *page.Next
	}
}

// The README's first submission, through real processes: 201, the identical
// body replayed with Idempotent-Replayed: true, the same job through the other
// gate. The gates are given one gossip seed and no manager list: they find the
// managers through the pool.
func TestGateFirstSubmissionAcrossGates(t *testing.T) {
	c := startCluster(t, 3, 2, func(o *localcluster.Options) { o.GateEnv = []string{"GATE_MANAGERS="} })
	ctx := ctxFor(t, 2*time.Minute)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	urls := c.GateURLs()
	key := "host1.dc1:12345:1:0123456789abcdef"
	body := `{"type":"demo","payload":{"n":1}}`
	first, err := post(ctx, hc, urls[0], key, body)
	if err != nil || first.status != 201 || first.replayed != "false" {
		t.Fatalf("first: %d %q %s %v", first.status, first.replayed, first.body, err)
	}
	again, err := post(ctx, hc, urls[0], key, body)
	if err != nil || again.status != 201 || again.replayed != "true" || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay: %d %q\n%s\nvs\n%s\n%v", again.status, again.replayed, again.body, first.body, err)
	}
	other, err := post(ctx, hc, urls[1], key, body)
	if err != nil || other.status != 201 || other.job.JobID != first.job.JobID || !bytes.Equal(other.body, first.body) {
		t.Fatalf("other gate: %d %s %v", other.status, other.body, err)
	}
	reused, err := post(ctx, hc, urls[1], key, `{"type":"demo","payload":{"n":2}}`)
	if err != nil || reused.status != 422 || !bytes.Contains(reused.body, []byte("idempotency_key_reused")) {
		t.Fatalf("reuse: %d %s %v", reused.status, reused.body, err)
	}
}

// Load through both gates while the manager leader is killed with SIGKILL:
// afterwards no key has two jobs, and every acknowledged job exists.
func TestGateKillLeaderUnderLoad(t *testing.T) {
	c := startCluster(t, 3, 2, func(o *localcluster.Options) { o.GateEnv = []string{"GATE_MANAGERS="} })
	ctx := ctxFor(t, 3*time.Minute)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	urls := c.GateURLs()

	var (
		mu    sync.Mutex
		acked = map[string]string{} // key → job id from its 201
		sent  atomic.Int64
		errs  atomic.Int64
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	const workers = 16
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 1; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("load-%d:%d:0123456789abcdef", w, seq)
				body := fmt.Sprintf(`{"type":"demo","payload":{"w":%d,"s":%d}}`, w, seq)
				// Retry the same key and body until a definite answer, through
				// alternating gates, as a client would.
				deadline := time.Now().Add(60 * time.Second)
				for attempt := 0; ; attempt++ {
					sent.Add(1)
					a, err := post(ctx, hc, urls[(w+attempt)%len(urls)], key, body)
					if err == nil && a.status == 201 {
						mu.Lock()
						if prev, ok := acked[key]; ok && prev != a.job.JobID {
							t.Errorf("key %s answered with two job ids: %s and %s", key, prev, a.job.JobID)
						}
						acked[key] = a.job.JobID
						mu.Unlock()
						break
					}
					if err == nil && a.status != 503 && a.status != 409 {
						t.Errorf("key %s: unexpected answer %d %s", key, a.status, a.body)
						return
					}
					errs.Add(1)
					if time.Now().After(deadline) || ctx.Err() != nil {
						t.Errorf("key %s: no definite answer within 60s (last: %v %d)", key, err, a.status)
						return
					}
					time.Sleep(20 * time.Millisecond) // client backoff between retries
				}
			}
		}()
	}
	// Let load build, kill the leader, let the cluster recover under load.
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 200, "200 acknowledged jobs"
	})
	// On a loaded machine an election may be under way: the leader to kill is
	// the one every manager agrees on once it is over.
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killing leader %s under load", leader.Name)
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	atKill := len(acked)
	mu.Unlock()
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= atKill+200, "200 more acknowledged jobs after the kill"
	})
	close(stop)
	wg.Wait()
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("requests sent %d, retried %d, acknowledged %d", sent.Load(), errs.Load(), len(acked))

	jobs := listAll(ctx, t, hc, urls[0])
	perKey := map[string][]string{}
	for _, j := range jobs {
		perKey[j.IdempotencyKey] = append(perKey[j.IdempotencyKey], j.JobID)
	}
	for k, ids := range perKey {
		if len(ids) > 1 {
			t.Errorf("duplicate jobs for key %s: %v", k, ids)
		}
	}
	for k, id := range acked {
		if ids := perKey[k]; len(ids) != 1 || ids[0] != id {
			t.Errorf("acknowledged job %s for key %s is lost or different: listed %v", id, k, ids)
		}
	}
	if len(jobs) < len(acked) {
		t.Errorf("listed %d jobs, acknowledged %d", len(jobs), len(acked))
	}
}
