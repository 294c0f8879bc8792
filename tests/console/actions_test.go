package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
	"github.com/once-dev/once/tests/localcluster"
)

// interceptPosts wraps the page's fetch: every POST's Idempotency-Key is
// recorded in window.posts; the first POST is refused before it leaves
// (a dropped connection: its outcome unknown to the console), the second
// is held until window.releasePost() is called, the others go as they are.
// window.reads counts the reads answered.
const interceptPosts = `(() => {
	const orig = window.fetch.bind(window);
	window.posts = []; window.reads = 0;
	window.fetch = (url, init) => {
		if (init.method !== "POST") return orig(url, init).then(r => { window.reads++; return r; });
		window.posts.push(init.headers["Idempotency-Key"]);
		if (window.posts.length === 1) return Promise.reject(new TypeError("test: the connection dropped"));
		if (window.posts.length === 2) return new Promise(res => { window.releasePost = () => res(orig(url, init)); });
		return orig(url, init);
	};
	return 1;
})()`

// TestConsoleActionKeys: an action whose answer the console did not get is
// sent again with the same Idempotency-Key, and while an action is in
// flight its button stays disabled, whatever the polls read meanwhile: a
// double click never sends two actions.
func TestConsoleActionKeys(t *testing.T) {
	_, ctx, gate := readyCluster(t)
	p := &page{t: t, tab: browser(t, ctx), base: gate + "/ui/"}
	alpha := newClient(t, gate, tokenAlpha)
	res, err := alpha.Submit(ctx, api.JobRequest{Type: idleType, Payload: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	idle := res.Job.JobID

	p.signIn(tokenAlpha, "")
	p.open("#/job/" + idle)
	p.wait("the job, queued", `#job-state [data-state="queued"]`)
	eval[int](p, "intercept the POSTs", interceptPosts)

	// The first cancel is lost: the console says so, and offers it again.
	p.run("cancel", chromedp.WaitEnabled(chromedp.CSS("#btn-cancel")), chromedp.Click(chromedp.CSS("#btn-cancel")))
	p.until("the lost cancel is shown", `document.getElementById("message").textContent.includes("the connection dropped")`)
	p.run("cancel again", chromedp.WaitEnabled(chromedp.CSS("#btn-cancel")), chromedp.Click(chromedp.CSS("#btn-cancel")))
	p.until("the second cancel is sent", `window.posts.length === 2 && typeof window.releasePost === "function"`)

	// While it is in flight, polls read the job still queued; a click on
	// Cancel then sends nothing.
	reads := eval[int](p, "reads so far", `window.reads`)
	p.until("two polls more", `window.reads >= `+strconv.Itoa(reads+2))
	eval[int](p, "click Cancel again", `document.getElementById("btn-cancel").click(), 1`)
	// Nor once the view is drawn again (refresh turned off): the action in
	// flight is the job's, not the view's; and its answer redraws the view
	// drawn since, which no longer polls.
	reads = eval[int](p, "draw the view again", `(() => { const r = window.reads, s = document.getElementById("poll"); s.value = "0";
		s.dispatchEvent(new Event("change")); return r; })()`)
	p.until("the new view's read", `document.getElementById("job-state") !== null && window.reads >= `+strconv.Itoa(reads+1))
	eval[int](p, "click Cancel in the new view", `document.getElementById("btn-cancel").click(), 1`)
	eval[int](p, "answer the held cancel", `window.releasePost(), 1`)
	p.wait("the job, cancelled", `#job-state [data-state="cancelled"]`)
	if got := p.text("#message"); !strings.Contains(got, "Cancelled") {
		t.Errorf("the message after the cancel: %q", got)
	}

	var keys []string
	if err := json.Unmarshal([]byte(eval[string](p, "the keys sent", `JSON.stringify(window.posts)`)), &keys); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0] != keys[1] || !strings.HasPrefix(keys[0], "console-") {
		t.Errorf("the cancels sent carry the keys %q, want the same key twice", keys)
	}
	j, err := alpha.GetJob(ctx, idle)
	if err != nil || j.State != api.JobStatusCancelled {
		t.Fatalf("the job through the API: %+v %v", j, err)
	}

	// A retry whose answer is lost after the gate applied it: the job runs
	// again (a worker whose every attempt fails) and is dead again. The
	// next press is a new retry, with a new key, not a replay of the first.
	var wg sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := alpha.Run(wctx, client.WorkerOptions{Types: []string{failType}, LeaseFor: 10 * time.Second, Wait: time.Second},
			func(context.Context, api.Job, int) (any, error) { return nil, errors.New("smtp timeout") })
		if err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	defer func() { stop(); wg.Wait() }()
	res, err = alpha.Submit(ctx, api.JobRequest{Type: failType, Payload: json.RawMessage(`{"n":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	dead := res.Job.JobID
	p.open("#/job/" + dead)
	eval[int](p, "poll every 500 ms again", `sessionStorage.setItem("once.poll", "500"), 1`)
	p.run("reload", chromedp.Reload())
	p.wait("the job, dead", `#job-state [data-state="dead"]`)
	eval[int](p, "lose the first POST's answer", loseFirstAnswer)
	p.run("retry", chromedp.WaitEnabled(chromedp.CSS("#btn-retry")), chromedp.Click(chromedp.CSS("#btn-retry")))
	p.until("the lost retry is shown", `document.getElementById("message").textContent.includes("the answer was lost")`)
	p.until("the job, dead again after its second attempt", `document.getElementById("job-attempts").textContent === "2" &&
		document.querySelector('#job-state [data-state="dead"]') !== null`)
	p.run("retry again", chromedp.WaitEnabled(chromedp.CSS("#btn-retry")), chromedp.Click(chromedp.CSS("#btn-retry")))
	p.until("the second retry answered", `window.sent.length === 2 && document.getElementById("message").textContent.startsWith("Queued")`)
	if sent := eval[string](p, "the keys sent", `window.sent.join(" ")`); len(strings.Fields(sent)) != 2 || strings.Fields(sent)[0] == strings.Fields(sent)[1] {
		t.Errorf("the retries sent carry the keys %q, want two keys", sent)
	}
	p.until("the job's third attempt", `document.getElementById("job-attempts").textContent === "3"`)
}

// loseFirstAnswer wraps the page's fetch: every POST's Idempotency-Key is
// recorded in window.sent; the first POST reaches the gate, but its answer
// is lost (a dropped connection); the others go as they are.
const loseFirstAnswer = `(() => {
	const orig = window.fetch.bind(window);
	window.sent = [];
	window.fetch = (url, init) => {
		if (init.method !== "POST") return orig(url, init);
		window.sent.push(init.headers["Idempotency-Key"]);
		if (window.sent.length > 1) return orig(url, init);
		return orig(url, init).then(() => { throw new TypeError("test: the answer was lost"); });
	};
	return 1;
})()`

// TestConsoleShowsRetryAfter: an action the API refuses for now (503
// unavailable: the ledger, of one entry, is full) shows the API's problem
// and its Retry-After, as the gate answered it.
func TestConsoleShowsRetryAfter(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process test; skipped with -short")
	}
	dir := t.TempDir()
	c := localcluster.StartForTest(t, localcluster.Options{BinDir: binDir, BaseDir: filepath.Join(dir, "cluster"), Managers: 1, Gates: 1, Fast: true,
		GateEnv: tokenFiles(t, dir), ManagerEnv: []string{"IDEMPOTENCY_LEDGER_MAX_ENTRIES=1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	gate := c.GateURLs()[0]
	res, err := newClient(t, gate, tokenAlpha).Submit(ctx, api.JobRequest{Type: idleType, Payload: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	job := res.Job.JobID

	// The API's answer to a cancel: the ledger holds no entry for its key.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gate+"/v1/jobs/"+job+"/cancel", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokenAlpha)
	req.Header.Set("Idempotency-Key", "console-probe")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	after := resp.Header.Get("Retry-After")
	if resp.StatusCode != http.StatusServiceUnavailable || after == "" {
		t.Fatalf("a cancel with the ledger full: %d, Retry-After %q; want 503 with a Retry-After", resp.StatusCode, after)
	}

	p := &page{t: t, tab: browser(t, ctx), base: gate + "/ui/"}
	p.signIn(tokenAlpha, "")
	p.open("#/job/" + job)
	p.wait("the job, queued", `#job-state [data-state="queued"]`)
	eval[int](p, "record the POSTs", recordPosts)
	p.run("cancel", chromedp.WaitEnabled(chromedp.CSS("#btn-cancel")), chromedp.Click(chromedp.CSS("#btn-cancel")))
	p.until("the refusal", `document.getElementById("message").textContent.includes("(unavailable)")`)
	if got, want := p.text("#message"), "retry after "+after+" s"; !strings.Contains(got, want) {
		t.Errorf("the console's message %q lacks %q", got, want)
	}
	// Nothing was done: the next press is the same action, with its key.
	p.run("cancel again", chromedp.WaitEnabled(chromedp.CSS("#btn-cancel")), chromedp.Click(chromedp.CSS("#btn-cancel")))
	p.until("the second answer", `window.answered === 2`)
	if keys := eval[string](p, "the keys sent", `window.posts.join(" ")`); len(strings.Fields(keys)) != 2 || strings.Fields(keys)[0] != strings.Fields(keys)[1] {
		t.Errorf("the cancels sent carry the keys %q, want the same key twice", keys)
	}
}

// recordPosts wraps the page's fetch: every POST's Idempotency-Key is
// recorded in window.posts, and window.answered counts their answers.
const recordPosts = `(() => {
	const orig = window.fetch.bind(window);
	window.posts = []; window.answered = 0;
	window.fetch = (url, init) => {
		if (init.method !== "POST") return orig(url, init);
		window.posts.push(init.headers["Idempotency-Key"]);
		return orig(url, init).finally(() => { window.answered++; });
	};
	return 1;
})()`

// actingMax is the console's ACTING_MAX: the jobs whose action keys one
// tab keeps at most.
const actingMax = 50

// dropPosts wraps the page's fetch: every POST's Idempotency-Key is
// recorded in window.posts; while window.drop is true a POST is refused
// before it leaves (a dropped connection: its outcome unknown to the
// console), else it goes as it is.
const dropPosts = `(() => {
	const orig = window.fetch.bind(window);
	window.posts = []; window.drop = false;
	window.fetch = (url, init) => {
		if (init.method !== "POST") return orig(url, init);
		window.posts.push(init.headers["Idempotency-Key"]);
		if (window.drop) return Promise.reject(new TypeError("test: the connection dropped"));
		return orig(url, init);
	};
	return 1;
})()`

// TestConsoleActionKeysBounded: the console's memory of action keys (kept
// so that a click retried after a network failure replays the action)
// stays bounded in a tab left open. A job viewed, or acted on with a final
// answer, leaves nothing held; actions whose outcome is unknown keep their
// keys for at most actingMax jobs, the least recently used forgotten first,
// and a retried click on a job still held reuses its key.
func TestConsoleActionKeysBounded(t *testing.T) {
	_, ctx, gate := readyCluster(t)
	p := &page{t: t, tab: browser(t, ctx), base: gate + "/ui/"}
	alpha := newClient(t, gate, tokenAlpha)
	jobs := make([]string, actingMax+2)
	for i := range jobs {
		res, err := alpha.Submit(ctx, api.JobRequest{Type: idleType, Payload: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)})
		if err != nil {
			t.Fatal(err)
		}
		jobs[i] = res.Job.JobID
	}
	held := func(what string) (n struct{ Jobs, Keys int }) {
		t.Helper()
		if err := json.Unmarshal([]byte(eval[string](p, what, `JSON.stringify(window.onceConsole.held())`)), &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// show opens a job's page (in the same document: the fetch wrapper
	// stays) and waits until its Cancel is offered.
	show := func(job string) {
		t.Helper()
		eval[int](p, "open "+job, `location.hash = "#/job/`+job+`", 1`)
		p.until("the page of "+job+", Cancel offered", `document.getElementById("job-id").textContent === "`+job+`" &&
			document.querySelector('#job-state [data-state="queued"]') !== null && !document.getElementById("btn-cancel").disabled`)
	}
	// cancel clicks Cancel and waits until the action is answered (or
	// lost) and the page drawn again.
	cancel := func(job string) {
		t.Helper()
		n := eval[int](p, "the POSTs so far", `window.posts.length`)
		eval[int](p, "cancel "+job, `document.getElementById("btn-cancel").click(), 1`)
		p.until("the cancel of "+job+" answered", `window.posts.length === `+strconv.Itoa(n+1)+` && document.getElementById("message").textContent !== ""`)
	}

	p.signIn(tokenAlpha, "")
	p.open("#/job/" + jobs[0])
	p.wait("the first job", `#job-state [data-state="queued"]`)
	eval[int](p, "record the POSTs", dropPosts)

	// A job viewed, and a job cancelled (a final answer), hold nothing.
	show(jobs[1])
	show(jobs[0])
	if n := held("after viewing two jobs"); n.Jobs != 0 || n.Keys != 0 {
		t.Errorf("after viewing two jobs the console holds %+v, want nothing", n)
	}
	cancel(jobs[0])
	p.wait("the first job, cancelled", `#job-state [data-state="cancelled"]`)
	if n := held("after a cancel answered"); n.Jobs != 0 || n.Keys != 0 {
		t.Errorf("after a cancel answered the console holds %+v, want nothing", n)
	}

	// Cancels whose connection dropped, on more jobs than the bound: each
	// keeps its key, the oldest forgotten past actingMax jobs.
	eval[int](p, "drop the POSTs", `window.drop = true, 1`)
	lost := jobs[1:]
	for i, job := range lost {
		show(job)
		cancel(job)
		if n, want := held("after a lost cancel"), min(i+1, actingMax); n.Jobs != want || n.Keys != want {
			t.Fatalf("after %d lost cancels the console holds %+v, want %d jobs and keys", i+1, n, want)
		}
	}
	var first []string
	if err := json.Unmarshal([]byte(eval[string](p, "the keys sent", `JSON.stringify(window.posts)`)), &first); err != nil {
		t.Fatal(err)
	}
	// The last job's cancel, pressed again, is the same action: its key.
	last := lost[len(lost)-1]
	show(last)
	cancel(last)
	// The first lost one was forgotten: its next press is a new key.
	show(lost[0])
	cancel(lost[0])
	var all []string
	if err := json.Unmarshal([]byte(eval[string](p, "the keys sent", `JSON.stringify(window.posts)`)), &all); err != nil {
		t.Fatal(err)
	}
	if len(all) != len(first)+2 {
		t.Fatalf("%d POSTs sent, want %d", len(all), len(first)+2)
	}
	if got, want := all[len(first)], first[len(first)-1]; got != want {
		t.Errorf("the last job's cancel pressed again sent key %q, want its first key %q", got, want)
	}
	if got, old := all[len(first)+1], first[1]; got == old {
		t.Errorf("the first lost cancel, forgotten past %d jobs, pressed again sent its old key %q", actingMax, got)
	}
	if n := held("at the end"); n.Jobs != actingMax || n.Keys != actingMax {
		t.Errorf("at the end the console holds %+v, want %d jobs and keys", n, actingMax)
	}
}
