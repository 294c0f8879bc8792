package jsonescape

import "testing"

func TestHex4(t *testing.T) {
	for _, tc := range []struct {
		in   string
		at   int
		want rune
		ok   bool
	}{
		{`\u0061`, 2, 'a', true},
		{`\uD83D`, 2, 0xD83D, true},
		{`\udc00x`, 2, 0xDC00, true},
		{`\u00g1`, 2, 0, false},
		{`\u006`, 2, 0, false},
		{`\u0061`, -1, 0, false},
	} {
		got, ok := Hex4([]byte(tc.in), tc.at)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Hex4(%q, %d) = %q, %v; want %q, %v", tc.in, tc.at, got, ok, tc.want, tc.ok)
		}
	}
}
