package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/localcluster"
)

// bigBody is a POST /v1/jobs body whose payload is a JSON string of exactly
// size bytes (quotes included) that starts with tag, so a read-back shows
// whose payload it is.
func bigBody(typ, tag string, size int) string {
	fill := size - 2 - len(tag)
	return `{"type":"` + typ + `","payload":"` + tag + strings.Repeat("x", fill) + `"}`
}

// problemOf decodes an RFC 9457 problem body's code.
func problemOf(b []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(b, &p)
	return p.Code
}

// rssWatch samples every manager's resident set size until stopped and keeps
// the largest reading of each.
type rssWatch struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	max     map[string]int64
	samples int
}

func watchRSS(t *testing.T, c *localcluster.Cluster, every time.Duration) *rssWatch {
	t.Helper()
	w := &rssWatch{stop: make(chan struct{}), done: make(chan struct{}), max: map[string]int64{}}
	sample := func() {
		for _, m := range c.Managers {
			rss, err := m.RSS()
			if err != nil {
				continue // a manager between restarts; none is restarted here
			}
			w.mu.Lock()
			w.max[m.Name] = max(w.max[m.Name], rss)
			w.samples++
			w.mu.Unlock()
		}
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-w.stop:
				sample()
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.Stop)
	return w
}

// Stop ends the sampling and returns the largest reading of each manager and
// the number of readings.
func (w *rssWatch) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *rssWatch) result() (map[string]int64, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int64{}
	for k, v := range w.max {
		out[k] = v
	}
	return out, w.samples
}

