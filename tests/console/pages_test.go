package console

import (
	"encoding/json"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/once-dev/once/pkg/api"
)

// TestConsolePages: Next follows the gate's cursor and Previous goes back
// to the page it came from; a page opened at its address (a bookmark, a
// link), which came from no page of the console, offers no Previous.
func TestConsolePages(t *testing.T) {
	_, ctx, gate := readyCluster(t)
	alpha := newClient(t, gate, tokenAlpha)
	for i := 0; i < 21; i++ { // two pages of 20
		if _, err := alpha.Submit(ctx, api.JobRequest{Type: idleType, Payload: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	p := &page{t: t, tab: browser(t, ctx), base: gate + "/ui/"}
	p.signIn(tokenAlpha, "")
	p.open("#/jobs?limit=20")
	p.until("the first page", `document.getElementById("page-info").textContent === "page 1 · 20 jobs"`)
	if !eval[bool](p, "Previous on the first page", `document.getElementById("page-prev").disabled`) {
		t.Error("the first page offers Previous")
	}
	p.run("next", chromedp.WaitEnabled(chromedp.CSS("#page-next")), chromedp.Click(chromedp.CSS("#page-next")))
	p.until("the second page", `document.getElementById("page-info").textContent === "page 2 · 1 jobs"`)
	second := eval[string](p, "the second page's address", `location.href`)
	p.run("previous", chromedp.WaitEnabled(chromedp.CSS("#page-prev")), chromedp.Click(chromedp.CSS("#page-prev")))
	p.until("the first page again", `document.getElementById("page-info").textContent === "page 1 · 20 jobs"`)

	// The second page, opened at its address after another page.
	p.run("open the second page's address", chromedp.Navigate("about:blank"), chromedp.Navigate(second))
	p.until("the second page, opened", `(document.getElementById("page-info") || {}).textContent === "page 2 · 1 jobs"`)
	if !eval[bool](p, "Previous on the opened page", `document.getElementById("page-prev").disabled`) {
		t.Error("a page opened at its address offers Previous, which would leave the console")
	}
}
