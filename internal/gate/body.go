package gate

import (
	"encoding/json"
	"slices"

	"github.com/once-dev/once/pkg/api"
)

// decodeCanonical decodes the canonical form of a POST /v1/jobs body (what
// fingerprint.Canonicalize returned: valid UTF-8 JSON, members sorted, no
// whitespace, no duplicate keys, no lone surrogates, nesting bounded) without
// parsing it again: the checks that made it canonical are exactly the JSON
// checks api.DecodeJobRequest makes, so what is left is to find the three
// members and check the names. ok is false for anything but a valid request
// (then api.DecodeJobRequest, on the same bytes, says what is wrong); when ok
// is true the result equals api.DecodeJobRequest's (body_test.go checks it),
// its Payload a slice of canonical.
func decodeCanonical(canonical []byte, defaultDC string) (req api.JobRequest, ok bool) {
	s := canonical
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return req, false
	}
	s = s[1 : len(s)-1]
	var seenType bool
	// Members come sorted: datacenters, payload, type.
	for len(s) > 0 {
		name, rest, ok := plainString(s)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return req, false
		}
		v, rest, ok := skipValue(rest[1:])
		if !ok {
			return req, false
		}
		switch string(name) {
		case "datacenters":
			if req.Datacenters, ok = datacenters(v); !ok {
				return req, false
			}
		case "payload":
			req.Payload = json.RawMessage(v)
		case "type":
			t, tail, ok := plainString(v)
			if !ok || len(tail) != 0 || !validName(t, api.MaxTypeLen) {
				return req, false
			}
			req.Type, seenType = string(t), true
		default:
			return req, false
		}
		if len(rest) > 0 {
			if rest[0] != ',' {
				return req, false
			}
			rest = rest[1:]
		}
		s = rest
	}
	if !seenType {
		return req, false
	}
	if req.Payload == nil {
		req.Payload = json.RawMessage("null")
	}
	if req.Datacenters == nil {
		req.Datacenters = []string{defaultDC}
	}
	return req, true
}

// datacenters reads null or an array of 1 to api.MaxDatacenters valid names,
// as a sorted set (nil, true for null), as api.DecodeJobRequest does.
func datacenters(v []byte) ([]string, bool) {
	if string(v) == "null" {
		return nil, true
	}
	if len(v) < 2 || v[0] != '[' || v[len(v)-1] != ']' {
		return nil, false
	}
	v = v[1 : len(v)-1]
	var out []string
	items := 0
	for len(v) > 0 {
		name, rest, ok := plainString(v)
		if !ok || !validName(name, api.MaxDatacenterLen) || items == api.MaxDatacenters {
			return nil, false
		}
		items++
		if !slices.Contains(out, string(name)) { // a set: repetition does not matter
			out = append(out, string(name))
		}
		if len(rest) > 0 {
			if rest[0] != ',' || len(rest) == 1 {
				return nil, false
			}
			rest = rest[1:]
		}
		v = rest
	}
	slices.Sort(out) // a set: order does not matter
	return out, len(out) > 0
}

// plainString reads a string without escapes at the start of s: its bytes
// and what follows. A string with an escape is not plain (no valid name has
// one, so the caller falls back).
func plainString(s []byte) (str, rest []byte, ok bool) {
	if len(s) < 2 || s[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			return s[1:i], s[i+1:], true
		case '\\':
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// skipValue returns the value at the start of canonical JSON s and what
// follows it: up to the first ',' or closing bracket outside any string and
// container.
func skipValue(s []byte) (v, rest []byte, ok bool) {
	depth, inString := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return nil, nil, false
			}
			depth--
		case ',':
			if depth == 0 {
				return s[:i], s[i:], i > 0
			}
		}
	}
	if depth != 0 || inString || len(s) == 0 {
		return nil, nil, false
	}
	return s, nil, true
}

// validName is api's name rule: 1 to max bytes of A-Z a-z 0-9 . _ -.
func validName(s []byte, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for _, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
