// Package fingerprint computes the request fingerprint of API v1: a hash of the
// tenant, the method, the path and the canonical form of the body, so that key
// order and whitespace in the body do not matter (docs/api.md, "Submit a job").
// Two submissions under the same idempotency key with different fingerprints are
// answered 422 idempotency_key_reused.
//
// The canonical form of a JSON text is:
//
//   - object members sorted by key (byte order of the UTF-8 key, as encoding/json
//     sorts map keys), with no insignificant whitespace;
//   - numbers kept as their literal text: 1, 1.0 and 1e0 are three different
//     values (no float rounding can make two bodies collide);
//   - strings decoded and re-escaped the encoding/json way (json.Marshal of a Go
//     string, with its HTML escaping of <, > and &), so "\u0061" and "a" are the
//     same string.
//
// Canonicalize refuses, as invalid JSON, what would otherwise let two different
// bodies share one canonical form or be read differently by different parsers:
// duplicate object keys (after unescaping; RFC 8259 leaves their meaning to the
// parser), invalid UTF-8, and escaped lone UTF-16 surrogates (encoding/json
// reads every one of them as U+FFFD). It also refuses nesting deeper than
// MaxDepth.
package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/once-dev/once/internal/jsonescape"
)

// MaxDepth bounds the nesting of arrays and objects in a body; the outermost
// array or object is depth 1. pkg/api.DecodeJobRequest applies the same bound.
const MaxDepth = 1000

// ErrInvalidJSON is matched (errors.Is) by every error Canonicalize returns.
// For a request body the gate answers it with 400 invalid_request.
var ErrInvalidJSON = errors.New("invalid JSON")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidJSON}, args...)...)
}

// Canonicalize returns the canonical form of the JSON text body (see the package
// documentation). Any JSON value is accepted at the top level; trailing data
// other than whitespace is an error. Every error matches ErrInvalidJSON.
//
// encoding/json checks the syntax (json.Valid, with the same grammar and error
// messages as json.Unmarshal); a single pass over the valid text then rewrites
// it, which keeps Canonicalize in the hundreds of MB/s rather than the few MB/s
// of a json.Decoder.Token walk.
func Canonicalize(body []byte) ([]byte, error) {
	if !utf8.Valid(body) {
		return nil, invalidf("body is not valid UTF-8")
	}
	if !json.Valid(body) {
		// Unmarshal into a RawMessage only runs the same syntax check, and
		// says what is wrong and where.
		var raw json.RawMessage
		if err := json.Unmarshal(body, &raw); err != nil {
			return nil, invalidf("%v", err)
		}
		return nil, invalidf("syntax error")
	}
	c := canonicalizer{in: body, out: make([]byte, 0, len(body))}
	c.skipSpace()
	if err := c.value(0); err != nil {
		return nil, err
	}
	return c.out, nil
}

// canonicalizer rewrites a JSON text that json.Valid accepted. It still checks
// its bounds, so a disagreement with json.Valid is an error, never a panic.
type canonicalizer struct {
	in  []byte
	pos int
	out []byte
}

// member locates one "key":value of an object being written, in out.
type member struct {
	key        []byte // unescaped
	start, end int
}

var errUnexpected = invalidf("unexpected end of JSON input")

func (c *canonicalizer) skipSpace() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// expect consumes b, after optional whitespace.
func (c *canonicalizer) expect(b byte) error {
	c.skipSpace()
	if c.pos >= len(c.in) {
		return errUnexpected
	}
	if c.in[c.pos] != b {
		return invalidf("invalid character %q at offset %d", c.in[c.pos], c.pos)
	}
	c.pos++
	return nil
}

// value writes the value at c.pos, nested depth containers deep.
func (c *canonicalizer) value(depth int) error {
	if c.pos >= len(c.in) {
		return errUnexpected
	}
	switch b := c.in[c.pos]; b {
	case '{', '[':
		if depth+1 > MaxDepth {
			return invalidf("nesting deeper than %d levels", MaxDepth)
		}
		if b == '{' {
			return c.object(depth + 1)
		}
		return c.array(depth + 1)
	case '"':
		s, err := c.str()
		if err != nil {
			return err
		}
		c.out = appendString(c.out, s)
		return nil
	case 't':
		return c.literal("true")
	case 'f':
		return c.literal("false")
	case 'n':
		return c.literal("null")
	default:
		// A number, kept as written.
		start := c.pos
		for c.pos < len(c.in) && isNumberByte(c.in[c.pos]) {
			c.pos++
		}
		if c.pos == start {
			return invalidf("invalid character %q at offset %d", b, c.pos)
		}
		c.out = append(c.out, c.in[start:c.pos]...)
		return nil
	}
}

func isNumberByte(b byte) bool {
	return '0' <= b && b <= '9' || b == '-' || b == '+' || b == '.' || b == 'e' || b == 'E'
}

func (c *canonicalizer) literal(lit string) error {
	if !bytes.HasPrefix(c.in[c.pos:], []byte(lit)) {
		return invalidf("invalid literal at offset %d", c.pos)
	}
	c.pos += len(lit)
	c.out = append(c.out, lit...)
	return nil
}

