package jsonescape

import (
	"encoding/json"
	"testing"
)

// AppendString writes what json.Marshal writes for a string, from a string
// or from its bytes.
func TestAppendStringIsJSONMarshal(t *testing.T) {
	for _, s := range []string{
		"", "plain", `quote " backslash \ slash /`, "\b\f\n\r\t\x00\x01\x1f\x7f",
		"<script>&amp;</script>", "line\u2028para\u2029end", "é 日本 🎉",
		"bad \xff byte", "cut \xe6\x97", "\xed\xa0\x80 surrogate", "mixed <\xc3\x28> \u2028",
	} {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Errorf("AppendString(%q) = %s, want %s", s, got, want)
		}
		if got := AppendString([]byte("x"), []byte(s)); string(got) != "x"+string(want) {
			t.Errorf("AppendString of the bytes of %q = %s, want x%s", s, got, want)
		}
	}
}
