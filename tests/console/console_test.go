package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
	"github.com/once-dev/once/tests/localcluster"
)

// Tokens of the test's gate: two tenants and an operator.
const (
	tokenAlpha    = "console-alpha-token"
	tokenBeta     = "console-beta-token"
	tokenOperator = "console-operator-token"
)

// The job types of the test: a worker runs workType (succeeds) and
// failType (its first attempt fails: the job is dead, MANAGER_JOB_MAX_ATTEMPTS=1;
// later attempts succeed); nothing leases idleType.
const (
	workType = "console-work"
	failType = "console-fail"
	idleType = "console-idle"
)

// chromiumPath finds the browser; without one the test fails (make test
// needs Chromium: .ci/run installs it, README.md says how).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium binary (chromium, chromium-browser, google-chrome, headless-shell) on PATH: the console's browser tests need one (apt-get install -y chromium)")
	return ""
}

// browser starts a headless Chromium for the test and returns a tab's
// context, ended with the test.
func browser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // root in containers
		chromedp.WindowSize(1280, 860),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return tab
}

// startCluster starts 3 managers and a gate with the test's tokens.
func startCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("real-process test; skipped with -short")
	}
	dir := t.TempDir()
	return localcluster.StartForTest(t, localcluster.Options{BinDir: binDir, BaseDir: filepath.Join(dir, "cluster"), Managers: 3, Gates: 1, Fast: true,
		Env:        []string{"MANAGER_LOG_LEVEL=info", "GATE_LOG_LEVEL=info"},
		GateEnv:    tokenFiles(t, dir),
		ManagerEnv: []string{"MANAGER_JOB_MAX_ATTEMPTS=1"}})
}

// readyCluster starts the test's cluster (startCluster) and waits until its
// gate is ready; it returns the cluster, a context of the test's five
// minutes, and the gate's URL.
func readyCluster(t *testing.T) (*localcluster.Cluster, context.Context, string) {
	t.Helper()
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c, ctx, c.GateURLs()[0]
}