func (c *canonicalizer) object(depth int) error {
	c.pos++ // '{'
	objStart := len(c.out)
	c.out = append(c.out, '{')
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, '}')
		return nil
	}
	var members []member
	sorted := true
	for {
		c.skipSpace()
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return invalidf("object key is not a string at offset %d", c.pos)
		}
		key, err := c.str()
		if err != nil {
			return err
		}
		if n := len(members); n > 0 {
			switch cmp := bytes.Compare(members[n-1].key, key); {
			case cmp == 0:
				return invalidf("duplicate object key %s", quoteForError(string(key)))
			case cmp > 0:
				sorted = false
			}
			c.out = append(c.out, ',')
		}
		m := member{key: key, start: len(c.out)}
		c.out = appendString(c.out, key)
		c.out = append(c.out, ':')
		if err := c.expect(':'); err != nil {
			return err
		}
		c.skipSpace()
		if err := c.value(depth); err != nil {
			return err
		}
		m.end = len(c.out)
		members = append(members, m)
		c.skipSpace()
		if c.pos >= len(c.in) {
			return errUnexpected
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if err := c.expect('}'); err != nil {
			return err
		}
		break
	}
	if !sorted {
		slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
		for i := 1; i < len(members); i++ {
			if bytes.Equal(members[i-1].key, members[i].key) {
				return invalidf("duplicate object key %s", quoteForError(string(members[i].key)))
			}
		}
		written := bytes.Clone(c.out[objStart:])
		c.out = c.out[:objStart+1]
		for i, m := range members {
			if i > 0 {
				c.out = append(c.out, ',')
			}
			c.out = append(c.out, written[m.start-objStart:m.end-objStart]...)
		}
	}
	c.out = append(c.out, '}')
	return nil
}

func (c *canonicalizer) array(depth int) error {
	c.pos++ // '['
	c.out = append(c.out, '[')
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return nil
	}
	for first := true; ; first = false {
		if !first {
			c.out = append(c.out, ',')
		}
		c.skipSpace()
		if err := c.value(depth); err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.in) {
			return errUnexpected
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if err := c.expect(']'); err != nil {
			return err
		}
		break
	}
	c.out = append(c.out, ']')
	return nil
}

// str reads the string at c.pos (its opening quote) and returns it unescaped.
// A string without escapes is returned as a slice of the input. An escaped lone
// UTF-16 surrogate is an error.
func (c *canonicalizer) str() ([]byte, error) {
	start := c.pos + 1
	escaped := false
	i := start
	for ; i < len(c.in); i++ {
		if b := c.in[i]; b == '"' {
			break
		} else if b == '\\' {
			escaped = true
			i++
		}
	}
	if i >= len(c.in) {
		return nil, errUnexpected
	}
	c.pos = i + 1
	raw := c.in[start:i]
	if !escaped {
		return raw, nil
	}
	return unescape(raw, start)
}

// unescape decodes the JSON escapes of a string's contents raw, which begin at
// offset base of the body (for error messages).
func unescape(raw []byte, base int) ([]byte, error) {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		b := raw[i]
		if b != '\\' {
			out = append(out, b)
			continue
		}
		if i+1 >= len(raw) {
			return nil, errUnexpected
		}
		i++
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := jsonescape.Hex4(raw, i+1)
			if !ok {
				return nil, invalidf("invalid \\u escape at offset %d", base+i-1)
			}
			at := base + i - 1
			i += 4
			switch {
			case 0xD800 <= r && r <= 0xDBFF:
				if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if lo, ok := jsonescape.Hex4(raw, i+3); ok && 0xDC00 <= lo && lo <= 0xDFFF {
						r = utf16.DecodeRune(r, lo)
						i += 6
						break
					}
				}
				return nil, invalidf("lone UTF-16 surrogate \\u%04X at offset %d", r, at)
			case 0xDC00 <= r && r <= 0xDFFF:
				return nil, invalidf("lone UTF-16 surrogate \\u%04X at offset %d", r, at)
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, invalidf("invalid escape at offset %d", base+i-1)
		}
	}
	return out, nil
}

const hexDigits = "0123456789abcdef"

// appendString appends s, which is valid UTF-8, as a JSON string exactly as
// json.Marshal encodes a Go string: the short escapes \", \\, \b, \f, \n,
// \r, \t; \u00XX for other control characters and for <, > and &; \u2028
// and \u2029; every other character as itself.
func appendString(out, s []byte) []byte {
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			out = append(out, s[start:i]...)
			switch b {
			case '"', '\\':
				out = append(out, '\\', b)
			case '\b':
				out = append(out, '\\', 'b')
			case '\f':
				out = append(out, '\\', 'f')
			case '\n':
				out = append(out, '\\', 'n')
			case '\r':
				out = append(out, '\\', 'r')
			case '\t':
				out = append(out, '\\', 't')
			default:
				out = append(out, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			// Not reached for valid UTF-8; json.Marshal writes U+FFFD.
			out = append(out, s[start:i]...)
			out = append(out, `\ufffd`...)
		} else if r == '\u2028' || r == '\u2029' {
			out = append(out, s[start:i]...)
			out = append(out, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		} else {
			i += size
			continue
		}
		i += size
		start = i
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}

func quoteForError(s string) string {
	const limit = 64
	if len(s) > limit {
		// Cut at a rune boundary so the error stays valid UTF-8.
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return fmt.Sprintf("%q...", s[:cut])
	}
	return fmt.Sprintf("%q", s)
}

// fingerprintDomain separates this hash from any other SHA-256 use and versions
// the encoding.
const fingerprintDomain = "once.fingerprint.v1"

// Fingerprint returns the request fingerprint: lowercase hex SHA-256 over the
// domain "once.fingerprint.v1" and then tenant, method, path and canonicalBody,
// each preceded by its length as a big-endian uint64, so no two different
// tuples encode to the same bytes. canonicalBody should come from Canonicalize.
func Fingerprint(tenant, method, path string, canonicalBody []byte) string {
	h := sha256.New()
	var n [8]byte
	write := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	write([]byte(fingerprintDomain))
	write([]byte(tenant))
	write([]byte(method))
	write([]byte(path))
	write(canonicalBody)
	return hex.EncodeToString(h.Sum(nil))
}
