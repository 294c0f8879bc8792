package console

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/tests/localcluster"
)

// startFederation starts dc1 and dc2 (one manager and one gate each, the
// gates with the test's token files), federated over WAN gossip, and stops
// them at the end of the test.
func startFederation(t *testing.T) *localcluster.Federation {
	t.Helper()
	if testing.Short() {
		t.Skip("real-process test; skipped with -short")
	}
	dir := t.TempDir()
	f, err := localcluster.NewFederation(localcluster.Options{BinDir: binDir, BaseDir: filepath.Join(dir, "cluster"), Fast: true,
		Env:     []string{"MANAGER_LOG_LEVEL=info", "GATE_LOG_LEVEL=info"},
		GateEnv: tokenFiles(t, dir), GateToken: tokenAlpha},
		[]localcluster.DatacenterSpec{{Name: "dc1", Managers: 1, Gates: 1}, {Name: "dc2", Managers: 1, Gates: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f.StartReady(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestConsoleInBrowserTwoDatacenters: the console of dc1's gate in a
// federation of dc1 and dc2. A job submitted through the API for both
// datacenters (then cancelled in dc2) shows, from its named_datacenters, a
// tab for each datacenter's copy with that copy's state, and each tab opens
// its copy; the cluster view lists both datacenters, each with its outbox
// backlog.
func TestConsoleInBrowserTwoDatacenters(t *testing.T) {
	f := startFederation(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gate := f.DC("dc1").GateURLs()[0]
	tab := browser(t, ctx)
	p := &page{t: t, tab: tab, base: gate + "/ui/"}
	alpha := newClient(t, gate, tokenAlpha)
	res, err := alpha.Submit(ctx, api.JobRequest{Type: idleType, Payload: json.RawMessage(`{"n":1}`),
		Datacenters: []string{"dc1", "dc2"}})
	if err != nil {
		t.Fatal(err)
	}
	job := res.Job.JobID

	// Each datacenter's copy is its own: dc2's is cancelled (through a dc2
	// gate: an action acts on its gate's datacenter's copy), dc1's stays
	// queued.
	if _, err := newClient(t, f.DC("dc2").GateURLs()[0], tokenAlpha).Cancel(ctx, job, ""); err != nil {
		t.Fatal(err)
	}

	// The tenant: the job's page reads one datacenter's copy (the gate's own
	// first, as GET /v1/jobs/{job_id} does) and, from the job's
	// named_datacenters, every named datacenter's copy: one tab each, with
	// that copy's state. A tab opens its copy.
	p.signIn(tokenAlpha, "")
	p.open("#/job/" + job)
	datacenters := func(want string) string {
		return fmt.Sprintf(`(document.getElementById("job-datacenters") || {}).textContent === %q`, want)
	}
	tabs := `[...document.querySelectorAll("#job-copies a")].map(a => a.dataset.datacenter + ":" +
		(a.querySelector("[data-state]") || {dataset: {}}).dataset.state).join(",")`
	current := `(document.querySelector("#job-copies a.current") || {dataset: {}}).dataset.datacenter`
	p.until("dc1's copy", datacenters("dc1: committed"))
	p.wait("dc1's copy, queued", `#job-state [data-state="queued"]`)
	p.until("a tab per named datacenter with its copy's state", tabs+` === "dc1:queued,dc2:cancelled"`)
	if got := eval[string](p, "the current tab", current); got != "dc1" {
		t.Errorf("the current tab is %q, want dc1", got)
	}
	p.run("open dc2's tab", chromedp.Click(chromedp.CSS(`#job-copies a[data-datacenter="dc2"]`)))
	p.until("dc2's copy", datacenters("dc2: committed")+` && location.hash.endsWith("?datacenter=dc2")`)
	p.wait("dc2's copy, cancelled", `#job-state [data-state="cancelled"]`)
	p.until("the tabs again, dc2 current", tabs+` === "dc1:queued,dc2:cancelled" && `+current+` === "dc2"`)
	if got := p.text("#job-id"); got != job {
		t.Fatalf("dc2's tab shows job %q, want %q", got, job)
	}
	p.run("open dc1's tab", chromedp.Click(chromedp.CSS(`#job-copies a[data-datacenter="dc1"]`)))
	p.until("dc1's copy again", datacenters("dc1: committed")+` && `+current+` === "dc1"`)
	p.wait("dc1's copy, queued again", `#job-state [data-state="queued"]`)
	// Cancel and retry act on the copy of the gate's own datacenter: on
	// dc1's gate, dc1's copy is that one, and its Cancel is offered.
	p.run("Cancel on dc1's copy through dc1's gate", chromedp.WaitEnabled(chromedp.CSS("#btn-cancel")))
	// Through dc2's gate, dc1's copy (queued) is not: a Cancel there would
	// reach dc2's copy (cancelled already), so it is not offered, and the
	// page says which copy the actions reach.
	p2 := &page{t: t, tab: tab, base: f.DC("dc2").GateURLs()[0] + "/ui/"}
	p2.signIn(tokenAlpha, "")
	p2.open("#/job/" + job + "?datacenter=dc1")
	p2.until("dc1's copy through dc2's gate", datacenters("dc1: committed"))
	p2.wait("dc1's copy, queued, through dc2's gate", `#job-state [data-state="queued"]`)
	if eval[bool](p2, "Cancel on dc1's copy through dc2's gate", `!document.getElementById("btn-cancel").disabled`) {
		t.Error("dc2's gate offers Cancel on dc1's copy: it would act on dc2's copy")
	}
	if got := eval[string](p2, "the actions' note", `(document.getElementById("actions-note") || {}).textContent || ""`); !strings.Contains(got, "(dc2)") {
		t.Errorf("the actions' note on dc1's copy through dc2's gate: %q, want it to name dc2", got)
	}
	if got := res.Job.Datacenters; got["dc1"].Status != api.JobStatusCommitted || got["dc2"].Status != api.JobStatusCommitted {
		t.Fatalf("the submitted job's datacenters: %+v", got)
	}

	// The operator: the cluster view lists dc1 and dc2, each with its
	// outbox backlog (used / bound).
	p.run("sign out", chromedp.Click(chromedp.CSS("#signout")))
	p.signIn(tokenAlpha, tokenOperator)
	p.open("#/cluster")
	p.wait("the cluster view", "#datacenters tbody tr")
	outbox := func(dc string) string {
		return fmt.Sprintf(`(document.querySelector('#datacenters tr[data-datacenter=%q] td:last-child') || {}).textContent || ""`, dc)
	}
	p.until("dc1 and dc2 with their outbox", fmt.Sprintf(`/^\d+ \/ \d+$/.test(%s) && /^\d+ \/ \d+$/.test(%s)`, outbox("dc1"), outbox("dc2")))
	if got := p.text("#cluster h2"); got != "Datacenter dc1" {
		t.Errorf("the cluster view's heading %q, want Datacenter dc1", got)
	}
	names := eval[string](p, "the datacenters", `[...document.querySelectorAll("#datacenters tbody tr")].map(r => r.dataset.datacenter).join(",")`)
	if names != "dc1,dc2" {
		t.Errorf("the cluster view lists datacenters %q, want dc1,dc2", names)
	}
	for _, dc := range []string{"dc1", "dc2"} {
		leader := p.text(fmt.Sprintf(`#datacenters tr[data-datacenter=%q] td:nth-child(3)`, dc))
		if leader == "" || strings.HasPrefix(leader, "unreachable") {
			t.Errorf("the leader of %s: %q", dc, leader)
		}
	}
}

// TestConsoleActsOnlyOnGatesCopy: cancel and retry act on the copy of the
// gate's own datacenter (the API's actions take no datacenter), so the
// console offers them only on that copy. A job submitted through dc2's gate
// without a datacenters list is held in dc2 alone (its home); through dc1's
// gate its page shows dc2's copy, read without ?datacenter= as from the
// list of dc2's jobs, and offers neither action (a cancel through dc1's gate
// would be 404: dc1 holds no copy), saying why; through dc2's gate Cancel
// is offered and cancels it.
func TestConsoleActsOnlyOnGatesCopy(t *testing.T) {
	f := startFederation(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gate1, gate2 := f.DC("dc1").GateURLs()[0], f.DC("dc2").GateURLs()[0]
	res, err := newClient(t, gate2, tokenAlpha).Submit(ctx, api.JobRequest{Type: idleType, Payload: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	job := res.Job.JobID
	if got := res.Job.Datacenters; len(got) != 1 || got["dc2"].Status != api.JobStatusCommitted {
		t.Fatalf("the job's datacenters: %+v, want dc2 alone", got)
	}
	tab := browser(t, ctx)
	p := &page{t: t, tab: tab, base: gate1 + "/ui/"}
	p.signIn(tokenAlpha, "")
	datacenters := func(want string) string {
		return fmt.Sprintf(`(document.getElementById("job-datacenters") || {}).textContent === %q`, want)
	}
	note := `(document.getElementById("actions-note") || {}).textContent || ""`
	offered := func(where string) {
		t.Helper()
		p.until(where+": dc2's copy, queued", datacenters("dc2: committed")+
			` && document.querySelector('#job-state [data-state="queued"]') !== null`)
		if eval[bool](p, where+": Cancel", `!document.getElementById("btn-cancel").disabled`) {
			t.Errorf("%s: dc1's gate offers Cancel on dc2's copy: it acts on dc1's, which does not exist (404)", where)
		}
		if got := eval[string](p, where+": the actions' note", note); !strings.Contains(got, "held in dc2 only") || !strings.Contains(got, "(dc1)") {
			t.Errorf("%s: the actions' note %q, want it to say the job is held in dc2 only and name dc1", where, got)
		}
	}
	p.open("#/job/" + job)
	offered("the job's page")

	// From the list of dc2's jobs through dc1's gate: the link names dc2.
	p.open("#/jobs?datacenter=dc2")
	p.wait("dc2's job listed", jobRow(job, "queued"))
	p.run("open it", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#jobs tr[data-job-id=%q] a`, job))))
	p.until("its page, dc2's copy", `location.hash.endsWith("?datacenter=dc2")`)
	offered("the job's page from dc2's list")

	// Through dc2's gate, the copy is its own: Cancel is offered and acts.
	p2 := &page{t: t, tab: tab, base: gate2 + "/ui/"}
	p2.signIn(tokenAlpha, "")
	p2.open("#/job/" + job)
	p2.until("dc2's copy through dc2's gate", datacenters("dc2: committed"))
	p2.run("cancel through dc2's gate", chromedp.WaitEnabled(chromedp.CSS("#btn-cancel")), chromedp.Click(chromedp.CSS("#btn-cancel")))
	p2.wait("the job, cancelled", `#job-state [data-state="cancelled"]`)
	if got := p2.text("#message"); !strings.Contains(got, "Cancelled") {
		t.Errorf("the message after the cancel: %q", got)
	}
	if got := eval[string](p2, "the actions' note through dc2's gate", note); got != "" {
		t.Errorf("the actions' note on dc2's copy through dc2's gate: %q, want none", got)
	}
}
