package console

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/once-dev/once/pkg/api"
)

// unavailableReads wraps the page's fetch: the next window.unavailable
// reads of the jobs list are answered 503 unavailable with Retry-After: 3
// (as a gate without a leader answers, made here so the wait is known)
// without reaching the gate; window.lists records when each list read was
// asked (performance.now(), in ms) and its status.
const unavailableReads = `(() => {
	const orig = window.fetch.bind(window);
	window.lists = []; window.unavailable = 2;
	window.fetch = (url, init) => {
		if (init.method !== "GET" || !String(url).startsWith("/v1/jobs?")) return orig(url, init);
		const rec = {t: performance.now(), status: 0};
		window.lists.push(rec);
		if (window.unavailable > 0) {
			window.unavailable--;
			rec.status = 503;
			return Promise.resolve(new Response(JSON.stringify({type: "https://once.dev/problems/unavailable", title: "Service Unavailable",
				status: 503, detail: "test: no manager leader answered", code: "unavailable"}),
				{status: 503, headers: {"Content-Type": "application/problem+json", "Retry-After": "3"}}));
		}
		return orig(url, init).then(r => { rec.status = r.status; return r; });
	};
	return 1;
})()`

// TestConsolePollWaitsRetryAfter: a poll answered 503 with a Retry-After
// is not asked again before that wait, even with the refresh at 0.5 s, and
// meanwhile the view keeps what it last read, marked stale, and says so;
// the next read that succeeds draws it fresh again.
func TestConsolePollWaitsRetryAfter(t *testing.T) {
	_, ctx, gate := readyCluster(t)
	p := &page{t: t, tab: browser(t, ctx), base: gate + "/ui/"}
	res, err := newClient(t, gate, tokenAlpha).Submit(ctx, api.JobRequest{Type: idleType, Payload: json.RawMessage(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	job := res.Job.JobID

	p.signIn(tokenAlpha, "") // refresh every 500 ms
	p.wait("the job listed", jobRow(job, "queued"))
	eval[int](p, "answer the next two list reads 503", unavailableReads)

	p.until("the view marked stale", `document.getElementById("view").hasAttribute("data-stale")`)
	if got := p.text("#message"); !strings.Contains(got, "(unavailable); retry after 3 s") || !strings.Contains(got, "showing the view as read at") {
		t.Errorf("the message while stale: %q, want the problem, its Retry-After and that the view is the one read before", got)
	}
	if got := p.text("#updated"); !strings.HasPrefix(got, "stale: last updated ") || !strings.Contains(got, "read again in 3 s") {
		t.Errorf("the footer while stale: %q", got)
	}
	if !eval[bool](p, "the job still shown", `document.querySelector('#jobs tr[data-job-id="`+job+`"]') !== null`) {
		t.Error("the stale view lost the jobs it showed")
	}

	p.until("a read answered after the two 503s", `window.lists.length >= 3 && window.lists[2].status === 200`)
	p.until("the view fresh again", `!document.getElementById("view").hasAttribute("data-stale") &&
		document.getElementById("message").textContent === "" && document.getElementById("updated").textContent.startsWith("updated ")`)
	var gaps []float64
	if err := json.Unmarshal([]byte(eval[string](p, "the waits between reads",
		`JSON.stringify(window.lists.slice(0, 3).map((r, i, a) => i ? r.t - a[i-1].t : 0).slice(1))`)), &gaps); err != nil {
		t.Fatal(err)
	}
	for i, g := range gaps {
		if g < 2900 {
			t.Errorf("read %d was asked %.0f ms after a 503 with Retry-After: 3; want at least 3 s", i+2, g)
		}
	}
}
