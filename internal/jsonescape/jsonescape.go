// Package jsonescape reads and writes the escapes of JSON strings, for the
// code that walks or writes JSON bytes without encoding/json: it reads
// \uXXXX escapes for the scanners (the gate's fingerprint and the API's
// duplicate-member check) and writes a string as json.Marshal does for the
// fingerprint's canonical form and the API's job encoder.
package jsonescape

// Hex4 reads the four hexadecimal digits of a \uXXXX escape starting at
// b[at]: the code unit, and false when there are not four hex digits there.
func Hex4(b []byte, at int) (rune, bool) {
	if at < 0 || at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
