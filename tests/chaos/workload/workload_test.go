package workload

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/once-dev/once/pkg/keys"
	"github.com/once-dev/once/tests/chaos/checker"
	"github.com/once-dev/once/tests/chaos/fakegate"
	"github.com/once-dev/once/tests/chaos/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	gateTokens    = map[string]string{"tok-acme": "acme", "tok-globex": "globex"}
	checkerTokens = map[string]string{"acme": "tok-acme", "globex": "tok-globex"}
)

// startGates serves one fake cluster through n gate URLs on loopback.
func startGates(t *testing.T, n int, opts fakegate.Options) (*fakegate.Gate, []string) {
	t.Helper()
	g := fakegate.New(opts)
	var urls []string
	for range n {
		srv := httptest.NewServer(g)
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	t.Cleanup(g.Close) // runs first: releases hanging handlers before the servers close
	return g, urls
}

// fastConfig shortens every timing so the suite stays quick.
func fastConfig(urls []string) Config {
	return Config{
		GateURLs:         urls,
		Tokens:           checkerTokens,
		Clients:          6,
		RequestTimeout:   2 * time.Second,
		SubmissionBudget: 10 * time.Second,
		BackoffMin:       time.Millisecond,
		BackoffMax:       5 * time.Millisecond,
		Seed:             1,
	}
}

func check(t *testing.T, url string, tokens map[string]string, ops []history.Op) checker.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := checker.Check(ctx, checker.Config{GateURL: url, Tokens: tokens, RequireKeys: true}, ops)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	t.Log(res.Summary())
	return res
}

