// Package console is once's web console: plain HTML, CSS and a small
// vanilla JavaScript program, embedded in the gate's binary and served at
// /ui/. The program calls the gate's public JSON API (docs/api.md) with the
// bearer token the user signs in with, kept in the tab's sessionStorage and
// sent as Authorization: Bearer, never in a URL. docs/console.md describes
// what it shows and who sees what.
//
// Handler serves the assets with a strict Content-Security-Policy (no
// inline script or style, every fetch to the gate itself), X-Frame-Options
// DENY and nosniff; it never reads a request's headers, so a token sent to
// it goes nowhere.
package console

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// ContentSecurityPolicy is the policy of every console answer: scripts,
// styles, images and fetches from the gate only; no inline script or
// style, no eval, no frames, no plugins, forms and <base> pinned.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed assets
var assets embed.FS

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// files maps a path under Prefix ("" for index.html) to its asset.
var files = func() map[string]asset {
	out := map[string]asset{}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		a := asset{body: b, contentType: contentType(p), etag: etag(b)}
		out[p] = a
		if p == "index.html" {
			out[""] = a
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return out
}()

func contentType(p string) string {
	switch path.Ext(p) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return "application/octet-stream"
}

// etag is a strong validator of b: its FNV-1a hash.
func etag(b []byte) string {
	var h uint64 = 14695981039346656037
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return `"` + strconv.FormatUint(h, 36) + `"`
}

// SetHeaders sets the console's security headers on h: the
// Content-Security-Policy, X-Frame-Options DENY, nosniff, no referrer.
func SetHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// Handler serves the console's assets for GET and HEAD requests under
// Prefix. fail answers each of its errors, with the security headers
// already set: 404 to a path under it that it does not serve, and the
// errors of http.ServeContent, which would answer them in its own way: 412
// to a failed If-Match (an empty body) and 416 to a Range past the end of
// an asset (plain text, Content-Range set). nil: http.Error with the
// status's text.
func Handler(fail func(w http.ResponseWriter, r *http.Request, status int)) http.Handler {
	if fail == nil {
		fail = func(w http.ResponseWriter, _ *http.Request, status int) {
			http.Error(w, http.StatusText(status), status)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SetHeaders(w.Header())
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		a, found := files[name]
		if !ok || !found {
			fail(w, r, http.StatusNotFound)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("Content-Type", a.contentType)
		http.ServeContent(&errorWriter{ResponseWriter: w, r: r, fail: fail}, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}

// errorWriter passes http.ServeContent's answers through, but for its
// errors: those it hands to fail, and drops ServeContent's own body.
type errorWriter struct {
	http.ResponseWriter
	r      *http.Request
	fail   func(w http.ResponseWriter, r *http.Request, status int)
	failed bool
}

func (e *errorWriter) WriteHeader(status int) {
	switch {
	case e.failed:
	case status < http.StatusBadRequest:
		e.ResponseWriter.WriteHeader(status)
	default:
		e.failed = true
		// The asset's headers do not describe the error's body; the
		// security headers and a 416's Content-Range stay.
		h := e.Header()
		for _, name := range []string{"Content-Type", "Content-Length", "Content-Encoding", "ETag", "Cache-Control"} {
			h.Del(name)
		}
		e.fail(e.ResponseWriter, e.r, status)
	}
}

func (e *errorWriter) Write(b []byte) (int, error) {
	if e.failed {
		return len(b), nil
	}
	return e.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (e *errorWriter) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// Paths lists the served paths under Prefix ("" is index.html), for tests.
func Paths() []string {
	out := make([]string, 0, len(files))
	for p := range files {
		out = append(out, p)
	}
	return out
}
