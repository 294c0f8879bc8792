// Package keys parses and formats the Idempotency-Key header of once's API v1
// (docs/api.md, "Idempotency keys").
//
// A key has one of two forms:
//
//   - Structured: <client_id>:<sequence>:<nonce>. A key with two or more ':' is
//     structured and must parse as such. It is split at its LAST two colons, so
//     client_id may itself contain ':' (for example "host1.dc1:12345:42:a1b2c3d4e5f6a7b8"
//     has client_id "host1.dc1:12345"). client_id is 1-128 characters of
//     A-Z a-z 0-9 . _ - @ :; sequence is a decimal uint64 written with digits only
//     (no sign, no '+'); nonce is exactly 16 lowercase hex characters.
//   - Opaque: a key with fewer than two ':' of 1-255 visible ASCII characters
//     (0x21-0x7E), for example a UUID.
//
// The header value may also be an RFC 8941 sf-string ("...", with \" and \\
// escapes); the quotes are not part of the key. Every key, in either form, is at
// most MaxLen characters once unquoted.
//
// Leading zeros in a sequence are accepted ("c:007:..." has sequence 7). The key
// is still compared as written: "c:7:n" and "c:007:n" are two distinct keys for
// deduplication, although both carry sequence 7. Format never writes leading
// zeros, so keys made by this package are canonical.
//
// The package depends on the standard library only; any Go program may import it.
package keys

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Limits of the key format.
const (
	// MaxLen bounds a whole key (without sf-string quotes), opaque or structured.
	MaxLen = 255
	// MaxClientIDLen bounds the client_id of a structured key.
	MaxClientIDLen = 128
	// NonceLen is the exact length of a nonce: 8 random bytes in lowercase hex.
	NonceLen = 16
)

// ErrInvalid is matched (errors.Is) by every error Parse and the Validate
// functions return. The gate answers it with 400 idempotency_key_invalid.
var ErrInvalid = errors.New("idempotency key invalid")

// Part names the part of a key that is wrong.
type Part int

// The parts of a key. PartKey is the key as a whole (empty, too long, a bad
// character in an opaque key, a malformed sf-string).
const (
	PartKey Part = iota
	PartClientID
	PartSequence
	PartNonce
)

// String returns the part's name as the API documentation spells it: "key",
// "client_id", "sequence" or "nonce".
func (p Part) String() string {
	if names := [...]string{"key", "client_id", "sequence", "nonce"}; p >= 0 && int(p) < len(names) {
		return names[p]
	}
	return "Part(" + strconv.Itoa(int(p)) + ")"
}

// ParseError says why a key is invalid and which part is wrong. It unwraps to
// ErrInvalid.
type ParseError struct {
	Part Part
	// Reason completes a sentence whose subject is the part, e.g.
	// "must be exactly 16 lowercase hex characters (got 15)".
	Reason string
}

// Error renders a detail suitable for a problem's "detail" member, naming the
// part, for example "idempotency key: nonce must be exactly 16 lowercase hex
// characters (got 15)".
func (e *ParseError) Error() string {
	if e.Part == PartKey {
		return "idempotency key " + e.Reason
	}
	return "idempotency key: " + e.Part.String() + " " + e.Reason
}

// Unwrap returns ErrInvalid.
func (e *ParseError) Unwrap() error { return ErrInvalid }

func invalid(p Part, format string, args ...any) *ParseError {
	return &ParseError{Part: p, Reason: fmt.Sprintf(format, args...)}
}

// Key is a parsed idempotency key.
type Key struct {
	// Raw is the key without sf-string quotes, exactly as the client wrote it:
	// the identity used for deduplication.
	Raw string
	// Structured reports the <client_id>:<sequence>:<nonce> form; ClientID,
	// Sequence and Nonce are set only then.
	Structured bool
	ClientID   string
	Sequence   uint64
	Nonce      string
}

// String returns the key as a header value that Parse reads back to the same
// Key: Raw itself, unless Raw begins with '"', in which case it is written as an
// RFC 8941 sf-string (a bare value beginning with '"' would be read as one).
func (k Key) String() string {
	if strings.HasPrefix(k.Raw, `"`) {
		return Quote(k.Raw)
	}
	return k.Raw
}

// Parse parses an Idempotency-Key header value. It does not trim whitespace: an
// HTTP server has already removed the optional whitespace around a field value,
// and a space inside a key is invalid. Every error it returns is a *ParseError
// that matches ErrInvalid.
func Parse(headerValue string) (Key, error) {
	raw := headerValue
	if strings.HasPrefix(raw, `"`) {
		s, err := unquote(raw)
		if err != nil {
			return Key{}, err
		}
		raw = s
	}
	if raw == "" {
		return Key{}, invalid(PartKey, "must not be empty")
	}
	last := strings.LastIndexByte(raw, ':')
	if last < 0 || strings.LastIndexByte(raw[:last], ':') < 0 {
		if err := validateOpaque(raw); err != nil {
			return Key{}, err
		}
		return Key{Raw: raw}, nil
	}
	mid := strings.LastIndexByte(raw[:last], ':')
	clientID, seqText, nonce := raw[:mid], raw[mid+1:last], raw[last+1:]
	if err := ValidateClientID(clientID); err != nil {
		return Key{}, err
	}
	seq, err := ParseSequence(seqText)
	if err != nil {
		return Key{}, err
	}
	if err := ValidateNonce(nonce); err != nil {
		return Key{}, err
	}
	// Only a sequence padded with leading zeros can make a structured key this
	// long: 128 + 1 + 20 + 1 + 16 = 166 otherwise.
	if len(raw) > MaxLen {
		return Key{}, invalid(PartKey, "must be at most %d characters (got %d)", MaxLen, len(raw))
	}
	return Key{Raw: raw, Structured: true, ClientID: clientID, Sequence: seq, Nonce: nonce}, nil
}

