package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/once-dev/once/internal/jsonescape"
)

// Limits of a POST /v1/jobs body.
const (
	// MaxTypeLen bounds a job's type.
	MaxTypeLen = 128
	// MaxDatacenterLen bounds a datacenter name.
	MaxDatacenterLen = 64
	// MaxDatacenters bounds the datacenters a job may name.
	MaxDatacenters = 16
	// MaxJSONDepth bounds the nesting of arrays and objects in a request body;
	// the body's own object is depth 1. internal/fingerprint applies the same
	// bound, so a body DecodeJobRequest accepts always has a fingerprint.
	MaxJSONDepth = 1000
)

// ErrInvalidRequest is matched (errors.Is) by every error DecodeJobRequest
// returns. The gate answers it with 400 invalid_request and the error's text as
// the problem's detail.
var ErrInvalidRequest = errors.New("invalid request")

// RequestError says which field of a request body is wrong and why. It unwraps
// to ErrInvalidRequest.
type RequestError struct {
	// Field is the JSON member at fault ("type", "payload", "datacenters", or
	// the name of an unknown member), or "" when the body as a whole is wrong
	// (not JSON, not an object, trailing data).
	Field string
	// Reason completes a sentence whose subject is the field (or the body).
	Reason string
}

// Error renders a detail that names the field, e.g.
// `invalid request: field "type" is required`.
func (e *RequestError) Error() string {
	if e.Field == "" {
		return "invalid request: body " + e.Reason
	}
	return "invalid request: field " + quoteField(e.Field) + " " + e.Reason
}

// Unwrap returns ErrInvalidRequest.
func (e *RequestError) Unwrap() error { return ErrInvalidRequest }