// tokenFiles writes the test's token files (the tenants alpha and beta, the
// operator ops) into dir and returns the gate's environment naming them.
func tokenFiles(t *testing.T, dir string) []string {
	t.Helper()
	tokens := filepath.Join(dir, "tokens")
	operators := filepath.Join(dir, "operators")
	if err := os.WriteFile(tokens, []byte(tokenAlpha+" alpha\n"+tokenBeta+" beta\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(operators, []byte(tokenOperator+" ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"GATE_TOKEN_FILE=" + tokens, "GATE_OPERATOR_TOKEN_FILE=" + operators}
}

// newClient is a Go client of the gate for one tenant.
func newClient(t *testing.T, gate, token string) *client.Client {
	t.Helper()
	ks, err := client.OpenKeys(filepath.Join(t.TempDir(), "keys.json"), client.KeysOptions{ClientID: "console.test"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New([]string{gate}, client.Options{Keys: ks, Token: token, MaxAttempts: 60,
		InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, AttemptTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// screenshots is where screenshots go (ONCE_CONSOLE_SCREENSHOTS=1), or "".
func screenshots(t *testing.T) string {
	if os.Getenv("ONCE_CONSOLE_SCREENSHOTS") == "" {
		return ""
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "docs", "console"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// page drives the console in one tab.
type page struct {
	t    *testing.T
	tab  context.Context
	base string // http://gate/ui/
	shot string // screenshot directory, "" for none
}

func (p *page) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.tab, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.fail(what, err)
	}
}

// fail ends the test with the console's message line.
func (p *page) fail(what string, err error) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.tab, 5*time.Second)
	defer cancel()
	msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("message").textContent`))
	p.t.Fatalf("%s: %v (console message: %q)", what, err, msg)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](p *page, what, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.tab, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.fail(what, err)
	}
	return v
}

// until waits until a JavaScript expression is true in the page.
func (p *page) until(what, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.tab, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		p.fail(what, err)
	}
}

// open shows the console's view at fragment (e.g. "#/jobs").
func (p *page) open(fragment string) {
	p.t.Helper()
	p.run("open "+fragment, chromedp.Navigate(p.base+fragment))
}

// wait waits until sel (a CSS selector) is visible.
func (p *page) wait(what, sel string) {
	p.t.Helper()
	p.run(what, chromedp.WaitVisible(chromedp.CSS(sel)))
}

func (p *page) text(sel string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.tab, 60*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		p.fail("read "+sel, err)
	}
	return s
}

func (p *page) screenshot(name string) {
	p.t.Helper()
	if p.shot == "" {
		return
	}
	ctx, cancel := context.WithTimeout(p.tab, 60*time.Second)
	defer cancel()
	b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.fail("screenshot "+name, err)
	}
	if err := os.WriteFile(filepath.Join(p.shot, name+".png"), b, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// signIn signs in with a tenant token and an operator token ("" for none),
// polling every 500 ms (the console's refresh setting).
func (p *page) signIn(tenant, operator string) {
	p.t.Helper()
	p.open("#/signin")
	eval[int](p, "poll every 500 ms", `sessionStorage.setItem("once.poll", "500"), 1`)
	p.wait("the sign-in form", "#signin-token")
	eval[int](p, "type the tokens", fmt.Sprintf(`document.getElementById("signin-token").value = %q,
		document.getElementById("signin-operator").value = %q, 1`, tenant, operator))
	p.run("sign in", chromedp.Click(chromedp.CSS("#signin-submit")), chromedp.WaitVisible(chromedp.CSS("table#jobs")))
}

func jobRow(id, state string) string {
	return fmt.Sprintf(`#jobs tr[data-job-id=%q] [data-state=%q]`, id, state)
}

// TestConsoleInBrowser: the console in Chromium against real processes.
// A job submitted through the API appears in the jobs view and turns
// succeeded live as a worker runs it; its page shows its life; a dead job
// is retried from the console and runs; a queued job is cancelled from
// the console; the queues and cluster views show the datacenter; another
// tenant sees none of it.
func TestConsoleInBrowser(t *testing.T) {
	_, ctx, gate := readyCluster(t)
	tab := browser(t, ctx)
	p := &page{t: t, tab: tab, base: gate + "/ui/", shot: screenshots(t)}
	alpha := newClient(t, gate, tokenAlpha)
	submit := func(typ string, payload string) string {
		t.Helper()
		res, err := alpha.Submit(ctx, api.JobRequest{Type: typ, Payload: json.RawMessage(payload)})
		if err != nil {
			t.Fatal(err)
		}
		return res.Job.JobID
	}

	// A first visit asks for the token.
	p.open("")
	p.wait("the sign-in form", "#signin-token")
	p.screenshot("signin")
	p.signIn(tokenAlpha, tokenOperator)

	// A job appears, queued, without a reload...
	eval[int](p, "mark the page", `window.onceMarker = 42`)
	work := submit(workType, `{"invoice":"INV-1"}`)
	p.wait("the submitted job, queued", jobRow(work, "queued"))

	// ...and turns succeeded as a worker runs it.
	var mu sync.Mutex
	attempts := map[string][]int{}
	handler := func(_ context.Context, job api.Job, attempt int) (any, error) {
		mu.Lock()
		attempts[job.JobID] = append(attempts[job.JobID], attempt)
		mu.Unlock()
		if job.Type == failType && attempt == 1 {
			return nil, errors.New("smtp timeout")
		}
		return map[string]any{"done": true, "attempt": attempt}, nil
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := alpha.Run(wctx, client.WorkerOptions{Types: []string{workType, failType}, LeaseFor: 10 * time.Second,
			Wait: time.Second}, handler); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	defer func() { stop(); wg.Wait() }()
	p.wait("the job, succeeded", jobRow(work, "succeeded"))
	if marker := eval[int](p, "the page was not reloaded", `window.onceMarker || 0`); marker != 42 {
		t.Fatalf("the jobs view reloaded the page (marker %d)", marker)
	}

	// Filters: by state and type.
	p.open("#/jobs?state=succeeded&type=" + workType)
	p.wait("the filtered list", jobRow(work, "succeeded"))
	// State and type together are read on demand, not polled.
	p.wait("the note on manual refresh", "#manual-refresh")
	p.screenshot("jobs")
	// Newest first by default; the order filter asks for oldest first.
	if got := eval[string](p, "the order", `document.getElementById("f-order").value`); got != "desc" {
		t.Errorf("the jobs view's order is %q, want desc (newest first)", got)
	}
	eval[int](p, "choose oldest first", `document.getElementById("f-order").value = "asc", 1`)
	p.run("show oldest first", chromedp.Click(chromedp.CSS("#f-apply")))
	// The view drawn for the new address, not the old one whose order
	// select the test has just set: its note says oldest first. (The old
	// form, if typed into before the hashchange redraws the view, loses
	// what was typed.)
	p.until("the oldest-first page", `location.hash.includes("order=asc") && document.getElementById("f-order").value === "asc" && [...document.querySelectorAll("#view p.note")].some(n => n.textContent.startsWith("Oldest first"))`)
	p.wait("the job, oldest first", jobRow(work, "succeeded"))

	// Its page, found by its idempotency key: key, payload, state,
	// attempts, result, datacenters.
	key := p.text(fmt.Sprintf(`#jobs tr[data-job-id=%q] td:last-child`, work))
	eval[int](p, "type the key", fmt.Sprintf(`document.getElementById("f-key").value = %q, 1`, key))
	p.run("find the key", chromedp.Click(chromedp.CSS("#f-apply")))
	p.wait("the job's page", `#job-state [data-state="succeeded"]`)
	if got := p.text("#job-id"); got != work {
		t.Fatalf("the key %q opened job %q, want %q", key, got, work)
	}
	if got := p.text("#job-key"); got != key {
		t.Errorf("key %q, want %q", got, key)
	}
	if got := p.text("#job-result"); !strings.Contains(got, `"done": true`) {
		t.Errorf("result %q", got)
	}
	if got := p.text("#job-payload"); !strings.Contains(got, "INV-1") {
		t.Errorf("payload %q", got)
	}
	if got := p.text("#job-datacenters"); !strings.Contains(got, "dc1: committed") {
		t.Errorf("datacenters %q", got)
	}
	if got := p.text("#job-attempts"); got != "1" {
		t.Errorf("attempts %q", got)
	}

	// A dead job, retried from the console, runs again and succeeds.
	dead := submit(failType, `{"to":"ops@example.com"}`)
	p.open("#/job/" + dead)
	p.wait("the job, dead", `#job-state [data-state="dead"]`)
	if got := p.text("#job-error"); !strings.Contains(got, "smtp timeout") {
		t.Errorf("error %q", got)
	}
	p.screenshot("job-dead")
	p.run("retry", chromedp.WaitEnabled(chromedp.CSS("#btn-retry")), chromedp.Click(chromedp.CSS("#btn-retry")))
	p.wait("the retried job, succeeded", `#job-state [data-state="succeeded"]`)
	mu.Lock()
	if got := attempts[dead]; len(got) != 2 || got[1] != 2 {
		t.Errorf("attempts of the retried job: %v, want [1 2]", got)
	}
	mu.Unlock()
	p.screenshot("job")

	// A queued job (no worker for its type) is cancelled from the console.
	idle := submit(idleType, `{"n":1}`)
	submit(idleType, `{"n":2}`)
	p.open("#/queues?types=" + idleType + "," + workType)
	p.wait("the queue of idle jobs", fmt.Sprintf(`#queues tr[data-type=%q]`, idleType))
	if got := p.text(fmt.Sprintf(`#queues tr[data-type=%q] td.queued`, idleType)); got != "2" {
		t.Errorf("queued %s: %q, want 2", idleType, got)
	}
	p.screenshot("queues")
	p.open("#/job/" + idle)
	p.wait("the idle job, queued", `#job-state [data-state="queued"]`)
	p.run("cancel", chromedp.WaitEnabled(chromedp.CSS("#btn-cancel")), chromedp.Click(chromedp.CSS("#btn-cancel")))
	p.wait("the job, cancelled", `#job-state [data-state="cancelled"]`)
	j, err := alpha.GetJob(ctx, idle)
	if err != nil || j.State != api.JobStatusCancelled {
		t.Fatalf("the cancelled job through the API: %+v %v", j, err)
	}
	// Retry is refused on a cancelled job: its button stays disabled.
	if !eval[bool](p, "retry disabled", `document.getElementById("btn-retry").disabled`) {
		t.Error("retry is enabled on a cancelled job")
	}

	// The cluster view: the leader, three managers, the gate.
	p.open("#/cluster")
	p.wait("the cluster view", "#managers tbody tr")
	p.until("three managers and a leader", `document.querySelectorAll("#managers tbody tr").length === 3 &&
		!document.getElementById("cluster-leader").textContent.startsWith("none")`)
	if got := p.text("#cluster-queues"); !strings.Contains(got, "queued 1") || !strings.Contains(got, "cancelled 1") {
		t.Errorf("the datacenter's jobs: %q", got)
	}
	// The leader's budgets: one queued job of MANAGER_MAX_QUEUED_JOBS (default 1000000).
	if got := eval[string](p, "the queued budget", `[...document.querySelectorAll("#cluster-budgets dt")]
		.find(d => d.textContent === "queued jobs").nextElementSibling.textContent.trim()`); got != "1 / 1000000" {
		t.Errorf("queued jobs budget %q, want 1 / 1000000", got)
	}
	p.screenshot("cluster")

	// Another tenant sees none of alpha's jobs, and no cluster without an
	// operator token.
	p.run("sign out", chromedp.Click(chromedp.CSS("#signout")))
	p.signIn(tokenBeta, "")
	p.wait("beta's empty list", "#jobs tr.empty")
	p.open("#/job/" + work)
	p.until("alpha's job is not found for beta", `document.getElementById("message").textContent.includes("job_not_found")`)
	if rows := eval[int](p, "no job shown", `document.querySelectorAll("#job dd").length`); rows != 0 {
		t.Errorf("beta sees %d members of alpha's job", rows)
	}
	p.open("#/cluster")
	p.until("the cluster refused", `document.getElementById("message").textContent.includes("401")`)
}