// A flood of 1 MiB payloads against a ledger of 256 MiB
// (IDEMPOTENCY_LEDGER_MAX_BYTES; the tenant's share,
// IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES, is twice that, so the ledger's budget is
// the one reached): once the budget is reached new keys are refused — 503
// unavailable with Retry-After: the cleanup interval, as docs/api.md says — every
// acknowledged job stays readable byte for byte, and no manager's resident
// memory passes 1 GiB at any time (sampled from /proc every 100 ms).
func TestBigPayloadsHitTheByteBudget(t *testing.T) {
	const (
		budget   = 256 << 20
		payload  = 1 << 20
		maxSends = 400
		clients  = 4
		rssLimit = 1 << 30
	)
	c := startCluster(t, 3, 2, func(o *localcluster.Options) {
		o.Env = append(o.Env,
			"IDEMPOTENCY_LEDGER_MAX_BYTES="+strconv.Itoa(budget),
			"IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES="+strconv.Itoa(2*budget),
			"GATE_MAX_BODY_BYTES="+strconv.Itoa(2<<20),
			"IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS=7", // a full ledger's Retry-After
			"MANAGER_LOG_LEVEL=warn", "GATE_LOG_LEVEL=warn")
	})
	ctx := ctxFor(t, 3*time.Minute)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	w := watchRSS(t, c, 100*time.Millisecond)
	gates := c.GateURLs()
	hc := &http.Client{Timeout: 60 * time.Second}

	type acked struct {
		key  string
		body []byte
		job  api.Job
	}
	var (
		mu       sync.Mutex
		acks     []acked
		refusals = map[string]int{}
		next     atomic.Int64
		refused  atomic.Int64
		firstErr atomic.Value
	)
	fail := func(err error) { firstErr.CompareAndSwap(nil, err) }
	var wg sync.WaitGroup
	for cl := 0; cl < clients; cl++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Keep sending until the budget has refused a few in a row
			// (refused counts every refusal), or the bound on sends is reached.
			for refused.Load() < 3*clients && firstErr.Load() == nil {
				i := next.Add(1)
				if i > maxSends {
					return
				}
				key := fmt.Sprintf("big-%04d", i)
				gate := gates[int(i)%len(gates)]
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gate+"/v1/jobs",
					strings.NewReader(bigBody("big", key, payload)))
				req.Header.Set("Idempotency-Key", key)
				resp, err := hc.Do(req)
				if err != nil {
					fail(fmt.Errorf("POST %s: %w", key, err))
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					fail(fmt.Errorf("POST %s: reading the answer: %w", key, err))
					return
				}
				switch resp.StatusCode {
				case http.StatusCreated:
					var j api.Job
					if err := json.Unmarshal(b, &j); err != nil || j.JobID == "" {
						fail(fmt.Errorf("POST %s: 201 %.200s: %v", key, b, err))
						return
					}
					mu.Lock()
					acks = append(acks, acked{key, b, j})
					mu.Unlock()
				case http.StatusServiceUnavailable:
					code := problemOf(b)
					if ra := resp.Header.Get("Retry-After"); code != "unavailable" || ra != "7" {
						fail(fmt.Errorf("POST %s: refused with %d %q Retry-After=%q, want unavailable with Retry-After: 7 (the cleanup interval): %.300s",
							key, resp.StatusCode, code, resp.Header.Get("Retry-After"), b))
						return
					}
					mu.Lock()
					refusals[strconv.Itoa(resp.StatusCode)+" "+code]++
					mu.Unlock()
					refused.Add(1)
				default:
					fail(fmt.Errorf("POST %s: HTTP %d %.300s", key, resp.StatusCode, b))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	sent := min(next.Load(), maxSends)
	t.Logf("%d sent: %d acknowledged, refusals %v", sent, len(acks), refusals)
	if refused.Load() == 0 {
		t.Fatalf("%d payloads of 1 MiB were all acknowledged: the %d-byte budget refused none", len(acks), budget)
	}
	// Each acknowledged job holds its payload about twice in the ledger (the
	// job and the entry's stored answer): the budget fits dozens, not hundreds.
	if len(acks) < 32 || int64(len(acks))*payload > budget {
		t.Fatalf("%d jobs of 1 MiB acknowledged under a budget of %d bytes", len(acks), budget)
	}

	// Every acknowledged job is readable, queued, as its 201 plus its state, through
	// either gate; and its key replays it.
	for i, a := range acks {
		gate := gates[i%len(gates)]
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gate+"/v1/jobs/"+url.PathEscape(a.job.JobID), nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET job of %s: %v", a.key, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		var read api.Job
		if err == nil {
			err = json.Unmarshal(b, &read)
		}
		// A read adds the worker lifecycle's members to the admission answer.
		admission, _ := json.Marshal(read.Admission())
		if err != nil || resp.StatusCode != http.StatusOK || read.State != api.JobStatusQueued ||
			!bytes.Equal(bytes.TrimSpace(admission), bytes.TrimSpace(a.body)) {
			t.Fatalf("GET job %s of %s: HTTP %d state %q (%d bytes as admitted, want the 201's %d): %v",
				a.job.JobID, a.key, resp.StatusCode, read.State, len(admission), len(a.body), err)
		}
	}
	for _, a := range acks[:min(len(acks), 8)] {
		r, err := post(ctx, hc, gates[1], a.key, bigBody("big", a.key, payload))
		if err != nil || r.status != http.StatusCreated || r.replayed != "true" || r.job.JobID != a.job.JobID {
			t.Fatalf("retry of %s: %d replayed=%q job %s, want 201 replaying %s: %v", a.key, r.status, r.replayed, r.job.JobID, a.job.JobID, err)
		}
	}

	w.Stop()
	peaks, n := w.result()
	t.Logf("peak RSS over %d samples: %v", n, peaks)
	if len(peaks) != len(c.Managers) {
		t.Fatalf("RSS read for %d of %d managers: %v", len(peaks), len(c.Managers), peaks)
	}
	for name, rss := range peaks {
		if rss > rssLimit {
			t.Errorf("%s's resident memory reached %d MiB, over the 1 GiB bound", name, rss>>20)
		}
	}
}

// Twenty jobs of 900 KB: GET /v1/jobs through a gate pages through all of
// them, following next, without an error, and no page passes the byte budget
// of docs/api.md (about 4 MiB, each job counted as its payload + 1 KiB; a
// single job may stand alone): a page of these holds at most four.
func TestListLargeJobsPagesByBytes(t *testing.T) {
	const (
		n       = 20
		payload = 900_000
	)
	c := startCluster(t, 3, 1, nil)
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	gate := c.GateURLs()[0]
	hc := &http.Client{Timeout: 30 * time.Second}
	want := map[string]string{} // job id -> key
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("large-%02d", i)
		r, err := post(ctx, hc, gate, key, bigBody("large", key, payload))
		if err != nil || r.status != http.StatusCreated {
			t.Fatalf("POST %s: %d %.200s %v", key, r.status, r.body, err)
		}
		want[r.job.JobID] = key
	}

	seen := map[string]bool{}
	pages := 0
	after := ""
	for {
		u := gate + "/v1/jobs?type=large&limit=1000"
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("list page %d: %v", pages+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("list page %d: HTTP %d %.300s %v", pages+1, resp.StatusCode, b, err)
		}
		pages++
		var page api.JobList
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatalf("list page %d: %v", pages, err)
		}
		if len(page.Jobs) == 0 {
			t.Fatalf("page %d is empty (next %v)", pages, page.Next)
		}
		counted := 0
		for _, j := range page.Jobs {
			counted += len(j.Payload) + 1024
			key, ok := want[j.JobID]
			if !ok || j.IdempotencyKey != key || len(j.Payload) != payload || !bytes.HasPrefix(j.Payload, []byte(`"`+key)) {
				t.Fatalf("page %d: job %s (key %q, %d payload bytes) is not one of ours intact", pages, j.JobID, j.IdempotencyKey, len(j.Payload))
			}
			if seen[j.JobID] {
				t.Fatalf("page %d: job %s listed twice", pages, j.JobID)
			}
			seen[j.JobID] = true
		}
		if len(page.Jobs) > 1 && (counted > rpc.ListPageBytes || len(b) > rpc.ListPageBytes) {
			t.Fatalf("page %d: %d jobs, %d bytes counted, %d bytes answered: over the page budget of %d",
				pages, len(page.Jobs), counted, len(b), rpc.ListPageBytes)
		}
		if page.Next == nil {
			break
		}
		after = *page.Next
	}
	if len(seen) != n {
		t.Fatalf("listed %d of %d jobs in %d pages", len(seen), n, pages)
	}
	// 4 MiB holds four jobs of 900 KB (+1 KiB), not five: at least five pages.
	if pages < n/4 {
		t.Fatalf("%d jobs of 900 KB in %d pages: the byte budget did not end a page", n, pages)
	}
}

