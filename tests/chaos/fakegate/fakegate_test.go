package fakegate

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/once-dev/once/pkg/api"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSubmitContract pins what the chaos tests rely on: deduplication by
// (tenant, key) with byte-identical replays, tenant scoping, key reuse with
// another body, and list pagination.
func TestSubmitContract(t *testing.T) {
	g := New(Options{Tokens: map[string]string{"ta": "a", "tb": "b"}, MaxPage: 1})
	srv := httptest.NewServer(g)
	defer srv.Close()
	defer g.Close()

	post := func(token, key, body string) (int, string, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/jobs", strings.NewReader(body))
		req.Header.Set(api.HeaderIdempotencyKey, key)
		req.Header.Set(api.HeaderAuthorization, "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(api.HeaderReplayed), b
	}
	const k = "c:1:0123456789abcdef"
	s1, r1, b1 := post("ta", k, `{"type":"t","payload":{"x":1,"y":2}}`)
	s2, r2, b2 := post("ta", k, `{ "payload":{"y":2,"x":1}, "type":"t" }`)
	if s1 != 201 || s2 != 201 || r1 != "false" || r2 != "true" || string(b1) != string(b2) {
		t.Fatalf("replay: %d %s %s / %d %s %s", s1, r1, b1, s2, r2, b2)
	}
	if s, _, b := post("ta", k, `{"type":"other"}`); s != 422 || !strings.Contains(string(b), string(api.CodeIdempotencyKeyReused)) {
		t.Fatalf("reuse: %d %s", s, b)
	}
	if s, r, _ := post("tb", k, `{"type":"t"}`); s != 201 || r != "false" {
		t.Fatalf("other tenant: %d %s", s, r)
	}
	if s, _, _ := post("nope", k, `{"type":"t"}`); s != 401 {
		t.Fatalf("bad token: %d", s)
	}
	if s, _, b := post("ta", "c:1:0123456789ABCDEF", `{"type":"t"}`); s != 400 || !strings.Contains(string(b), string(api.CodeIdempotencyKeyInvalid)) {
		t.Fatalf("bad key: %d %s", s, b)
	}
	post("ta", "c:2:0123456789abcdef", `{"type":"t"}`)
	post("ta", "c:3:0123456789abcdef", `{"type":"t"}`)

	var ids []string
	next := ""
	for page := 0; page < 10; page++ {
		u := srv.URL + "/v1/jobs?limit=1000"
		if next != "" {
			u += "&after=" + url.QueryEscape(next)
		}
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set(api.HeaderAuthorization, "Bearer ta")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var l api.JobList
		err = json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range l.Jobs {
			ids = append(ids, j.JobID)
		}
		if l.Next == nil {
			break
		}
		next = *l.Next
	}
	if strings.Join(ids, ",") != "job-000001,job-000003,job-000004" {
		t.Fatalf("tenant a lists %v", ids)
	}
}