func badRequest(field, format string, args ...any) *RequestError {
	return &RequestError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// quoteField quotes a member name for an error, cut to a readable length.
func quoteField(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// DecodeJobRequest decodes and validates the body of POST /v1/jobs, strictly:
//
//   - the body is one JSON object, in UTF-8, with nothing but whitespace after it;
//   - its members are "type", "payload" and "datacenters", matched exactly
//     (case-sensitively); any other member, or a member given twice, is an error;
//   - "type" is required: a string of 1-128 characters of A-Z a-z 0-9 . _ -;
//   - "payload" is any JSON value; absent, it is JSON null. It is returned
//     compacted (insignificant whitespace removed, member order kept). Duplicate
//     object keys anywhere in it, escaped lone UTF-16 surrogates and nesting
//     deeper than MaxJSONDepth are errors, as they are for the request
//     fingerprint;
//   - "datacenters" is an array of 1-16 datacenter names, each 1-64
//     characters of a-z A-Z 0-9 . _ -, read as a set: the result is sorted
//     and a repeated name counts once. Absent or null, it is []string{defaultDC};
//     an empty array is an error. defaultDC is not validated: it is the gate's
//     own, already valid, name.
//
// Every error is a *RequestError matching ErrInvalidRequest.
func DecodeJobRequest(body []byte, defaultDC string) (JobRequest, error) {
	if !utf8.Valid(body) {
		return JobRequest{}, badRequest("", "is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return JobRequest{}, syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return JobRequest{}, badRequest("", "must be a JSON object")
	}

	var (
		req                                    JobRequest
		seenType, seenPayload, seenDatacenters bool
		typeRaw, payloadRaw, datacentersRaw    json.RawMessage
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return JobRequest{}, syntaxError(err)
		}
		name, ok := tok.(string)
		if !ok { // Token reports a non-string key as a syntax error; be safe.
			return JobRequest{}, badRequest("", "is not valid JSON: object key is not a string")
		}
		var seen *bool
		var dst *json.RawMessage
		switch name {
		case "type":
			seen, dst = &seenType, &typeRaw
		case "payload":
			seen, dst = &seenPayload, &payloadRaw
		case "datacenters":
			seen, dst = &seenDatacenters, &datacentersRaw
		default:
			return JobRequest{}, badRequest(name, "is not allowed (unknown field; the fields are type, payload and datacenters)")
		}
		if *seen {
			return JobRequest{}, badRequest(name, "is given more than once")
		}
		*seen = true
		if err := dec.Decode(dst); err != nil {
			return JobRequest{}, syntaxError(err)
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return JobRequest{}, syntaxError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return JobRequest{}, badRequest("", "has trailing data after the JSON object")
	}

	// type
	if !seenType {
		return JobRequest{}, badRequest("type", "is required")
	}
	if len(typeRaw) == 0 || typeRaw[0] != '"' {
		return JobRequest{}, badRequest("type", "must be a string of 1 to %d characters of A-Z a-z 0-9 . _ -", MaxTypeLen)
	}
	if err := json.Unmarshal(typeRaw, &req.Type); err != nil {
		return JobRequest{}, badRequest("type", "is not a valid JSON string: %v", err)
	}
	if err := validateName(req.Type, MaxTypeLen); err != nil {
		return JobRequest{}, badRequest("type", "must be 1 to %d characters of A-Z a-z 0-9 . _ - (%s)", MaxTypeLen, err)
	}

	// payload
	if !seenPayload {
		req.Payload = json.RawMessage("null")
	} else {
		if err := checkJSONValue(payloadRaw); err != nil {
			return JobRequest{}, badRequest("payload", "%s", err)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, payloadRaw); err != nil {
			return JobRequest{}, badRequest("payload", "is not valid JSON: %v", err)
		}
		req.Payload = json.RawMessage(buf.Bytes())
	}

	// datacenters
	if !seenDatacenters || string(datacentersRaw) == "null" {
		req.Datacenters = []string{defaultDC}
		return req, nil
	}
	if datacentersRaw[0] != '[' {
		return JobRequest{}, badRequest("datacenters", "must be an array of datacenter names")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(datacentersRaw, &items); err != nil {
		return JobRequest{}, badRequest("datacenters", "must be an array of datacenter names: %v", err)
	}
	if len(items) == 0 {
		return JobRequest{}, badRequest("datacenters", "must name at least one datacenter (omit it for the gate's own)")
	}
	if len(items) > MaxDatacenters {
		return JobRequest{}, badRequest("datacenters", "must name at most %d datacenters (got %d)", MaxDatacenters, len(items))
	}
	req.Datacenters = make([]string, 0, len(items))
	for i, item := range items {
		if item[0] != '"' {
			return JobRequest{}, badRequest("datacenters", "element %d must be a string", i)
		}
		var dc string
		if err := json.Unmarshal(item, &dc); err != nil {
			return JobRequest{}, badRequest("datacenters", "element %d is not a valid JSON string: %v", i, err)
		}
		if err := validateName(dc, MaxDatacenterLen); err != nil {
			return JobRequest{}, badRequest("datacenters", "element %d must be 1 to %d characters of a-z A-Z 0-9 . _ - (%s)", i, MaxDatacenterLen, err)
		}
		req.Datacenters = append(req.Datacenters, dc)
	}
	// A set: neither order nor repetition matters.
	slices.Sort(req.Datacenters)
	req.Datacenters = slices.Compact(req.Datacenters)
	return req, nil
}

// syntaxError turns a decoder error into a body-level RequestError.
func syntaxError(err error) *RequestError {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return badRequest("", "is not valid JSON: unexpected end of JSON input")
	}
	return badRequest("", "is not valid JSON: %v", err)
}

// ValidName reports whether s is a valid job type (max MaxTypeLen) or
// datacenter name (max MaxDatacenterLen): 1 to max bytes of
// A-Z a-z 0-9 . _ -.
func ValidName[S ~string | ~[]byte](s S, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

// validateName is ValidName with the reason s is not a name.
func validateName(s string, max int) error {
	switch {
	case ValidName(s, max):
		return nil
	case s == "":
		return errors.New("got an empty string")
	case len(s) > max:
		return fmt.Errorf("got %d characters", len(s))
	}
	i := 0
	for isNameByte(s[i]) {
		i++
	}
	c := s[i]
	if c < 0x20 || c >= 0x7f {
		return fmt.Errorf("got byte 0x%02X at offset %d", c, i)
	}
	return fmt.Errorf("got %q at offset %d", c, i)
}

// checkJSONValue checks a JSON value that encoding/json has already accepted
// for what the request fingerprint refuses: duplicate object keys (compared
// unescaped), escaped lone UTF-16 surrogates, and nesting deeper than
// MaxJSONDepth counting the request object around it. It is a single pass over
// the bytes (a json.Decoder.Token walk is some ten times slower) and checks its
// bounds, so it never panics even on text it was not meant to see.
func checkJSONValue(v []byte) error {
	c := jsonChecker{in: v}
	c.skipSpace()
	if err := c.value(1); err != nil {
		return err
	}
	c.skipSpace()
	if c.pos != len(c.in) {
		return errNotJSON
	}
	return nil
}

var errNotJSON = errors.New("is not valid JSON")

type jsonChecker struct {
	in  []byte
	pos int
}

func (c *jsonChecker) skipSpace() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// next returns the byte at c.pos after optional whitespace, and consumes it.
func (c *jsonChecker) next() (byte, error) {
	c.skipSpace()
	if c.pos >= len(c.in) {
		return 0, errNotJSON
	}
	c.pos++
	return c.in[c.pos-1], nil
}

// value checks the value at c.pos, nested inside depth containers.
func (c *jsonChecker) value(depth int) error {
	if c.pos >= len(c.in) {
		return errNotJSON
	}
	switch b := c.in[c.pos]; b {
	case '{', '[':
		if depth+1 > MaxJSONDepth {
			return fmt.Errorf("nests deeper than %d levels (counting the request object)", MaxJSONDepth)
		}
		c.pos++
		if b == '{' {
			return c.object(depth + 1)
		}
		return c.array(depth + 1)
	case '"':
		_, err := c.str()
		return err
	default:
		// true, false, null or a number: encoding/json checked its spelling.
		start := c.pos
		for c.pos < len(c.in) && isScalarByte(c.in[c.pos]) {
			c.pos++
		}
		if c.pos == start {
			return errNotJSON
		}
		return nil
	}
}

// isScalarByte reports the bytes of true, false, null and numbers.
func isScalarByte(b byte) bool {
	return 'a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '-' || b == '+' || b == '.' || b == 'E'
}

func (c *jsonChecker) object(depth int) error {
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		return nil
	}
	var keys [][]byte
	sorted := true
	for {
		c.skipSpace()
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return errNotJSON
		}
		key, err := c.str()
		if err != nil {
			return err
		}
		if n := len(keys); n > 0 {
			switch cmp := bytes.Compare(keys[n-1], key); {
			case cmp == 0:
				return duplicateKey(key)
			case cmp > 0:
				sorted = false
			}
		}
		keys = append(keys, key)
		if b, err := c.next(); err != nil || b != ':' {
			return errNotJSON
		}
		c.skipSpace()
		if err := c.value(depth); err != nil {
			return err
		}
		b, err := c.next()
		if err != nil {
			return err
		}
		if b == '}' {
			break
		}
		if b != ',' {
			return errNotJSON
		}
	}
	if !sorted {
		slices.SortFunc(keys, bytes.Compare)
		for i := 1; i < len(keys); i++ {
			if bytes.Equal(keys[i-1], keys[i]) {
				return duplicateKey(keys[i])
			}
		}
	}
	return nil
}

func duplicateKey(key []byte) error {
	return fmt.Errorf("has a duplicate object key %s", quoteField(string(key)))
}

func (c *jsonChecker) array(depth int) error {
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		return nil
	}
	for {
		c.skipSpace()
		if err := c.value(depth); err != nil {
			return err
		}
		b, err := c.next()
		if err != nil {
			return err
		}
		if b == ']' {
			return nil
		}
		if b != ',' {
			return errNotJSON
		}
	}
}

// str reads the string at c.pos (its opening quote) and returns its contents
// unescaped: a slice of the input when it has no escapes.
func (c *jsonChecker) str() ([]byte, error) {
	start := c.pos
	escaped := false
	i := start + 1
	for ; i < len(c.in); i++ {
		if b := c.in[i]; b == '"' {
			break
		} else if b == '\\' {
			escaped = true
			i++
		}
	}
	if i >= len(c.in) {
		return nil, errNotJSON
	}
	c.pos = i + 1
	if !escaped {
		return c.in[start+1 : i], nil
	}
	tok := c.in[start:c.pos]
	if err := checkSurrogates(tok, start); err != nil {
		return nil, err
	}
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return nil, errNotJSON
	}
	return []byte(s), nil
}

