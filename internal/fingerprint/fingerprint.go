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
// One pass over the text checks its syntax and rewrites it, which keeps
// Canonicalize in the hundreds of MB/s rather than the few MB/s of a
// json.Decoder.Token walk. Only a body it refuses is read again, by
// encoding/json, so that a syntax error is described with the same words and
// offsets as json.Unmarshal's.
func Canonicalize(body []byte) ([]byte, error) {
	canonical, _, err := canonicalize(body, false)
	return canonical, err
}

// Member is one member of a canonical object: its key, unescaped, and its
// value's canonical form, a slice of the canonical text.
type Member struct {
	Key   []byte
	Value []byte
}

// CanonicalizeObject is Canonicalize that also returns, when body is an
// object, its members in canonical (sorted) order, so that a caller reads
// the members of a request without scanning its text again (members is nil
// for any other value).
func CanonicalizeObject(body []byte) (canonical []byte, members []Member, err error) {
	return canonicalize(body, true)
}

func canonicalize(body []byte, wantMembers bool) ([]byte, []Member, error) {
	if !utf8.Valid(body) {
		return nil, nil, invalidf("body is not valid UTF-8")
	}
	c := canonicalizer{in: body, out: make([]byte, 0, len(body)), wantMembers: wantMembers}
	c.skipSpace()
	err := c.value(0)
	if err == nil {
		if c.skipSpace(); c.pos < len(c.in) {
			err = invalidf("invalid character %q after top-level value at offset %d", c.in[c.pos], c.pos)
		}
	}
	if err != nil {
		// Unmarshal into a RawMessage runs encoding/json's syntax check alone,
		// and says what is wrong and where; what it accepts was refused for a
		// reason of Canonicalize's own (a duplicate key, a lone surrogate, the
		// nesting bound).
		var raw json.RawMessage
		if jerr := json.Unmarshal(body, &raw); jerr != nil {
			return nil, nil, invalidf("%v", jerr)
		}
		return nil, nil, err
	}
	var members []Member
	if c.top != nil {
		members = make([]Member, len(c.top))
		for i, m := range c.top {
			members[i] = Member{Key: m.key, Value: c.out[m.value:m.end]}
		}
	}
	return c.out, members, nil
}

// canonicalizer checks and rewrites a JSON text in one pass: anything but
// RFC 8259 JSON is an error, never a panic (FuzzCanonicalize holds it to
// encoding/json's grammar).
type canonicalizer struct {
	in  []byte
	pos int
	out []byte
	// wantMembers asks for the members of a top-level object, located in
	// out once it is written (top).
	wantMembers bool
	top         []member
	// stack holds the members of the objects being written, the innermost
	// last: an object's from the length it found on entry, dropped as it
	// ends. One slice for the whole text, not one grown per object.
	stack []member
	// scratch is an unsorted object's text copied while it is rewritten in
	// order, reused by the next one (an object's rewrite nests no other).
	scratch []byte
}

// stackCap is the stack's first capacity: the members of a request
// (type, payload, datacenters, ...) and of a payload object or two.
const stackCap = 16

// member locates one "key":value of an object being written, in out: the
// member from start, its value from value, both to end.
type member struct {
	key               []byte // unescaped
	start, value, end int
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
		c.out = jsonescape.AppendString(c.out, s)
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
		if !c.number() {
			return invalidf("invalid number at offset %d", start)
		}
		c.out = append(c.out, c.in[start:c.pos]...)
		return nil
	}
}

// number consumes a number as RFC 8259 writes it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (c *canonicalizer) number() bool {
	c.accept('-')
	switch {
	case c.accept('0'):
	case c.digits() == 0:
		return false
	}
	if c.accept('.') && c.digits() == 0 {
		return false
	}
	if c.accept('e') || c.accept('E') {
		if !c.accept('+') {
			c.accept('-')
		}
		if c.digits() == 0 {
			return false
		}
	}
	return true
}

// accept consumes b if it is next.
func (c *canonicalizer) accept(b byte) bool {
	if c.pos < len(c.in) && c.in[c.pos] == b {
		c.pos++
		return true
	}
	return false
}

// digits consumes a run of decimal digits and says how long it was.
func (c *canonicalizer) digits() int {
	start := c.pos
	for c.pos < len(c.in) && '0' <= c.in[c.pos] && c.in[c.pos] <= '9' {
		c.pos++
	}
	return c.pos - start
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
	if c.accept('}') {
		c.out = append(c.out, '}')
		return nil
	}
	if c.stack == nil {
		c.stack = make([]member, 0, stackCap)
	}
	base := len(c.stack)
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
		if n := len(c.stack); n > base {
			switch cmp := bytes.Compare(c.stack[n-1].key, key); {
			case cmp == 0:
				return invalidf("duplicate object key %s", quoteForError(string(key)))
			case cmp > 0:
				sorted = false
			}
			c.out = append(c.out, ',')
		}
		m := member{key: key, start: len(c.out)}
		c.out = jsonescape.AppendString(c.out, key)
		c.out = append(c.out, ':')
		if err := c.expect(':'); err != nil {
			return err
		}
		c.skipSpace()
		m.value = len(c.out)
		if err := c.value(depth); err != nil {
			return err
		}
		m.end = len(c.out)
		c.stack = append(c.stack, m) // the nested values' members are off it again
		c.skipSpace()
		if c.accept(',') {
			continue
		}
		if err := c.expect('}'); err != nil {
			return err
		}
		break
	}
	members := c.stack[base:]
	c.stack = c.stack[:base] // members stays intact: nothing is pushed until this object is done
	if !sorted {
		slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
		for i := 1; i < len(members); i++ {
			if bytes.Equal(members[i-1].key, members[i].key) {
				return invalidf("duplicate object key %s", quoteForError(string(members[i].key)))
			}
		}
		c.scratch = append(c.scratch[:0], c.out[objStart:]...)
		written := c.scratch
		c.out = c.out[:objStart+1]
		for i, m := range members {
			if i > 0 {
				c.out = append(c.out, ',')
			}
			start := len(c.out)
			c.out = append(c.out, written[m.start-objStart:m.end-objStart]...)
			members[i].start, members[i].value, members[i].end = start, start+m.value-m.start, len(c.out)
		}
	}
	c.out = append(c.out, '}')
	if depth == 1 && c.wantMembers {
		c.top = members
	}
	return nil
}

func (c *canonicalizer) array(depth int) error {
	c.pos++ // '['
	c.out = append(c.out, '[')
	c.skipSpace()
	if c.accept(']') {
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
		if c.accept(',') {
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
		} else if b < 0x20 {
			return nil, invalidf("control character in string at offset %d", i)
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
				fallthrough // a high surrogate without its low half is lone too
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
	// A usual request is hashed from one buffer on the stack, in one call;
	// a larger one streams through a digest.
	var buf [512]byte
	in := buf[:0]
	for _, s := range [...]string{fingerprintDomain, tenant, method, path} {
		in = binary.BigEndian.AppendUint64(in, uint64(len(s)))
		in = append(in, s...)
	}
	in = binary.BigEndian.AppendUint64(in, uint64(len(canonicalBody)))
	var sum [sha256.Size]byte
	if len(in)+len(canonicalBody) <= len(buf) {
		sum = sha256.Sum256(append(in, canonicalBody...))
	} else {
		h := sha256.New()
		h.Write(in)
		h.Write(canonicalBody)
		h.Sum(sum[:0])
	}
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}
