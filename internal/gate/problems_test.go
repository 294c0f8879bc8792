package gate

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/manager/managertest"
	"github.com/once-dev/once/pkg/api"
)

// TestEveryRouteAnswersItsRefusalsAsProblems walks the refusals docs/api.md
// lists for each route (Errors, and each route's own section) that the
// gate decides itself: each is an RFC 9457 problem (type, title, status,
// detail, code; application/problem+json) with the status and code the
// contract names, and the headers it names (WWW-Authenticate on 401,
// Allow on 405).
func TestEveryRouteAnswersItsRefusalsAsProblems(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("tok-alpha alpha\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, addr := startManager(t, managertest.Options{})
	g := startGate(t, []string{addr}, func(cfg *Config, _ *Deps) {
		cfg.TokenFile = path
		cfg.MaxBodyBytes = 1024
	})
	auth := []string{"Authorization", "Bearer tok-alpha"}
	job := wantJob(t, g.submit(t, skey(1), invoiceBody, auth...), http.StatusCreated)
	big := `{"x":"` + strings.Repeat("x", 2000) + `"}`
	key := func(k string) []string { return append([]string{api.HeaderIdempotencyKey, k}, auth...) }
	jobPath := "/v1/jobs/" + job.JobID

	type call struct {
		method, path, body string
		hdr                []string
	}
	posts := []call{
		{http.MethodPost, "/v1/jobs", invoiceBody, key(skey(2))},
		{http.MethodPost, "/v1/leases", "{}", nil},
		{http.MethodPost, jobPath + "/heartbeat", `{"lease_id":"l"}`, nil},
		{http.MethodPost, jobPath + "/complete", `{"lease_id":"l"}`, nil},
		{http.MethodPost, jobPath + "/fail", `{"lease_id":"l"}`, nil},
		{http.MethodPost, "/v1/completions", `{"completions":[{"job_id":"j","lease_id":"l"}]}`, nil},
		{http.MethodPost, jobPath + "/cancel", "", key(skey(3))},
		{http.MethodPost, jobPath + "/retry", "", key(skey(4))},
	}
	gets := []call{
		{http.MethodGet, "/v1/jobs", "", nil},
		{http.MethodGet, jobPath, "", nil},
		{http.MethodGet, "/v1/idempotency-keys/" + skey(1), "", nil},
	}

	type refusal struct {
		name   string
		c      call
		status int
		code   api.Code
		header string // a header the answer must carry
	}
	var cases []refusal
	for _, c := range append(append([]call{}, posts...), gets...) {
		// No token, a wrong one, two: 401 with the challenge.
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer nope"}, {"Authorization", "Bearer tok-alpha", "Authorization", "Bearer tok-alpha"}} {
			nc := c
			nc.hdr = nil
			if len(c.hdr) > 2 && c.hdr[0] == api.HeaderIdempotencyKey {
				nc.hdr = c.hdr[:2:2]
			}
			nc.hdr = append(nc.hdr, hdr...)
			cases = append(cases, refusal{"unauthorized", nc, http.StatusUnauthorized, api.CodeUnauthorized, "WWW-Authenticate"})
		}
	}
	for _, c := range posts {
		withAuth := c
		withAuth.hdr = append(append([]string{}, c.hdr...), auth...)
		if len(c.hdr) > 0 {
			withAuth.hdr = c.hdr
		}
		tooLarge := withAuth
		tooLarge.body = big
		cases = append(cases, refusal{"body too large", tooLarge, http.StatusRequestEntityTooLarge, api.CodeBodyTooLarge, ""})
		notJSON := withAuth
		notJSON.body = "{"
		cases = append(cases, refusal{"not JSON", notJSON, http.StatusBadRequest, api.CodeInvalidRequest, ""})
		if len(c.hdr) > 0 { // a route that requires the key
			missing := withAuth
			missing.hdr = auth
			cases = append(cases, refusal{"key missing", missing, http.StatusBadRequest, api.CodeIdempotencyKeyMissing, ""})
			for _, bad := range [][]string{
				{api.HeaderIdempotencyKey, ""},
				{api.HeaderIdempotencyKey, "a b"},
				{api.HeaderIdempotencyKey, skey(9), api.HeaderIdempotencyKey, skey(9)},
				{api.HeaderIdempotencyKey, skey(9), api.HeaderXIdempotencyKey, skey(8)},
			} {
				invalid := withAuth
				invalid.hdr = append(append([]string{}, bad...), auth...)
				cases = append(cases, refusal{"key invalid", invalid, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid, ""})
			}
		} else { // the key is optional; an invalid one is still refused
			invalid := withAuth
			invalid.hdr = append([]string{api.HeaderIdempotencyKey, "a b"}, auth...)
			cases = append(cases, refusal{"key invalid", invalid, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid, ""})
		}
		other := withAuth
		other.method = http.MethodPut
		cases = append(cases, refusal{"method not allowed", other, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "Allow"})
	}
	cases = append(cases,
		refusal{"unknown job", call{http.MethodGet, "/v1/jobs/nope", "", auth}, http.StatusNotFound, api.CodeJobNotFound, ""},
		refusal{"unknown job (HEAD)", call{http.MethodHead, "/v1/jobs/nope", "", auth}, http.StatusNotFound, api.CodeJobNotFound, ""},
		refusal{"unknown key", call{http.MethodGet, "/v1/idempotency-keys/" + skey(77), "", auth}, http.StatusNotFound, api.CodeIdempotencyKeyNotFound, ""},
		refusal{"invalid key", call{http.MethodGet, "/v1/idempotency-keys/a%20b", "", auth}, http.StatusBadRequest, api.CodeIdempotencyKeyInvalid, ""},
		refusal{"list limit", call{http.MethodGet, "/v1/jobs?limit=0", "", auth}, http.StatusBadRequest, api.CodeInvalidRequest, ""},
		refusal{"list order", call{http.MethodGet, "/v1/jobs?order=up", "", auth}, http.StatusBadRequest, api.CodeInvalidRequest, ""},
		refusal{"list repeated", call{http.MethodGet, "/v1/jobs?type=a&type=b", "", auth}, http.StatusBadRequest, api.CodeInvalidRequest, ""},
		refusal{"unknown datacenter", call{http.MethodGet, jobPath + "?datacenter=nowhere", "", auth}, http.StatusBadRequest, api.CodeInvalidRequest, ""},
		refusal{"no such path", call{http.MethodGet, "/v1/nowhere", "", auth}, http.StatusNotFound, api.CodeNotFound, ""},
		refusal{"cancel unknown job", call{http.MethodPost, "/v1/jobs/nope/cancel", "", key(skey(5))}, http.StatusNotFound, api.CodeJobNotFound, ""},
		refusal{"complete unknown job", call{http.MethodPost, "/v1/jobs/nope/complete", `{"lease_id":"l"}`, auth}, http.StatusNotFound, api.CodeJobNotFound, ""},
		refusal{"lease_id missing", call{http.MethodPost, jobPath + "/complete", `{}`, auth}, http.StatusBadRequest, api.CodeInvalidRequest, ""},
		refusal{"lease lost", call{http.MethodPost, jobPath + "/heartbeat", `{"lease_id":"l"}`, auth}, http.StatusConflict, api.CodeLeaseLost, ""},
		refusal{"state conflict", call{http.MethodPost, jobPath + "/retry", "", key(skey(6))}, http.StatusConflict, api.CodeJobStateConflict, ""},
		refusal{"completions empty", call{http.MethodPost, "/v1/completions", `{"completions":[]}`, auth}, http.StatusBadRequest, api.CodeInvalidRequest, ""},
	)
	for _, c := range cases {
		res := g.do(t, c.c.method, c.c.path, strings.NewReader(c.c.body), c.c.hdr...)
		if c.c.method == http.MethodHead {
			wantStatus(t, res, c.status)
			if ct := res.header.Get("Content-Type"); ct != api.ContentTypeProblem {
				t.Fatalf("%s: HEAD %s: Content-Type %q", c.name, c.c.path, ct)
			}
			continue
		}
		t.Logf("%s: %s %s %q", c.name, c.c.method, c.c.path, c.c.hdr)
		p := wantProblem(t, res, c.status, c.code)
		if p.Title != titles[c.code] {
			t.Fatalf("%s: title %q, want %q", c.name, p.Title, titles[c.code])
		}
		if c.header != "" && res.header.Get(c.header) == "" {
			t.Fatalf("%s: no %s: %s", c.name, c.header, res)
		}
		if c.status == http.StatusUnauthorized {
			wantHeader(t, res, "WWW-Authenticate", `Bearer realm="once"`)
		}
		for _, h := range []string{api.HeaderReplayed, api.HeaderIdempotencyExpiresAt, api.HeaderRetryAfter} {
			wantNoHeader(t, res, h)
		}
	}
}