// checkSurrogates reports an error if a string in the JSON text v escapes a lone
// UTF-16 surrogate (a \uD800-\uDBFF escape not followed by a \uDC00-\uDFFF
// escape, or a \uDC00-\uDFFF escape on its own): encoding/json reads every one
// of them as U+FFFD, so two different bodies would decode alike. v must already
// be valid JSON; base is its offset in the payload, for the error.
func checkSurrogates(v []byte, base int) error {
	inString := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case !inString:
			if c == '"' {
				inString = true
			}
		case c == '"':
			inString = false
		case c == '\\':
			if i+1 < len(v) && v[i+1] == 'u' {
				r, ok := jsonescape.Hex4(v, i+2)
				switch {
				case !ok:
				case 0xD800 <= r && r <= 0xDBFF && lowSurrogateAt(v, i+6):
					i += 11 // the pair; the loop's i++ steps past it
					continue
				case 0xD800 <= r && r <= 0xDFFF:
					return fmt.Errorf("has a lone UTF-16 surrogate \\u%04X at offset %d", r, base+i)
				}
			}
			i++ // skip the escaped character
		}
	}
	return nil
}

// lowSurrogateAt reports whether v holds a \uDC00-\uDFFF escape at i.
func lowSurrogateAt(v []byte, i int) bool {
	if i+1 >= len(v) || v[i] != '\\' || v[i+1] != 'u' {
		return false
	}
	lo, ok := jsonescape.Hex4(v, i+2)
	return ok && 0xDC00 <= lo && lo <= 0xDFFF
}