// keyState reads GET /v1/idempotency-keys/{key}: its state and job id, or the
// HTTP status when it is not 200.
func keyState(ctx context.Context, hc *http.Client, gate, key string) (state, jobID string, status int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gate+"/v1/idempotency-keys/"+url.PathEscape(key), nil)
	if err != nil {
		return "", "", 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", "", 0, err
	}
	defer resp.Body.Close()
	var e struct {
		State string  `json:"state"`
		JobID *string `json:"job_id"`
	}
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return "", "", resp.StatusCode, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		return "", "", resp.StatusCode, err
	}
	if e.JobID != nil {
		jobID = *e.JobID
	}
	return e.State, jobID, resp.StatusCode, nil
}

// A submission cut from its quorum leaves no orphan, with real processes:
// both followers are frozen (SIGSTOP) so the leader's entry for a new key
// cannot commit; the gate's deadline passes and the client gets 503, and the
// leader's submitter stops waiting for it. The followers are thawed (SIGCONT)
// well within the leader's lease and the entry commits. It is one Admit (the
// reservation and its outcome in one entry, docs/ledger.md "One round"), so
// the key is never PENDING: nothing waits out the pending TTL (120 s here).
// Its job is readable, and a retry replays it.
func TestSubmissionCutFromItsQuorumLeavesNoOrphan(t *testing.T) {
	c := startCluster(t, 3, 1, func(o *localcluster.Options) {
		// Slow Raft timings (Fast off): a leader keeps its lease for 3 s
		// without its followers, so a freeze of about a second deposes nobody.
		o.Fast = false
		o.ManagerEnv = append(o.ManagerEnv,
			"MANAGER_RAFT_HEARTBEAT_TIMEOUT=3s", "MANAGER_RAFT_ELECTION_TIMEOUT=3s",
			"MANAGER_RAFT_LEADER_LEASE_TIMEOUT=3s", "MANAGER_GOSSIP_PROFILE=local",
			"MANAGER_APPLY_TIMEOUT=20s")
		o.GateEnv = append(o.GateEnv, "GATE_GOSSIP_PROFILE=local",
			"GATE_FORWARD_TIMEOUT_SECONDS=0.4", "IDEMPOTENCY_PENDING_WAIT_TIMEOUT=0.4")
		o.Env = append(o.Env, "IDEMPOTENCY_PENDING_TTL_SECONDS=120")
	})
	ctx := ctxFor(t, 2*time.Minute)
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	gate := c.GateURLs()[0]
	hc := &http.Client{Timeout: 30 * time.Second}
	body := `{"type":"demo","payload":{"n":1}}`
	// A first job: every link is up and the followers are caught up.
	if r, err := post(ctx, hc, gate, "warm-up", body); err != nil || r.status != http.StatusCreated {
		t.Fatalf("warm-up: %d %s %v", r.status, r.body, err)
	}
	var followers []*localcluster.Node
	for _, m := range c.Managers {
		if m != leader {
			followers = append(followers, m)
		}
	}
	for _, f := range followers {
		if err := f.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	const key = "orphan-1"
	r, perr := post(ctx, hc, gate, key, body)
	for _, f := range followers {
		if err := f.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if perr != nil || r.status != http.StatusServiceUnavailable {
		t.Fatalf("the submission with no quorum: %d %s %v, want 503", r.status, r.body, perr)
	}
	thawed := time.Now()

	// The Admit commits once the followers are back: the key goes from absent
	// to COMMITTED, never through PENDING.
	sawPending := false
	var jobID string
	testutil.WaitFor(t, 20*time.Second, func() (bool, string) {
		state, id, status, err := keyState(ctx, hc, gate, key)
		if err != nil {
			return false, "the key's entry to be readable: " + err.Error()
		}
		switch {
		case status == http.StatusOK && state == "pending":
			sawPending = true
		case status == http.StatusOK && state == "committed":
			jobID = id
			return true, ""
		}
		return false, fmt.Sprintf("the cut-off key to be committed (last: HTTP %d %q)", status, state)
	})
	took := time.Since(thawed)
	t.Logf("the key was committed %v after the followers were thawed", took.Round(time.Millisecond))
	if sawPending {
		t.Fatal("the key was seen PENDING: its submission took two rounds, and its entry was an orphan")
	}
	if took >= 60*time.Second {
		t.Fatalf("the key took %v: the pending TTL, not its own entry, committed it", took)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gate+"/v1/jobs/"+url.PathEscape(jobID), nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the orphan's job %s: HTTP %d", jobID, resp.StatusCode)
	}
	if r, err := post(ctx, hc, gate, key, body); err != nil || r.status != http.StatusCreated || r.replayed != "true" || r.job.JobID != jobID {
		t.Fatalf("retry of the orphan's key: %d replayed=%q job %s, want 201 replaying %s: %v", r.status, r.replayed, r.job.JobID, jobID, err)
	}
}