// TestEveryCodeHasItsDocumentedTitle holds the title of every problem code
// the gate can answer to docs/api.md's table of errors, word for word. The
// codes the gate can answer are those of api/openapi.yaml's Problem.code
// enum (every answer of this suite is validated against it), less
// unsupported_media_type, which docs/api.md says is never sent; each must
// have a row, and the problem the gate renders for it carries that row's
// title, never the HTTP status text.
func TestEveryCodeHasItsDocumentedTitle(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([0-9]{3})[^|]* \\| ([^|]+) \\|$")
	type documented struct {
		status int
		title  string
	}
	table := map[api.Code]documented{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		status, _ := strconv.Atoi(m[2])
		table[api.Code(m[1])] = documented{status, m[3]}
	}
	spec, err := os.ReadFile(openapiPath)
	if err != nil {
		t.Fatal(err)
	}
	enum := regexp.MustCompile(`(?s)code:\s+type: string\s+enum:\n((?:\s+- [a-z_]+\n)+)`).FindSubmatch(spec)
	if enum == nil {
		t.Fatalf("%s: no Problem.code enum", openapiPath)
	}
	codes := strings.Fields(strings.ReplaceAll(string(enum[1]), "- ", ""))
	if len(codes) < 20 {
		t.Fatalf("%s: the Problem.code enum parsed as %q", openapiPath, codes)
	}
	for _, c := range codes {
		code := api.Code(c)
		if code == api.CodeUnsupportedMediaType {
			if _, ok := table[code]; ok {
				t.Errorf("docs/api.md lists %s, which the gate never sends", code)
			}
			continue
		}
		d, ok := table[code]
		if !ok {
			t.Errorf("docs/api.md's table of errors has no row for %s", code)
			continue
		}
		if titles[code] != d.title {
			t.Errorf("%s: titles has %q, docs/api.md %q", code, titles[code], d.title)
		}
		if p := problem(d.status, code, "d"); p.Title != d.title {
			t.Errorf("%s: the problem's title is %q, docs/api.md's %q", code, p.Title, d.title)
		}
	}
	if len(table) != len(codes)-1 {
		t.Errorf("docs/api.md's table of errors has %d rows, the enum %d codes the gate sends", len(table), len(codes)-1)
	}
}
