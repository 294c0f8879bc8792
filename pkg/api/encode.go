package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"

	"github.com/once-dev/once/internal/jsonescape"
)

// ErrInvalidRawJSON is matched (errors.Is) by the error AppendJSON returns
// when a json.RawMessage member (payload, result) is not valid JSON: the
// case where json.Marshal fails.
var ErrInvalidRawJSON = errors.New("raw member is not valid JSON")

// RawJSONError says which json.RawMessage member of a Job is not valid JSON.
// It unwraps to ErrInvalidRawJSON and to the *json.SyntaxError that tells
// where.
type RawJSONError struct {
	// Member is the JSON member at fault: "payload" or "result".
	Member string
	// Err is the *json.SyntaxError json.Compact gives for the member.
	Err error
}

func (e *RawJSONError) Error() string {
	return "api: job member " + strconv.Quote(e.Member) + " is not valid JSON: " + e.Err.Error()
}

// Unwrap returns ErrInvalidRawJSON and the syntax error.
func (e *RawJSONError) Unwrap() []error { return []error{ErrInvalidRawJSON, e.Err} }

// AppendJSON appends to dst the bytes json.Marshal(j) gives, without
// reflection: the same members in the same order and omitempty rules, a nil
// datacenters map as null and an empty one as {}, the map's keys sorted,
// strings escaped as encoding/json escapes them by default (<, > and & as
// \u003c and the like, U+2028 and U+2029 escaped, invalid UTF-8 as \ufffd),
// the payload and result compacted and HTML-escaped as encoding/json writes a
// json.RawMessage (a nil one as null). Where json.Marshal fails (a payload or
// result that is not valid JSON), AppendJSON returns dst unchanged and a
// *RawJSONError.
func (j *Job) AppendJSON(dst []byte) ([]byte, error) {
	if j == nil {
		return append(dst, "null"...), nil
	}
	orig := len(dst)
	dst = append(dst, `{"job_id":`...)
	dst = jsonescape.AppendString(dst, j.JobID)
	dst = append(dst, `,"type":`...)
	dst = jsonescape.AppendString(dst, j.Type)
	dst = append(dst, `,"status":`...)
	dst = jsonescape.AppendString(dst, j.Status)
	dst = append(dst, `,"idempotency_key":`...)
	dst = jsonescape.AppendString(dst, j.IdempotencyKey)
	dst = append(dst, `,"created_at":`...)
	dst = jsonescape.AppendString(dst, j.CreatedAt)
	dst = append(dst, `,"datacenters":`...)
	dst = appendDatacenters(dst, j.Datacenters)
	dst = append(dst, `,"payload":`...)
	var err error
	if dst, err = appendRawJSON(dst, j.Payload, "payload"); err != nil {
		return dst[:orig], err
	}
	if j.State != "" {
		dst = append(dst, `,"state":`...)
		dst = jsonescape.AppendString(dst, j.State)
	}
	if j.Attempts != 0 {
		dst = append(dst, `,"attempts":`...)
		dst = strconv.AppendInt(dst, int64(j.Attempts), 10)
	}
	if len(j.Result) != 0 {
		dst = append(dst, `,"result":`...)
		if dst, err = appendRawJSON(dst, j.Result, "result"); err != nil {
			return dst[:orig], err
		}
	}
	if j.Error != "" {
		dst = append(dst, `,"error":`...)
		dst = jsonescape.AppendString(dst, j.Error)
	}
	if len(j.NamedDatacenters) != 0 {
		dst = append(dst, `,"named_datacenters":[`...)
		for i, dc := range j.NamedDatacenters {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonescape.AppendString(dst, dc)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

// appendDatacenters appends m as encoding/json writes a map: null when nil,
// else an object with its keys in sorted order (by their bytes, before
// escaping).
func appendDatacenters(dst []byte, m map[string]DatacenterStatus) []byte {
	if m == nil {
		return append(dst, "null"...)
	}
	// A job names at most MaxDatacenters: the keys are sorted on the stack.
	var stack [MaxDatacenters]string
	names := stack[:0]
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	dst = append(dst, '{')
	for i, name := range names {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonescape.AppendString(dst, name)
		st := m[name]
		dst = append(dst, `:{"status":`...)
		dst = jsonescape.AppendString(dst, st.Status)
		if st.Reason != "" {
			dst = append(dst, `,"reason":`...)
			dst = jsonescape.AppendString(dst, st.Reason)
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// appendRawJSON appends raw as encoding/json writes a json.RawMessage: null
// when nil; else, when valid JSON, compacted (whitespace between tokens
// dropped) with <, >, &, U+2028 and U+2029 escaped. member names raw in the
// error when it is not valid JSON (an empty, non-nil raw included).
func appendRawJSON(dst, raw []byte, member string) ([]byte, error) {
	if raw == nil {
		return append(dst, "null"...), nil
	}
	if !json.Valid(raw) {
		// Only the failure pays for the syntax error's detail.
		err := json.Compact(new(bytes.Buffer), raw)
		if err == nil { // cannot happen: Valid and Compact use one scanner
			err = ErrInvalidRawJSON
		}
		return dst, &RawJSONError{Member: member, Err: err}
	}
	// raw is valid JSON: outside strings only whitespace is dropped; inside
	// them the bytes are kept as they are (invalid UTF-8 too, as
	// encoding/json keeps it), but for the HTML-escaped ones. <, > and & only
	// occur in strings, and 0xE2 (U+2028's and U+2029's first byte) too.
	start := 0
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, raw[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', jsonescape.HexDigits[c>>4], jsonescape.HexDigits[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
			dst = append(dst, raw[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', jsonescape.HexDigits[raw[i+2]&0xF])
			i += 2
			start = i + 1
		case inString:
			switch c {
			case '\\':
				i++ // the escaped byte is kept, whatever it is (" or \ included)
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			dst = append(dst, raw[start:i]...)
			start = i + 1
		}
	}
	return append(dst, raw[start:]...), nil
}
