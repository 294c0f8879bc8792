package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func serve(t *testing.T, method, path string, hdr ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	Handler(nil).ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every answer, found or not, carries the security headers.
func checkHeaders(t *testing.T, path string, h http.Header) {
	t.Helper()
	for name, want := range map[string]string{
		"Content-Security-Policy": ContentSecurityPolicy,
		"X-Frame-Options":         "DENY",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s: %s = %q, want %q", path, name, got, want)
		}
	}
}

func TestPolicyIsStrict(t *testing.T) {
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
		if !strings.Contains(ContentSecurityPolicy, want) {
			t.Errorf("the policy lacks %q: %s", want, ContentSecurityPolicy)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*", "http:", "https:"} {
		if strings.Contains(ContentSecurityPolicy, bad) {
			t.Errorf("the policy allows %q: %s", bad, ContentSecurityPolicy)
		}
	}
}

func TestAssetsServed(t *testing.T) {
	for path, want := range map[string]struct{ ctype, contains string }{
		"/ui/":           {"text/html; charset=utf-8", `<script src="app.js" defer></script>`},
		"/ui/index.html": {"text/html; charset=utf-8", "<title>once console</title>"},
		"/ui/app.js":     {"text/javascript; charset=utf-8", "sessionStorage"},
		"/ui/app.css":    {"text/css; charset=utf-8", "table"},
	} {
		r := serve(t, http.MethodGet, path)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, r.StatusCode)
		}
		checkHeaders(t, path, r.Header)
		if got := r.Header.Get("Content-Type"); got != want.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", path, got, want.ctype)
		}
		if b := body(t, r); !strings.Contains(b, want.contains) {
			t.Errorf("GET %s: the body lacks %q", path, want.contains)
		}
		if r.Header.Get("ETag") == "" {
			t.Errorf("GET %s: no ETag", path)
		}
		// A revalidation with the ETag is 304.
		if r2 := serve(t, http.MethodGet, path, "If-None-Match", r.Header.Get("ETag")); r2.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", path, r2.StatusCode)
		}
	}
	if r := serve(t, http.MethodHead, "/ui/app.js"); r.StatusCode != http.StatusOK || body(t, r) != "" {
		t.Errorf("HEAD /ui/app.js: %d", r.StatusCode)
	}
}

// The page runs no inline script or style: everything comes from the
// gate's own files, which the policy allows.
func TestNoInlineScriptOrStyle(t *testing.T) {
	html := body(t, serve(t, http.MethodGet, "/ui/"))
	for _, bad := range []string{"<script>", "style=", "onclick=", "onload=", "javascript:", "http://", "https://"} {
		if strings.Contains(html, bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
	js := body(t, serve(t, http.MethodGet, "/ui/app.js"))
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "createContextualFragment", "DOMParser", "srcdoc",
		"eval(", "new Function", "localStorage", "document.write", "javascript:"} {
		if strings.Contains(js, bad) {
			t.Errorf("app.js contains %q", bad)
		}
	}
}

func TestUnknownPathIsNotFound(t *testing.T) {
	for _, path := range []string{"/ui/nope", "/ui/assets/app.js", "/ui/../console.go", "/elsewhere",
		"/ui/%2e%2e/console.go", "/ui/..%2fconsole.go", "/ui/assets/../app.js", "/ui/./app.js", "/ui/app.js/", "/ui/APP.JS", "/ui/index.html%00"} {
		r := serve(t, http.MethodGet, path)
		if r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, r.StatusCode)
		}
		checkHeaders(t, path, r.Header)
	}
	called := 0
	h := Handler(func(w http.ResponseWriter, r *http.Request, status int) {
		called = status
		w.WriteHeader(http.StatusTeapot)
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/missing.js", nil))
	if called != http.StatusNotFound || rec.Code != http.StatusTeapot {
		t.Errorf("the fail handler was not used for 404: called with %d, status %d", called, rec.Code)
	}
}

// The errors of the asset server itself, a failed If-Match (412) and a
// Range past the end of an asset (416), are answered by the fail handler
// (the gate's problems), not by http.ServeContent's empty or plain-text
// body, with the security headers and a 416's Content-Range; the asset's
// own headers, which do not describe that body, are not sent.
func TestServeContentErrorsGoToFail(t *testing.T) {
	const problem = `{"code":"test"}`
	h := Handler(func(w http.ResponseWriter, r *http.Request, status int) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, problem)
	})
	size := len(body(t, serve(t, http.MethodGet, "/ui/app.js")))
	for _, tc := range []struct {
		hdr    []string
		status int
	}{
		{[]string{"If-Match", `"not-the-etag"`}, http.StatusPreconditionFailed},
		{[]string{"Range", "bytes=99999999-"}, http.StatusRequestedRangeNotSatisfiable},
	} {
		req := httptest.NewRequest(http.MethodGet, "/ui/app.js", nil)
		req.Header.Set(tc.hdr[0], tc.hdr[1])
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		r := rec.Result()
		where := tc.hdr[0] + ": " + tc.hdr[1]
		if r.StatusCode != tc.status || r.Header.Get("Content-Type") != "application/problem+json" || body(t, r) != problem {
			t.Errorf("%s: %d %q %q, want %d and the fail handler's answer", where, r.StatusCode, r.Header.Get("Content-Type"), rec.Body.String(), tc.status)
		}
		checkHeaders(t, where, r.Header)
		if r.Header.Get("ETag") != "" || r.Header.Get("Cache-Control") != "" {
			t.Errorf("%s: the asset's headers on an error: %v", where, r.Header)
		}
		if want := "bytes */" + strconv.Itoa(size); tc.status == http.StatusRequestedRangeNotSatisfiable && r.Header.Get("Content-Range") != want {
			t.Errorf("%s: Content-Range %q, want %q", where, r.Header.Get("Content-Range"), want)
		}
	}
	// A satisfiable Range is served as before.
	if r := serve(t, http.MethodGet, "/ui/app.js", "Range", "bytes=0-9"); r.StatusCode != http.StatusPartialContent || len(body(t, r)) != 10 {
		t.Errorf("Range: bytes=0-9: %d", r.StatusCode)
	}
}

func TestPathsListTheAssets(t *testing.T) {
	got := map[string]bool{}
	for _, p := range Paths() {
		got[p] = true
	}
	for _, want := range []string{"", "index.html", "app.js", "app.css"} {
		if !got[want] {
			t.Errorf("Paths lacks %q: %v", want, Paths())
		}
	}
}
