package keys

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that every error is a *ParseError
// matching ErrInvalid, and that a parsed key obeys the format and round-trips
// through String.
func FuzzParse(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzParse.
	for _, s := range []string{
		"c:1:" + nonce,
		"0193a5c8-7d4e-7b2a-9f3c-1e2d3c4b5a69",
		`"a\"b"`,
		"a:b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		k, err := Parse(header)
		if err != nil {
			var pe *ParseError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &pe) {
				t.Fatalf("Parse(%q): error %v (%T) is not a *ParseError matching ErrInvalid", header, err, err)
			}
			if !strings.HasPrefix(err.Error(), "idempotency key") {
				t.Fatalf("Parse(%q): error %q does not start with \"idempotency key\"", header, err)
			}
			return
		}
		checkKey(t, header, k)
		again, err := Parse(k.String())
		if err != nil {
			t.Fatalf("Parse(%q) = %+v, but Parse(String() = %q): %v", header, k, k.String(), err)
		}
		if again != k {
			t.Fatalf("round trip of %q: %+v != %+v", header, again, k)
		}
		if !strings.HasPrefix(header, `"`) && header != k.Raw {
			t.Fatalf("bare header %q parsed to Raw %q", header, k.Raw)
		}
		if strings.HasPrefix(header, `"`) && Quote(k.Raw) != header {
			t.Fatalf("sf-string %q is not Quote(Raw %q)", header, k.Raw)
		}
	})
}

// checkKey asserts the invariants of a successfully parsed key.
func checkKey(t *testing.T, header string, k Key) {
	t.Helper()
	if k.Raw == "" || len(k.Raw) > MaxLen {
		t.Fatalf("Parse(%q): Raw %q has length %d", header, k.Raw, len(k.Raw))
	}
	for i := 0; i < len(k.Raw); i++ {
		if c := k.Raw[i]; c < 0x21 || c > 0x7e {
			t.Fatalf("Parse(%q): Raw %q has byte 0x%02X", header, k.Raw, c)
		}
	}
	colons := strings.Count(k.Raw, ":")
	if !k.Structured {
		if colons >= 2 {
			t.Fatalf("Parse(%q): opaque Raw %q has %d colons", header, k.Raw, colons)
		}
		if k.ClientID != "" || k.Sequence != 0 || k.Nonce != "" {
			t.Fatalf("Parse(%q): opaque key %+v has structured fields", header, k)
		}
		return
	}
	if ValidateClientID(k.ClientID) != nil || ValidateNonce(k.Nonce) != nil {
		t.Fatalf("Parse(%q): structured key %+v has invalid parts", header, k)
	}
	prefix, suffix := k.ClientID+":", ":"+k.Nonce
	if !strings.HasPrefix(k.Raw, prefix) || !strings.HasSuffix(k.Raw, suffix) || len(k.Raw) < len(prefix)+len(suffix) {
		t.Fatalf("Parse(%q): Raw %q is not %q + sequence + %q", header, k.Raw, prefix, suffix)
	}
	seqText := k.Raw[len(prefix) : len(k.Raw)-len(suffix)]
	if n, err := strconv.ParseUint(seqText, 10, 64); err != nil || n != k.Sequence {
		t.Fatalf("Parse(%q): sequence text %q, parsed %d", header, seqText, k.Sequence)
	}
	if strings.TrimLeft(seqText, "0") == strconv.FormatUint(k.Sequence, 10) || k.Sequence == 0 {
		return
	}
	t.Fatalf("Parse(%q): sequence text %q does not spell %d", header, seqText, k.Sequence)
}