func validateOpaque(raw string) error {
	if len(raw) > MaxLen {
		return invalid(PartKey, "must be at most %d characters (got %d)", MaxLen, len(raw))
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c < 0x21 || c > 0x7e {
			return invalid(PartKey, "must contain only visible ASCII characters (got %s at offset %d)", describe(c), i)
		}
	}
	return nil
}

// ValidateClientID reports whether s is a valid client_id: 1-128 characters of
// A-Z a-z 0-9 . _ - @ :.
func ValidateClientID(s string) error {
	if s == "" {
		return invalid(PartClientID, "must not be empty")
	}
	if len(s) > MaxClientIDLen {
		return invalid(PartClientID, "must be at most %d characters (got %d)", MaxClientIDLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		if !isClientIDChar(s[i]) {
			return invalid(PartClientID, "must contain only A-Z a-z 0-9 . _ - @ : (got %s at offset %d)", describe(s[i]), i)
		}
	}
	return nil
}

func isClientIDChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == '-', c == '@', c == ':':
		return true
	}
	return false
}

// ParseSequence parses the sequence part of a structured key: decimal digits
// only (no sign, no '+', no spaces), at most math.MaxUint64. Leading zeros are
// accepted.
func ParseSequence(s string) (uint64, error) {
	if s == "" {
		return 0, invalid(PartSequence, "must not be empty")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '0' || c > '9' {
			return 0, invalid(PartSequence, "must be a decimal unsigned integer of digits only (got %s at offset %d)", describe(c), i)
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		// Only overflow is left: every character is a digit.
		return 0, invalid(PartSequence, "must be at most 18446744073709551615 (an unsigned 64-bit integer)")
	}
	return n, nil
}

// ValidateNonce reports whether s is a valid nonce: exactly 16 lowercase hex
// characters.
func ValidateNonce(s string) error {
	if len(s) != NonceLen {
		return invalid(PartNonce, "must be exactly %d lowercase hex characters (got %d)", NonceLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return invalid(PartNonce, "must be exactly %d lowercase hex characters (got %s at offset %d)", NonceLen, describe(c), i)
		}
	}
	return nil
}

// Format writes a structured key. It does not validate its arguments: use New
// for a checked Key, or validate clientID and nonce with ValidateClientID and
// ValidateNonce.
func Format(clientID string, seq uint64, nonce string) string {
	return clientID + ":" + strconv.FormatUint(seq, 10) + ":" + nonce
}

// New returns the structured Key for clientID, seq and nonce, or a *ParseError
// if clientID or nonce is invalid.
func New(clientID string, seq uint64, nonce string) (Key, error) {
	if err := ValidateClientID(clientID); err != nil {
		return Key{}, err
	}
	if err := ValidateNonce(nonce); err != nil {
		return Key{}, err
	}
	return Key{Raw: Format(clientID, seq, nonce), Structured: true, ClientID: clientID, Sequence: seq, Nonce: nonce}, nil
}

// NewNonce returns a fresh nonce: 8 bytes from crypto/rand in lowercase hex. A
// client draws one each time it starts.
func NewNonce() (string, error) {
	var b [NonceLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("keys: reading random nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Quote writes s as an RFC 8941 sf-string, escaping '"' and '\'. s must hold
// only characters 0x20-0x7E for the result to be a valid sf-string; every valid
// key does.
func Quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// unquote parses v, which begins with '"', as a whole RFC 8941 sf-string
// (section 4.2.5): printable ASCII 0x20-0x7E, with only \" and \\ as escapes,
// and nothing after the closing quote.
func unquote(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) {
				return "", invalid(PartKey, "is a malformed sf-string: it ends inside an escape")
			}
			if v[i] != '"' && v[i] != '\\' {
				return "", invalid(PartKey, "is a malformed sf-string: %s cannot be escaped at offset %d (only \\\" and \\\\ can)", describe(v[i]), i)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", invalid(PartKey, "is a malformed sf-string: characters after the closing quote at offset %d", i+1)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", invalid(PartKey, "is a malformed sf-string: %s at offset %d", describe(c), i)
		default:
			b.WriteByte(c)
		}
	}
	return "", invalid(PartKey, "is a malformed sf-string: missing closing quote")
}

// describe names a byte for an error detail without echoing control or
// non-ASCII bytes raw.
func describe(c byte) string {
	switch {
	case c == ' ':
		return "a space"
	case c < 0x20 || c == 0x7f:
		return fmt.Sprintf("control character 0x%02X", c)
	case c > 0x7f:
		return fmt.Sprintf("non-ASCII byte 0x%02X", c)
	default:
		return strconv.QuoteRune(rune(c))
	}
}
