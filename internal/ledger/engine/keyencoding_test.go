package engine

import (
	"bytes"
	"cmp"
	"strings"
	"testing"
)

// FuzzKeyOrder: the pebble key of two fields sorts as the fields do,
// strings.Compare on the first and then on the second, whatever bytes the
// strings hold (0x00 and 0xFF included), which is what lets every order's
// key encoder stand in for its comparator (the ledger's orders.go).
func FuzzKeyOrder(f *testing.F) {
	for _, s := range [][4]string{
		{"a", "b", "a", "b"},
		{"a\x00", "", "a", "\x00"},
		{"a", "\x00\xff", "a\x00", "\xff"},
		{"", "", "\x00", ""},
		{"tenant", "key\x00\x01", "tenant", "key\x00"},
		{"x\xff", "y", "x", "\xffy"},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, a1, a2, b1, b2 string) {
		ka := AppendString(AppendString(nil, a1), a2)
		kb := AppendString(AppendString(nil, b1), b2)
		want := cmp.Or(strings.Compare(a1, b1), strings.Compare(a2, b2))
		if got := bytes.Compare(ka, kb); got != want {
			t.Fatalf("keys of (%q, %q) and (%q, %q) compare %d, the fields %d", a1, a2, b1, b2, got, want)
		}
		if ref := append(escapeEachByte(nil, a1), escapeEachByte(nil, a2)...); !bytes.Equal(ka, ref) {
			t.Fatalf("key of (%q, %q) is %x, want %x", a1, a2, ka, ref)
		}
	})
}

// escapeEachByte is AppendString's encoding written out byte by byte.
func escapeEachByte(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			b = append(b, 0, 0xFF)
		} else {
			b = append(b, s[i])
		}
	}
	return append(b, 0, 1)
}
