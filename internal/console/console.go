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
// Prefix; notFound answers any other path under it (nil: http.NotFound),
// with the security headers already set.
func Handler(notFound http.HandlerFunc) http.Handler {
	if notFound == nil {
		notFound = http.NotFound
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SetHeaders(w.Header())
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		a, found := files[name]
		if !ok || !found {
			notFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("Content-Type", a.contentType)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}

// Paths lists the served paths under Prefix ("" is index.html), for tests.
func Paths() []string {
	out := make([]string, 0, len(files))
	for p := range files {
		out = append(out, p)
	}
	return out
}
