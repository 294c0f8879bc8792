package gate

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
)

// openapiPath is the gate's OpenAPI description, relative to this package.
const openapiPath = "../../api/openapi.yaml"

// The gate's test suite checks every answer it gets through testGate's client
// against api/openapi.yaml (github.com/pb33f/libopenapi-validator), so the
// document cannot drift from what the gate sends: a test whose answer does not
// match fails, naming the mismatch.
var openapi struct {
	once  sync.Once
	v     validator.Validator
	paths [][]string // the document's path templates, split at '/'
	err   error
	mu    sync.Mutex // the validator is not documented as safe for concurrent use
}

// pathLine is a path template's line in the document ("  /v1/jobs/{job_id}:").
var pathLine = regexp.MustCompile(`(?m)^  (/[^\s:]*):\s*$`)

func openapiValidator() (validator.Validator, error) {
	openapi.once.Do(func() {
		spec, err := os.ReadFile(openapiPath)
		if err != nil {
			openapi.err = err
			return
		}
		doc, err := libopenapi.NewDocument(spec)
		if err != nil {
			openapi.err = fmt.Errorf("%s: %w", openapiPath, err)
			return
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			openapi.err = fmt.Errorf("%s: %v", openapiPath, errs)
			return
		}
		if ok, verrs := v.ValidateDocument(); !ok {
			openapi.err = fmt.Errorf("%s is not a valid OpenAPI document: %v", openapiPath, verrs)
			return
		}
		openapi.v = v
		for _, m := range pathLine.FindAllSubmatch(spec, -1) {
			openapi.paths = append(openapi.paths, strings.Split(string(m[1]), "/"))
		}
		if len(openapi.paths) == 0 {
			openapi.err = fmt.Errorf("%s: no paths found", openapiPath)
		}
	})
	return openapi.v, openapi.err
}

// documented reports whether path is one of the document's paths exactly:
// the same segments, each {parameter} a non-empty one. The validator itself
// is lenient (it takes "/v1/jobs/" for "/v1/jobs"); answers on other paths
// ("/v1//jobs", a trailing slash) are the router's, not the API's.
func documented(path string) bool {
	segs := strings.Split(path, "/")
next:
	for _, tmpl := range openapi.paths {
		if len(tmpl) != len(segs) {
			continue
		}
		for i, t := range tmpl {
			if strings.HasPrefix(t, "{") {
				if segs[i] == "" {
					continue next
				}
			} else if t != segs[i] {
				continue next
			}
		}
		return true
	}
	return false
}

// checkAnswer validates one answer of the gate against the document. Answers
// on paths or methods the document does not describe (a path outside the
// API, a 405 for a method the path does not have) are skipped.
func checkAnswer(req *http.Request, status int, header http.Header, body []byte) error {
	v, err := openapiValidator()
	if err != nil {
		return err
	}
	if !documented(req.URL.EscapedPath()) {
		return nil
	}
	resp := &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(bytes.NewReader(body)), Request: req}
	openapi.mu.Lock()
	_, verrs := v.ValidateHttpResponse(req, resp)
	openapi.mu.Unlock()
	var msgs []string
	for _, e := range verrs {
		if e.IsPathMissingError() || e.IsOperationMissingError() {
			continue
		}
		msgs = append(msgs, describe(e))
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%s %s → %d does not match %s:\n  %s\n  body: %.300s",
			req.Method, req.URL.Path, status, openapiPath, strings.Join(msgs, "\n  "), body)
	}
	return nil
}

func describe(e *verrors.ValidationError) string {
	s := e.Message
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	for _, se := range e.SchemaValidationErrors {
		s += fmt.Sprintf(" [%s: %s]", se.FieldPath, se.Reason)
	}
	return s
}

// validatingTransport checks every answer that passes through it.
type validatingTransport struct {
	tb   testing.TB
	next http.RoundTripper
}

func (t validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return resp, err
	}
	if err := checkAnswer(req, resp.StatusCode, resp.Header, body); err != nil {
		t.tb.Errorf("OpenAPI: %v", err)
	}
	return resp, nil
}

func TestOpenAPIDocumentLoads(t *testing.T) {
	if _, err := openapiValidator(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		"/v1/jobs": true, "/v1/jobs/abc": true, "/v1/idempotency-keys/k": true, "/healthz": true,
		"/v1/jobs/": false, "/v1//jobs": false, "/v1/jobs/abc/x": false, "/v2/jobs": false,
	} {
		if documented(path) != want {
			t.Errorf("documented(%q) = %v", path, !want)
		}
	}
}

// The check can fail: answers that break the document are refused.
func TestOpenAPICheckRefusesWrongAnswers(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "http://gate/v1/jobs", strings.NewReader(`{"type":"t"}`))
	req.Header.Set("Idempotency-Key", "host1.dc1:1:1:0123456789abcdef")
	req.Header.Set("Content-Type", "application/json")
	hdr := func(ct string) http.Header { return http.Header{"Content-Type": {ct}} }
	for name, c := range map[string]struct {
		status int
		header http.Header
		body   string
	}{
		"201 without a job":          {201, hdr("application/json"), `{"hello":"world"}` + "\n"},
		"a problem that is not one":  {400, hdr("application/problem+json"), `{"status":"four hundred"}` + "\n"},
		"a status the API never has": {418, hdr("application/json"), `{}` + "\n"},
	} {
		if err := checkAnswer(req, c.status, c.header, []byte(c.body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