func TestWorkloadAgainstFaultyGateIsClean(t *testing.T) {
	g, urls := startGates(t, 3, fakegate.Options{
		Tokens:                 gateTokens,
		Seed:                   7,
		HangBefore:             0.03,
		Unavailable:            0.1,
		InProgress:             0.1,
		Reject:                 0.1,
		UnavailableAfterCommit: 0.1,
		HangAfterCommit:        0.03,
		MaxPage:                25,
	})
	cfg := fastConfig(urls)
	cfg.Submissions = 150
	cfg.DuplicateRate = 0.4
	cfg.RequestTimeout = 100 * time.Millisecond // the hangs end in client timeouts
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewRecorder()
	stats, err := w.Run(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", stats)
	ops := rec.Ops()

	if stats.Submissions != 150 || stats.Duplicated == 0 || stats.Unresolved != 0 {
		t.Fatalf("stats %+v: want 150 submissions, some duplicated, none unresolved", stats)
	}
	if stats.Attempts != int64(len(ops)) || stats.Attempts <= stats.Submissions+stats.Duplicated {
		t.Fatalf("stats %+v, %d ops: want one op per attempt and some retries", stats, len(ops))
	}

	// The history: same key, same body on every attempt; structured keys with
	// a colon in the client id; sequences increasing per client; duplicates
	// through another gate; timeouts recorded as indeterminate.
	body := map[string]string{}
	firstGate := map[string]string{}
	lastSeq := map[string]uint64{}
	var timeouts, dupElsewhere, tenants = 0, 0, map[string]bool{}
	for _, op := range ops {
		if !op.Done {
			t.Fatalf("op never completed: %v", op)
		}
		k, err := keys.Parse(op.Key)
		if err != nil || !k.Structured || k.ClientID != op.Client || k.Sequence != op.Seq || !strings.Contains(k.ClientID, ":") {
			t.Fatalf("key %q: %v %+v", op.Key, err, k)
		}
		sig := op.Type + string(op.Payload)
		if b, ok := body[op.Key]; ok && b != sig {
			t.Fatalf("key %s sent with two bodies: %s and %s", op.Key, b, sig)
		}
		body[op.Key] = sig
		if op.Attempt == 1 && !op.Dup {
			if op.Seq <= lastSeq[op.Client] {
				t.Fatalf("client %s: seq %d after %d", op.Client, op.Seq, lastSeq[op.Client])
			}
			lastSeq[op.Client] = op.Seq
			firstGate[op.Key] = op.Gate
		}
		if op.Attempt == 1 && op.Dup && firstGate[op.Key] != "" && op.Gate != firstGate[op.Key] {
			dupElsewhere++
		}
		if op.Timeout {
			timeouts++
			if op.Class() != history.Indeterminate {
				t.Fatalf("timeout is not indeterminate: %v", op)
			}
		}
		tenants[op.Tenant] = true
	}
	if timeouts == 0 || dupElsewhere == 0 || len(tenants) != 2 || len(lastSeq) != cfg.Clients {
		t.Fatalf("timeouts=%d dupElsewhere=%d tenants=%v clients=%d: the faults were not exercised",
			timeouts, dupElsewhere, tenants, len(lastSeq))
	}

	res := check(t, urls[1], checkerTokens, ops)
	if !res.OK() {
		t.Fatalf("a correct gate failed the check:\n%s", res.Summary())
	}
	_, created := g.Counts()
	if res.Checked.JobsListed != created || res.Checked.KeysRejected == 0 {
		t.Fatalf("listed %d jobs, the fake created %d; %d keys rejected", res.Checked.JobsListed, created, res.Checked.KeysRejected)
	}
}

func TestWorkloadCatchesSecondJobAfter503(t *testing.T) {
	g, urls := startGates(t, 2, fakegate.Options{
		Tokens:                 gateTokens,
		Seed:                   3,
		UnavailableAfterCommit: 0.3,
		Bug:                    fakegate.ForgetKeyOn503,
	})
	cfg := fastConfig(urls)
	cfg.Submissions = 60
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewRecorder()
	if _, err := w.Run(context.Background(), rec); err != nil {
		t.Fatal(err)
	}

	// The truth, from the fake's table: keys that got more than one job.
	doubled := 0
	for tenant := range checkerTokens {
		perKey := map[string]int{}
		for _, j := range g.Jobs(tenant) {
			perKey[j.IdempotencyKey]++
		}
		for _, n := range perKey {
			if n > 1 {
				doubled++
			}
		}
	}
	if doubled == 0 {
		t.Fatal("the bug never fired; raise UnavailableAfterCommit")
	}

	res := check(t, urls[0], cfg.Tokens, rec.Ops())
	by := res.ByRule()
	if by[checker.RuleAtMostOneJob] != doubled || len(res.Violations) != doubled {
		t.Fatalf("want exactly %d %s violations, got %v", doubled, checker.RuleAtMostOneJob, by)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	// Every request hangs: only cancellation ends the run.
	arrived := make(chan struct{}, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Drain the body first: the server notices a client going away only
		// once it has read the request.
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	defer srv.Close()

	cfg := fastConfig([]string{srv.URL})
	cfg.Tokens = nil
	cfg.Clients = 3
	cfg.Duration = time.Hour
	cfg.RequestTimeout = time.Hour
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec := history.NewRecorder()
	type result struct {
		stats Stats
		err   error
	}
	done := make(chan result)
	go func() {
		s, err := w.Run(ctx, rec)
		done <- result{s, err}
	}()
	for range cfg.Clients {
		<-arrived
	}
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stats.Unresolved != int64(cfg.Clients) || r.stats.Submissions != int64(cfg.Clients) {
		t.Fatalf("stats %+v", r.stats)
	}
	for _, op := range rec.Ops() {
		if !op.Done || op.Class() != history.Indeterminate || op.Tenant != "default" {
			t.Fatalf("cancelled op: %v", op)
		}
	}
}

func TestRunBoundedByDuration(t *testing.T) {
	_, urls := startGates(t, 1, fakegate.Options{})
	cfg := fastConfig(urls)
	cfg.Tokens = nil
	cfg.Duration = 50 * time.Millisecond
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewRecorder()
	start := time.Now()
	stats, err := w.Run(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Submissions == 0 || stats.Committed != stats.Submissions || time.Since(start) > 5*time.Second {
		t.Fatalf("stats %+v after %v", stats, time.Since(start))
	}
	if res := check(t, urls[0], cfg.Tokens, rec.Ops()); !res.OK() {
		t.Fatal(res.Summary())
	}
}

func TestKeysNeverRepeat(t *testing.T) {
	_, urls := startGates(t, 2, fakegate.Options{})
	cfg := fastConfig(urls)
	cfg.Tokens = nil
	cfg.Clients = 2
	cfg.Submissions = 4
	rec := history.NewRecorder()
	seen := map[string]int{} // key → the run that used it
	runs := 0
	runOnce := func(w *Workload) {
		runs++
		before := rec.Len()
		if _, err := w.Run(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		for _, op := range rec.Ops()[before:] {
			// Retries within a run reuse their key; a later run never does.
			if r, ok := seen[op.Key]; ok && r != runs {
				t.Fatalf("run %d reused key %s of run %d", runs, op.Key, r)
			}
			seen[op.Key] = runs
		}
	}
	w1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runOnce(w1)
	runOnce(w1) // sequences continue
	w2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runOnce(w2) // a restart: same client ids, new nonces
	if len(seen) != 12 {
		t.Fatalf("%d keys, want 12", len(seen))
	}
	if res := check(t, urls[0], cfg.Tokens, rec.Ops()); !res.OK() {
		t.Fatal(res.Summary())
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{GateURLs: []string{"http://127.0.0.1:1/"}, Submissions: 1}
	if _, err := New(ok); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Config){
		"no gates":         func(c *Config) { c.GateURLs = nil },
		"bad gate":         func(c *Config) { c.GateURLs = []string{"127.0.0.1:1"} },
		"unbounded":        func(c *Config) { c.Submissions = 0 },
		"rate":             func(c *Config) { c.DuplicateRate = 1.5 },
		"prefix":           func(c *Config) { c.ClientIDPrefix = "has space" },
		"long prefix":      func(c *Config) { c.ClientIDPrefix = strings.Repeat("a", 126) },
		"backoff":          func(c *Config) { c.BackoffMin, c.BackoffMax = time.Second, time.Millisecond },
		"negative count":   func(c *Config) { c.Clients = -1 },
		"gate datacenters": func(c *Config) { c.GateDatacenters = []string{"dc1", "dc2"} },
		"both lists": func(c *Config) {
			c.Datacenters, c.DatacenterSets = []string{"dc1"}, [][]string{nil}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			c.GateURLs = append([]string(nil), ok.GateURLs...)
			mutate(&c)
			if _, err := New(c); err == nil {
				t.Fatal("invalid config accepted")
			} else {
				t.Log(err)
			}
		})
	}
}

// With DatacenterSets each key is sent with one drawn list (nil: the member
// omitted) on every attempt; with GateDatacenters a retry after a 503 goes
// through a gate of another datacenter, and after a 409 to the next gate.
func TestDatacenterSetsAndFailoverToAnotherDatacenter(t *testing.T) {
	_, urls := startGates(t, 6, fakegate.Options{Tokens: gateTokens, Seed: 3, Unavailable: 0.3, InProgress: 0.1})
	cfg := fastConfig(urls)
	cfg.Submissions = 120
	cfg.GateDatacenters = []string{"dc1", "dc1", "dc2", "dc2", "dc3", "dc3"}
	cfg.DatacenterSets = [][]string{{"dc1", "dc2", "dc3"}, {"dc1", "dc3"}, nil}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewRecorder()
	if _, err := w.Run(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	dcOf := map[string]string{}
	for i, u := range urls {
		dcOf[u] = cfg.GateDatacenters[i]
	}
	type path struct {
		key string
		dup bool
	}
	last := map[path]history.Op{}
	lists := map[string]string{}
	seen := map[string]bool{}
	var failovers, nexts int
	for _, op := range rec.Ops() { // in invoke order: a path's attempts in sequence
		list := strings.Join(op.Datacenters, ",")
		if l, ok := lists[op.Key]; ok && l != list {
			t.Fatalf("key %s sent with [%s] and [%s]", op.Key, l, list)
		}
		lists[op.Key] = list
		seen[list] = true
		p := path{op.Key, op.Dup}
		if prev, ok := last[p]; ok {
			switch {
			case prev.Status >= 500 || prev.Err != "":
				failovers++
				if dcOf[op.Gate] == dcOf[prev.Gate] {
					t.Errorf("key %s: retry after %d through %s, the same datacenter", op.Key, prev.Status, op.Gate)
				}
			default:
				nexts++
				if op.Gate == prev.Gate {
					t.Errorf("key %s: retry after %d through the same gate", op.Key, prev.Status)
				}
			}
		}
		last[p] = op
	}
	if len(seen) != 3 || failovers == 0 || nexts == 0 {
		t.Fatalf("lists %v, %d failovers, %d other retries: not exercised", seen, failovers, nexts)
	}
}
