package console

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
)

// hostile is markup a tenant may put in whatever it controls: each runs
// script if the console parsed it as HTML or followed it as a link.
const hostile = `<img src=x onerror="window.pwned=1"></script><script>window.pwned=2</script><a href="javascript:window.pwned=3">x</a>`

// hostileKey is such markup within an idempotency key's characters
// (visible ASCII, no space).
const hostileKey = `<svg/onload=window.pwned=4></script><script>window.pwned=5</script>`

// TestConsoleRendersDataAsText: a job whose idempotency key, payload,
// result and error hold markup, and one of a huge payload, are shown as
// text: no script runs, no element comes from them, and the page keeps its
// width.
func TestConsoleRendersDataAsText(t *testing.T) {
	_, ctx, gate := readyCluster(t)
	alpha := newClient(t, gate, tokenAlpha)
	payload, err := json.Marshal(map[string]string{"html": hostile, "huge": strings.Repeat("x", 200_000)})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(key, typ string) string {
		t.Helper()
		res, err := alpha.SubmitWithKey(ctx, key, api.JobRequest{Type: typ, Payload: payload})
		if err != nil {
			t.Fatalf("submit with the key %q: %v", key, err)
		}
		return res.Job.JobID
	}
	ok := submit(hostileKey, workType)
	dead := submit(hostileKey+"2", failType)

	var wg sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := alpha.Run(wctx, client.WorkerOptions{Types: []string{workType, failType}, LeaseFor: 10 * time.Second, Wait: time.Second},
			func(_ context.Context, job api.Job, _ int) (any, error) {
				if job.Type == failType {
					return nil, errors.New(hostile)
				}
				return map[string]string{"html": hostile}, nil
			})
		if err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	defer func() { stop(); wg.Wait() }()

	p := &page{t: t, tab: browser(t, ctx), base: gate + "/ui/"}
	p.signIn(tokenAlpha, "")
	p.wait("the succeeded job", jobRow(ok, "succeeded"))
	p.wait("the dead job", jobRow(dead, "dead"))
	check := func(where string) {
		t.Helper()
		if got := eval[string](p, "pwned", `String(window.pwned)`); got != "undefined" {
			t.Fatalf("%s: a tenant's markup ran script (window.pwned = %s)", where, got)
		}
		if n := eval[int](p, "elements from data", `document.querySelectorAll("#view img, #view svg, #view script, #view a[href^='javascript']").length`); n != 0 {
			t.Errorf("%s: %d elements made from a tenant's markup", where, n)
		}
		if eval[bool](p, "the page's width", `document.documentElement.scrollWidth > window.innerWidth`) {
			t.Errorf("%s: the page is wider than the window", where)
		}
	}
	if got := p.text(`#jobs tr[data-job-id="` + ok + `"] td:last-child`); got != hostileKey {
		t.Errorf("the key in the list: %q, want %q", got, hostileKey)
	}
	check("the jobs view")

	p.open("#/job/" + ok)
	p.wait("the succeeded job's page", `#job-state [data-state="succeeded"]`)
	for sel, want := range map[string]string{"#job-key": hostileKey, "#job-payload": `<img src=x onerror=\"window.pwned=1\">`, "#job-result": `<img src=x onerror=\"window.pwned=1\">`} {
		if got := p.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s: %.200q lacks %q", sel, got, want)
		}
	}
	check("the succeeded job's page")

	p.open("#/job/" + dead)
	p.wait("the dead job's page", `#job-state [data-state="dead"]`)
	if got := p.text("#job-error"); got != hostile {
		t.Errorf("the error: %q, want %q", got, hostile)
	}
	check("the dead job's page")

	// An address whose fragment is not valid percent-encoding (a link
	// mangled by hand) still draws its view: the job is not found.
	p.open("#/job/%E0%A4%A")
	p.until("the mangled job's page", `document.getElementById("message").textContent.includes("job_not_found")`)
	if got := p.text("#job-id"); got != "%E0%A4%A" {
		t.Errorf("the mangled job's page shows the job %q, want %q", got, "%E0%A4%A")
	}
}
