package jsonescape

import "unicode/utf8"

// HexDigits are the digits of a \uXXXX escape, lower case as encoding/json
// writes them.
const HexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string exactly as json.Marshal encodes a
// Go string (with its default HTML escaping): the short escapes \", \\, \b,
// \f, \n, \r, \t; \u00XX for the other control characters and for <, > and
// &; \u2028 and \u2029; each byte of invalid UTF-8 as \ufffd; every other
// character as itself. The gate's fingerprint and pkg/api's job encoder
// both write their strings with it.
func AppendString[T ~string | ~[]byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', HexDigits[c>>4], HexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		// The rune at i, read from a copy of at most its bytes on the stack
		// (utf8 decodes a string or a []byte, not either).
		var buf [utf8.UTFMax]byte
		r, size := utf8.DecodeRune(buf[:copy(buf[:], s[i:])])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', HexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
