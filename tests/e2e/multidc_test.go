package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/localcluster"
)

// startFederation starts dc1 and dc2 (three managers and one gate each),
// federated over WAN gossip, and stops them at the end of the test. Each
// option adjusts the cluster options first.
func startFederation(t *testing.T, options ...func(*localcluster.Options)) *localcluster.Federation {
	t.Helper()
	if testing.Short() {
		t.Skip("real-process test; skipped with -short")
	}
	opts := localcluster.Options{BinDir: binDir, BaseDir: t.TempDir(), Fast: true,
		Env: []string{"MANAGER_LOG_LEVEL=info", "GATE_LOG_LEVEL=info", "GATE_FORWARD_TIMEOUT_SECONDS=3",
			// a forward waits GATE_FORWARD_TIMEOUT_SECONDS plus the pending wait: keep the 503 prompt
			"IDEMPOTENCY_PENDING_WAIT_TIMEOUT=5"}}
	for _, o := range options {
		o(&opts)
	}
	f, err := localcluster.NewFederation(opts,
		[]localcluster.DatacenterSpec{{Name: "dc1", Managers: 3, Gates: 1}, {Name: "dc2", Managers: 3, Gates: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Stop()
		if t.Failed() {
			for _, c := range f.DCs {
				for _, n := range c.All() {
					b, _ := os.ReadFile(n.LogPath)
					if len(b) > 4000 {
						b = b[len(b)-4000:]
					}
					t.Logf("---- %s (%s) tail ----\n%s", n.Name, n.LogPath, b)
				}
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f.StartReady(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// listDC is GET /v1/jobs?datacenter=dc through gate (one page: the tests hold
// a few jobs).
func listDC(ctx context.Context, t *testing.T, gate, dc string) []api.Job {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gate+"/v1/jobs?limit=1000&datacenter="+dc, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("list %s: %v", dc, err)
	}
	defer resp.Body.Close()
	var page api.JobList
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list %s: HTTP %d: %v", dc, resp.StatusCode, err)
	}
	return page.Jobs
}

// TestMultiDCJobInBothDatacenters: a job for dc1 and dc2 through dc1's gate,
// its retry through dc2's gate: one job in each datacenter, one job ID,
// byte-identical answers. Then, with dc2's managers stopped, a new dc1+dc2 job
// is 503 and dc1 keeps its part of it; dc2 restarted, with no client retry,
// gets the job under the same ID from dc1's outbox. Last, two first attempts
// raced through both datacenters' gates make one job in each, one ID, the
// same bytes.
func TestMultiDCJobInBothDatacenters(t *testing.T) {
	f := startFederation(t)
	ctx := ctxFor(t, 3*time.Minute)
	hc := &http.Client{Timeout: 30 * time.Second}
	g1 := f.DC("dc1").GateURLs()[0]
	g2 := f.DC("dc2").GateURLs()[0]
	const key = "host1.dc1:12345:1:0123456789abcdef"
	first, err := post(ctx, hc, g1, key, `{"type":"demo","payload":{"n":1},"datacenters":["dc1","dc2"]}`)
	if err != nil || first.status != http.StatusCreated {
		t.Fatalf("first: %d %s %v", first.status, first.body, err)
	}
	if first.job.Datacenters["dc1"].Status != api.JobStatusCommitted || first.job.Datacenters["dc2"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v", first.job.Datacenters)
	}
	retry, err := post(ctx, hc, g2, key, `{"datacenters":["dc2","dc1"],"type":"demo","payload":{"n":1}}`)
	if err != nil || retry.status != http.StatusCreated || retry.replayed != "true" || !bytes.Equal(retry.body, first.body) {
		t.Fatalf("retry through dc2: %d replayed=%q %v\n%s\nfirst:\n%s", retry.status, retry.replayed, err, retry.body, first.body)
	}
	// Both ledgers expire the key at the same instant.
	var expiries []string
	for _, dc := range []string{"dc1", "dc2"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g2+"/v1/idempotency-keys/"+key+"?datacenter="+dc, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("key in %s: %v", dc, err)
		}
		var info api.KeyInfo
		err = json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || info.JobID == nil || *info.JobID != first.job.JobID {
			t.Fatalf("key in %s: HTTP %d %+v %v", dc, resp.StatusCode, info, err)
		}
		expiries = append(expiries, info.ExpiresAt)
	}
	if expiries[0] != expiries[1] {
		t.Fatalf("the key expires at %s in dc1 and %s in dc2", expiries[0], expiries[1])
	}
	for _, dc := range []string{"dc1", "dc2"} {
		jobs := listDC(ctx, t, g1, dc)
		if len(jobs) != 1 || jobs[0].JobID != first.job.JobID {
			t.Fatalf("%s holds %+v, want only job %s", dc, jobs, first.job.JobID)
		}
	}

	var wg sync.WaitGroup
	for _, m := range f.DC("dc2").Managers {
		wg.Add(1)
		go func() { defer wg.Done(); m.Stop(10 * time.Second) }()
	}
	wg.Wait()
	const key2 = "host1.dc1:12345:2:0123456789abcdef"
	down, err := post(ctx, hc, g1, key2, `{"type":"demo","payload":{"n":2},"datacenters":["dc1","dc2"]}`)
	if err != nil || down.status != http.StatusServiceUnavailable {
		t.Fatalf("with dc2 down: %d %s %v, want 503", down.status, down.body, err)
	}
	var kept bool
	for _, j := range listDC(ctx, t, g1, "dc1") {
		kept = kept || j.IdempotencyKey == key2
	}
	if !kept {
		t.Fatalf("dc1 does not hold its part of the job of %s", key2)
	}

	// dc2 comes back and nobody retries: dc1's outbox carries the job there,
	// with the same ID; oncectl job watch, started before, follows it until
	// both datacenters hold it.
	var inDC1 string
	for _, j := range listDC(ctx, t, g1, "dc1") {
		if j.IdempotencyKey == key2 {
			inDC1 = j.JobID
		}
	}
	bin, err := oncectlBin()
	if err != nil {
		t.Fatalf("building oncectl: %v", err)
	}
	watch := exec.CommandContext(ctx, bin, "--gates", g1, "job", "watch", inDC1, "--datacenters", "dc1,dc2",
		"--timeout", "90s", "--interval", "100ms")
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The first line is dc2 without the job (down): only then does dc2 come
	// back, so the watch sees the change.
	var seen []string
	select {
	case l, ok := <-lines:
		if !ok || !strings.HasSuffix(l, "dc1=committed dc2=unreachable") && !strings.HasSuffix(l, "dc1=committed dc2=missing") {
			t.Fatalf("oncectl job watch's first line %q, want dc2 without the job", l)
		}
		seen = append(seen, l)
	case <-ctx.Done():
		t.Fatal("oncectl job watch printed nothing")
	}
	for _, m := range f.DC("dc2").Managers {
		if err := m.Start(); err != nil {
			t.Fatalf("restart %s: %v", m.Name, err)
		}
	}
	for l := range lines {
		seen = append(seen, l)
	}
	werr := watch.Wait()
	t.Logf("oncectl job watch:\n%s", strings.Join(seen, "\n"))
	if werr != nil || !strings.HasSuffix(seen[len(seen)-1], "dc1=committed dc2=committed") {
		t.Fatalf("oncectl job watch %s: %v; want exit 0 after dc1=committed dc2=committed", inDC1, werr)
	}
	testutil.WaitFor(t, 10*time.Second, func() (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g2+"/v1/jobs?limit=1000&datacenter=dc2", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var page api.JobList
		if json.NewDecoder(resp.Body).Decode(&page) != nil || resp.StatusCode != http.StatusOK {
			return false, fmt.Sprintf("dc2 list: HTTP %d", resp.StatusCode)
		}
		var ids []string
		for _, j := range page.Jobs {
			if j.IdempotencyKey == key2 {
				ids = append(ids, j.JobID)
			}
		}
		return len(ids) == 1 && ids[0] == inDC1, fmt.Sprintf("dc2 to hold job %s of %s once (holds %v)", inDC1, key2, ids)
	})

	// Two first attempts of one key raced through dc1's and dc2's gates: one
	// job in each datacenter, one ID, the same bytes.
	const key3 = "host1.dc1:12345:3:0123456789abcdef"
	var answers [2]answer
	var errs [2]error
	for i, g := range []string{g1, g2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = post(ctx, hc, g, key3, `{"type":"demo","payload":{"n":3},"datacenters":["dc1","dc2"]}`)
		}()
	}
	wg.Wait()
	for i := range answers {
		if errs[i] != nil || answers[i].status != http.StatusCreated {
			t.Fatalf("raced attempt %d: %d %s %v", i, answers[i].status, answers[i].body, errs[i])
		}
	}
	if answers[0].job.JobID != answers[1].job.JobID || !bytes.Equal(answers[0].body, answers[1].body) {
		t.Fatalf("raced attempts differ:\n%s\n%s", answers[0].body, answers[1].body)
	}
	for _, dc := range []string{"dc1", "dc2"} {
		n := 0
		for _, j := range listDC(ctx, t, g1, dc) {
			if j.IdempotencyKey == key3 {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%s holds %d jobs of %s, want 1", dc, n, key3)
		}
	}
}

// TestMultiDCOmittedDatacenters: a job without a datacenters list, sent
// through dc1's gate, runs in dc1 alone; its retry through dc2's gate is the
// first answer byte for byte (the same job ID, datacenters naming dc1) and
// dc2 never holds a job of it, only a claim on its key. First attempts of
// other keys raced through both gates make one job per key in all, every
// answer that job's or a refusal naming the other datacenter.
func TestMultiDCOmittedDatacenters(t *testing.T) {
	f := startFederation(t)
	ctx := ctxFor(t, 2*time.Minute)
	hc := f.DC("dc1").GateClient(30 * time.Second)
	g1 := f.DC("dc1").GateURLs()[0]
	g2 := f.DC("dc2").GateURLs()[0]
	const key = "host1.dc1:12345:31:0123456789abcdef"
	first, err := post(ctx, hc, g1, key, `{"type":"demo","payload":{"n":31}}`)
	if err != nil || first.status != http.StatusCreated {
		t.Fatalf("first: %d %s %v", first.status, first.body, err)
	}
	if len(first.job.Datacenters) != 1 || first.job.Datacenters["dc1"].Status != api.JobStatusCommitted {
		t.Fatalf("datacenters %+v, want dc1 alone", first.job.Datacenters)
	}
	retry, err := post(ctx, hc, g2, key, `{"payload":{"n":31},"type":"demo"}`)
	if err != nil || retry.status != http.StatusCreated || retry.replayed != "true" || !bytes.Equal(retry.body, first.body) {
		t.Fatalf("retry through dc2: %d replayed=%q %v\n%s\nfirst:\n%s", retry.status, retry.replayed, err, retry.body, first.body)
	}
	// Read through dc2's gate, the key is the home's: committed with dc1's
	// job; dc2's own entry, read with ?datacenter=dc2, is the claim.
	readKey := func(query string) api.KeyInfo {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g2+"/v1/idempotency-keys/"+key+query, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var info api.KeyInfo
		if err := json.NewDecoder(resp.Body).Decode(&info); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("key read %q through dc2: HTTP %d %v", query, resp.StatusCode, err)
		}
		return info
	}
	if info := readKey(""); info.State != api.KeyStateCommitted || info.Home != "" || info.JobID == nil || *info.JobID != first.job.JobID {
		t.Fatalf("the key through dc2: %+v, want dc1's committed entry", info)
	}
	if info := readKey("?datacenter=dc2"); info.State != api.KeyStateClaimed || info.Home != "dc1" || info.JobID == nil || *info.JobID != first.job.JobID {
		t.Fatalf("dc2's own entry: %+v, want its claim for dc1", info)
	}

	const racers = 6
	for i := range racers {
		key := fmt.Sprintf("host1.dc1:12345:%d:0123456789abcdef", 40+i)
		body := fmt.Sprintf(`{"type":"demo","payload":{"n":%d}}`, 40+i)
		answers := make([]answer, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for j, g := range []string{g1, g2} {
			wg.Add(1)
			go func() { defer wg.Done(); answers[j], errs[j] = post(ctx, hc, g, key, body) }()
		}
		wg.Wait()
		var created [][]byte
		for j, a := range answers {
			switch {
			case errs[j] != nil:
				t.Fatalf("%s: %v", key, errs[j])
			case a.status == http.StatusCreated:
				created = append(created, a.body)
			case a.status != http.StatusUnprocessableEntity || !bytes.Contains(a.body, []byte(api.CodeIdempotencyKeyClaimed)):
				t.Fatalf("%s: %d %s", key, a.status, a.body)
			}
		}
		if len(created) == 0 || (len(created) == 2 && !bytes.Equal(created[0], created[1])) {
			t.Fatalf("%s: answers %d %s and %d %s", key, answers[0].status, answers[0].body, answers[1].status, answers[1].body)
		}
	}
	jobs := map[string]int{}
	for _, dc := range []string{"dc1", "dc2"} {
		for _, j := range listDCWith(ctx, t, hc, g1, dc) {
			jobs[j.IdempotencyKey]++
		}
	}
	if len(jobs) != racers+1 {
		t.Fatalf("jobs by key %v, want %d keys", jobs, racers+1)
	}
	for k, n := range jobs {
		if n != 1 {
			t.Fatalf("key %s has %d jobs in the two datacenters, want 1", k, n)
		}
	}
}

// listDCWith is listDC through hc.
func listDCWith(ctx context.Context, t *testing.T, hc *http.Client, gate, dc string) []api.Job {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, gate+"/v1/jobs?limit=1000&datacenter="+dc, nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("list %s: %v", dc, err)
	}
	defer resp.Body.Close()
	var page api.JobList
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list %s: HTTP %d: %v", dc, resp.StatusCode, err)
	}
	return page.Jobs
}
