package gate

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// titles are the RFC 9457 titles of the problem codes: short, fixed per code,
// as docs/api.md's table of errors lists them.
var titles = map[api.Code]string{
	api.CodeIdempotencyKeyMissing:  "Idempotency-Key header missing",
	api.CodeIdempotencyKeyInvalid:  "Idempotency-Key header invalid",
	api.CodeInvalidRequest:         "Invalid request",
	api.CodeBodyTooLarge:           "Request body too large",
	api.CodeUnsupportedMediaType:   "Unsupported media type",
	api.CodeJobRejected:            "Job rejected",
	api.CodeRequestInProgress:      "Request in progress",
	api.CodeIdempotencyKeyReused:   "Idempotency key reused",
	api.CodeIdempotencyKeyExpired:  "Idempotency key expired",
	api.CodeIdempotencyKeyClaimed:  "Idempotency key claimed by another datacenter",
	api.CodeUnavailable:            "Service unavailable",
	api.CodeJobNotFound:            "Job not found",
	api.CodeIdempotencyKeyNotFound: "Idempotency key not found",
	api.CodeUnauthorized:           "Unauthorized",
	api.CodeNotFound:               "Not found",
	api.CodeMethodNotAllowed:       "Method not allowed",
	api.CodeInternal:               "Internal error",
	api.CodeTenantQuotaExceeded:    "Tenant quota exceeded",
	api.CodeResponseTooLarge:       "Response too large",
	api.CodeLeaseLost:              "Lease lost",
	api.CodeJobStateConflict:       "Job state conflict",
	api.CodeOutboxFull:             "Outbox full",
	api.CodeBudgetExceeded:         "Budget exceeded",
}

// problem is an RFC 9457 problem: type is api.ProblemTypeBase plus the code,
// title is fixed per code.
func problem(status int, code api.Code, detail string) api.Problem {
	title := titles[code]
	if title == "" {
		title = http.StatusText(status)
	}
	return api.Problem{Type: api.ProblemTypeBase + string(code), Title: title, Status: status, Detail: detail, Code: code}
}

// problemBody renders problem(status, code, detail) as a body.
func problemBody(status int, code api.Code, detail string) []byte {
	return problemJSON(problem(status, code, detail))
}

// problemJSON renders a problem (an api.Problem, or a struct that embeds one
// with more members) as encoding/json writes it. The bytes end with a
// newline, as every JSON body of the gate does.
func problemJSON(p any) []byte {
	b, err := json.Marshal(p)
	if err != nil {
		// Strings, ints and maps of strings always encode.
		panic("gate: encode problem: " + err.Error())
	}
	return append(b, '\n')
}

// writeProblem answers a problem. Headers already set on w (Allow, Retry-After,
// WWW-Authenticate) are kept.
func writeProblem(w http.ResponseWriter, status int, code api.Code, detail string) {
	noteCode(w, code)
	writeBody(w, status, api.ContentTypeProblem, problemBody(status, code, detail))
}

// encodingFailedDetail is the detail of a 500 for an answer that did not
// encode.
const encodingFailedDetail = "encoding the answer failed"

// writeJSON answers 200 with v encoded by encoding/json.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, api.CodeInternal, encodingFailedDetail)
		return
	}
	writeBody(w, http.StatusOK, api.ContentTypeJSON, append(b, '\n'))
}

func writeBody(w http.ResponseWriter, status int, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// retryAfter renders a Retry-After value in whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10)
}

// responseWriter wraps the connection's ResponseWriter for one request: it
// records the status, the problem code and the size for the access log and the
// metrics, and it replaces the ServeMux's own plain-text answers (404, 405,
// redirects) with problems. Handlers registered through Gate.route mark the
// writer as owned; anything written while it is not owned came from the
// ServeMux itself.
type responseWriter struct {
	http.ResponseWriter
	owned       bool // a gate handler is answering
	intercepted bool // the ServeMux's answer was replaced; swallow its body
	wroteHeader bool
	status      int
	code        api.Code
	bytes       int64
	tenant, key string // for the access log, once known
}

func (rw *responseWriter) WriteHeader(status int) {
	if rw.wroteHeader || rw.intercepted {
		return
	}
	if !rw.owned {
		rw.intercept(status)
		return
	}
	rw.wroteHeader = true
	rw.status = status
	rw.ResponseWriter.WriteHeader(status)
}

func (rw *responseWriter) Write(b []byte) (int, error) {
	if !rw.wroteHeader && !rw.intercepted {
		rw.WriteHeader(http.StatusOK) // may intercept
	}
	if rw.intercepted {
		return len(b), nil
	}
	n, err := rw.ResponseWriter.Write(b)
	rw.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// intercept answers in place of the ServeMux, which is about to write a plain
// text 404 or 405, or an HTML redirect.
func (rw *responseWriter) intercept(status int) {
	rw.owned = true
	h := rw.Header()
	h.Del("Content-Type")
	switch {
	case status == http.StatusMethodNotAllowed:
		// The ServeMux has set Allow to the methods the path accepts.
		writeProblem(rw, status, api.CodeMethodNotAllowed, "the method is not allowed on this path; Allow lists the methods that are")
	case status >= 300 && status < 400:
		// A path that needs cleaning ("//", "/./", "/../") is redirected to
		// its clean form: keep the status and Location, send no body. It is
		// an answer like any other: nosniff (docs/api.md, Conventions).
		h.Set("Content-Length", "0")
		h.Set("X-Content-Type-Options", "nosniff")
		rw.WriteHeader(status)
	default:
		writeProblem(rw, http.StatusNotFound, api.CodeNotFound, "no such path in API v1")
	}
	rw.intercepted = true
}

// noteCode records a problem's code on the request's writer, for the access
// log and the metrics.
func noteCode(w http.ResponseWriter, code api.Code) {
	if rw, ok := w.(*responseWriter); ok {
		rw.code = code
	}
}

// noteTenant records the caller on the request's writer, for the access log.
func noteTenant(w http.ResponseWriter, tenant string) {
	if rw, ok := w.(*responseWriter); ok {
		rw.tenant = tenant
	}
}

// noteKey records the Idempotency-Key on the request's writer, for the
// access log.
func noteKey(w http.ResponseWriter, key string) {
	if rw, ok := w.(*responseWriter); ok {
		rw.key = key
	}
}

// unauthorized answers 401 with the bearer challenge.
func unauthorized(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="once"`)
	writeProblem(w, http.StatusUnauthorized, api.CodeUnauthorized, detail)
}
