package keys

import (
	"errors"
	"strings"
	"testing"
)

const nonce = "a1b2c3d4e5f6a7b8"

func TestParseValid(t *testing.T) {
	uuid := "0193a5c8-7d4e-7b2a-9f3c-1e2d3c4b5a69"
	tests := []struct {
		name   string
		header string
		want   Key
	}{
		{"structured", "client-1:42:" + nonce,
			Key{Raw: "client-1:42:" + nonce, Structured: true, ClientID: "client-1", Sequence: 42, Nonce: nonce}},
		{"client_id with colons splits at last two", "host1.dc1:12345:42:" + nonce,
			Key{Raw: "host1.dc1:12345:42:" + nonce, Structured: true, ClientID: "host1.dc1:12345", Sequence: 42, Nonce: nonce}},
		{"client_id of every allowed character", "AZaz09._-@:x:1:" + nonce,
			Key{Raw: "AZaz09._-@:x:1:" + nonce, Structured: true, ClientID: "AZaz09._-@:x", Sequence: 1, Nonce: nonce}},
		{"client_id all colons", ":::0:" + nonce,
			Key{Raw: ":::0:" + nonce, Structured: true, ClientID: "::", Sequence: 0, Nonce: nonce}},
		{"client_id 128 characters", strings.Repeat("c", 128) + ":1:" + nonce,
			Key{Raw: strings.Repeat("c", 128) + ":1:" + nonce, Structured: true, ClientID: strings.Repeat("c", 128), Sequence: 1, Nonce: nonce}},
		{"sequence zero", "c:0:" + nonce,
			Key{Raw: "c:0:" + nonce, Structured: true, ClientID: "c", Sequence: 0, Nonce: nonce}},
		{"sequence max uint64", "c:18446744073709551615:" + nonce,
			Key{Raw: "c:18446744073709551615:" + nonce, Structured: true, ClientID: "c", Sequence: 18446744073709551615, Nonce: nonce}},
		{"sequence leading zeros accepted", "c:007:" + nonce,
			Key{Raw: "c:007:" + nonce, Structured: true, ClientID: "c", Sequence: 7, Nonce: nonce}},
		{"sequence max uint64 with leading zeros", "c:0018446744073709551615:" + nonce,
			Key{Raw: "c:0018446744073709551615:" + nonce, Structured: true, ClientID: "c", Sequence: 18446744073709551615, Nonce: nonce}},
		{"nonce all digits", "c:1:0123456789012345",
			Key{Raw: "c:1:0123456789012345", Structured: true, ClientID: "c", Sequence: 1, Nonce: "0123456789012345"}},
		{"structured sf-string", `"c:1:` + nonce + `"`,
			Key{Raw: "c:1:" + nonce, Structured: true, ClientID: "c", Sequence: 1, Nonce: nonce}},
		{"opaque uuid", uuid, Key{Raw: uuid}},
		{"opaque uuid sf-string", `"` + uuid + `"`, Key{Raw: uuid}},
		{"opaque one character", "x", Key{Raw: "x"}},
		{"opaque one colon", "a:b", Key{Raw: "a:b"}},
		{"opaque lone colon", ":", Key{Raw: ":"}},
		{"opaque one colon with would-be nonce", "42:" + nonce, Key{Raw: "42:" + nonce}},
		{"opaque 255 characters", strings.Repeat("k", 255), Key{Raw: strings.Repeat("k", 255)}},
		{"opaque every visible ASCII", visibleASCII(), Key{Raw: visibleASCII()}},
		{"opaque with inner quote", `ab"c`, Key{Raw: `ab"c`}},
		{"opaque with backslash", `a\b`, Key{Raw: `a\b`}},
		{"sf-string escaped quote", `"a\"b"`, Key{Raw: `a"b`}},
		{"sf-string escaped backslash", `"a\\b"`, Key{Raw: `a\b`}},
		{"sf-string of a leading quote", `"\"abc"`, Key{Raw: `"abc`}},
		{"sf-string opaque 255", `"` + strings.Repeat("k", 255) + `"`, Key{Raw: strings.Repeat("k", 255)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.header)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.header, err)
			}
			if got != tt.want {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.header, got, tt.want)
			}
			again, err := Parse(got.String())
			if err != nil || again != got {
				t.Fatalf("Parse(String()) = %+v, %v; want %+v", again, err, got)
			}
		})
	}
}

func visibleASCII() string {
	var b strings.Builder
	for c := byte(0x21); c <= 0x7e; c++ {
		if c != ':' && c != '"' { // '"' first would start an sf-string
			b.WriteByte(c)
		}
	}
	return b.String()
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		name   string
		header string
		part   Part
		detail string // the whole Error() text
	}{
		// The key as a whole.
		{"empty", "", PartKey, "idempotency key must not be empty"},
		{"empty sf-string", `""`, PartKey, "idempotency key must not be empty"},
		{"opaque 256 characters", strings.Repeat("k", 256), PartKey,
			"idempotency key must be at most 255 characters (got 256)"},
		{"sf-string opaque 256", `"` + strings.Repeat("k", 256) + `"`, PartKey,
			"idempotency key must be at most 255 characters (got 256)"},
		{"opaque space", "a b", PartKey,
			"idempotency key must contain only visible ASCII characters (got a space at offset 1)"},
		{"opaque leading space", " abc", PartKey,
			"idempotency key must contain only visible ASCII characters (got a space at offset 0)"},
		{"opaque tab", "a\tb", PartKey,
			"idempotency key must contain only visible ASCII characters (got control character 0x09 at offset 1)"},
		{"opaque newline", "ab\n", PartKey,
			"idempotency key must contain only visible ASCII characters (got control character 0x0A at offset 2)"},
		{"opaque NUL", "a\x00", PartKey,
			"idempotency key must contain only visible ASCII characters (got control character 0x00 at offset 1)"},
		{"opaque DEL", "a\x7f", PartKey,
			"idempotency key must contain only visible ASCII characters (got control character 0x7F at offset 1)"},
		{"opaque non-ASCII", "café", PartKey,
			"idempotency key must contain only visible ASCII characters (got non-ASCII byte 0xC3 at offset 3)"},
		{"sf-string with space inside", `"a b"`, PartKey,
			"idempotency key must contain only visible ASCII characters (got a space at offset 1)"},
		{"sf-string unterminated", `"abc`, PartKey,
			"idempotency key is a malformed sf-string: missing closing quote"},
		{"lone quote", `"`, PartKey,
			"idempotency key is a malformed sf-string: missing closing quote"},
		{"sf-string trailing data", `"abc"d`, PartKey,
			"idempotency key is a malformed sf-string: characters after the closing quote at offset 5"},
		{"sf-string unescaped inner quote", `"a"b"`, PartKey,
			"idempotency key is a malformed sf-string: characters after the closing quote at offset 3"},
		{"sf-string bad escape", `"a\nb"`, PartKey,
			`idempotency key is a malformed sf-string: 'n' cannot be escaped at offset 3 (only \" and \\ can)`},
		{"sf-string escape at end", `"ab\`, PartKey,
			"idempotency key is a malformed sf-string: it ends inside an escape"},
		{"sf-string control character", "\"a\tb\"", PartKey,
			"idempotency key is a malformed sf-string: control character 0x09 at offset 2"},
		{"sf-string non-ASCII", `"é"`, PartKey,
			"idempotency key is a malformed sf-string: non-ASCII byte 0xC3 at offset 1"},
		{"structured too long with padded sequence", "c:" + strings.Repeat("0", 240) + "1:" + nonce, PartKey,
			"idempotency key must be at most 255 characters (got 260)"},

		// client_id.
		{"client_id empty", ":1:" + nonce, PartClientID, "idempotency key: client_id must not be empty"},
		{"client_id 129 characters", strings.Repeat("c", 129) + ":1:" + nonce, PartClientID,
			"idempotency key: client_id must be at most 128 characters (got 129)"},
		{"client_id 300 characters", strings.Repeat("c", 300) + ":1:" + nonce, PartClientID,
			"idempotency key: client_id must be at most 128 characters (got 300)"},
		{"client_id slash", "a/b:1:" + nonce, PartClientID,
			"idempotency key: client_id must contain only A-Z a-z 0-9 . _ - @ : (got '/' at offset 1)"},
		{"client_id space", "a b:1:" + nonce, PartClientID,
			"idempotency key: client_id must contain only A-Z a-z 0-9 . _ - @ : (got a space at offset 1)"},
		{"client_id non-ASCII", "é:1:" + nonce, PartClientID,
			"idempotency key: client_id must contain only A-Z a-z 0-9 . _ - @ : (got non-ASCII byte 0xC3 at offset 0)"},

		// sequence.
		{"sequence empty", "c::" + nonce, PartSequence, "idempotency key: sequence must not be empty"},
		{"sequence negative", "c:-1:" + nonce, PartSequence,
			"idempotency key: sequence must be a decimal unsigned integer of digits only (got '-' at offset 0)"},
		{"sequence plus", "c:+1:" + nonce, PartSequence,
			"idempotency key: sequence must be a decimal unsigned integer of digits only (got '+' at offset 0)"},
		{"sequence hex", "c:0x1f:" + nonce, PartSequence,
			"idempotency key: sequence must be a decimal unsigned integer of digits only (got 'x' at offset 1)"},
		{"sequence underscore", "c:1_000:" + nonce, PartSequence,
			"idempotency key: sequence must be a decimal unsigned integer of digits only (got '_' at offset 1)"},
		{"sequence space", "c: 1:" + nonce, PartSequence,
			"idempotency key: sequence must be a decimal unsigned integer of digits only (got a space at offset 0)"},
		{"sequence overflow", "c:18446744073709551616:" + nonce, PartSequence,
			"idempotency key: sequence must be at most 18446744073709551615 (an unsigned 64-bit integer)"},
		{"sequence far overflow", "c:99999999999999999999999:" + nonce, PartSequence,
			"idempotency key: sequence must be at most 18446744073709551615 (an unsigned 64-bit integer)"},
		{"two colons, uuid-ish", "a:b:c", PartSequence,
			"idempotency key: sequence must be a decimal unsigned integer of digits only (got 'b' at offset 0)"},

		// nonce.
		{"nonce 15", "c:1:a1b2c3d4e5f6a7b", PartNonce,
			"idempotency key: nonce must be exactly 16 lowercase hex characters (got 15)"},
		{"nonce 17", "c:1:a1b2c3d4e5f6a7b8c", PartNonce,
			"idempotency key: nonce must be exactly 16 lowercase hex characters (got 17)"},
		{"nonce empty", "c:1:", PartNonce,
			"idempotency key: nonce must be exactly 16 lowercase hex characters (got 0)"},
		{"nonce uppercase", "c:1:A1B2C3D4E5F6A7B8", PartNonce,
			"idempotency key: nonce must be exactly 16 lowercase hex characters (got 'A' at offset 0)"},
		{"nonce not hex", "c:1:a1b2c3d4e5f6a7bg", PartNonce,
			"idempotency key: nonce must be exactly 16 lowercase hex characters (got 'g' at offset 15)"},
		{"nonce trailing colon makes it empty", "c:1:" + nonce + ":", PartSequence,
			"idempotency key: sequence must be a decimal unsigned integer of digits only (got 'a' at offset 0)"},
		{"sf-string structured bad nonce", `"c:1:xyz"`, PartNonce,
			"idempotency key: nonce must be exactly 16 lowercase hex characters (got 3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := Parse(tt.header)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want error", tt.header, k)
			}
			if k != (Key{}) {
				t.Errorf("Parse(%q) returned %+v with its error, want the zero Key", tt.header, k)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *ParseError", err)
			}
			if pe.Part != tt.part {
				t.Errorf("Part = %v, want %v", pe.Part, tt.part)
			}
			if got := err.Error(); got != tt.detail {
				t.Errorf("Error() =\n  %q\nwant\n  %q", got, tt.detail)
			}
		})
	}
}

func TestPartString(t *testing.T) {
	tests := []struct {
		p    Part
		want string
	}{
		{PartKey, "key"},
		{PartClientID, "client_id"},
		{PartSequence, "sequence"},
		{PartNonce, "nonce"},
		{Part(9), "Part(9)"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("Part(%d).String() = %q, want %q", int(tt.p), got, tt.want)
		}
	}
}

func TestFormatAndNew(t *testing.T) {
	tests := []struct {
		name     string
		clientID string
		seq      uint64
		nonce    string
		want     string
		wantPart Part // meaningful when wantErr
		wantErr  bool
	}{
		{name: "simple", clientID: "c", seq: 42, nonce: nonce, want: "c:42:" + nonce},
		{name: "colon client", clientID: "host1.dc1:12345", seq: 0, nonce: nonce, want: "host1.dc1:12345:0:" + nonce},
		{name: "max sequence", clientID: "c", seq: 1<<64 - 1, nonce: nonce, want: "c:18446744073709551615:" + nonce},
		{name: "bad client", clientID: "", seq: 1, nonce: nonce, wantErr: true, wantPart: PartClientID},
		{name: "bad nonce", clientID: "c", seq: 1, nonce: "ABCDEFABCDEFABCD", wantErr: true, wantPart: PartNonce},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := New(tt.clientID, tt.seq, tt.nonce)
			if tt.wantErr {
				var pe *ParseError
				if !errors.As(err, &pe) || pe.Part != tt.wantPart || !errors.Is(err, ErrInvalid) {
					t.Fatalf("New: err = %v, want a *ParseError for %v", err, tt.wantPart)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if got := Format(tt.clientID, tt.seq, tt.nonce); got != tt.want {
				t.Errorf("Format = %q, want %q", got, tt.want)
			}
			if k.String() != tt.want {
				t.Errorf("New(...).String() = %q, want %q", k.String(), tt.want)
			}
			parsed, err := Parse(tt.want)
			if err != nil || parsed != k {
				t.Errorf("Parse(%q) = %+v, %v; want %+v", tt.want, parsed, err, k)
			}
		})
	}
}

func TestNewNonce(t *testing.T) {
	seen := make(map[string]bool)
	for range 100 {
		n, err := NewNonce()
		if err != nil {
			t.Fatalf("NewNonce: %v", err)
		}
		if err := ValidateNonce(n); err != nil {
			t.Fatalf("NewNonce() = %q: %v", n, err)
		}
		if seen[n] {
			t.Fatalf("NewNonce repeated %q", n)
		}
		seen[n] = true
	}
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc", `"abc"`},
		{`a"b`, `"a\"b"`},
		{`a\b`, `"a\\b"`},
		{"", `""`},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if tt.in == "" {
			continue
		}
		k, err := Parse(Quote(tt.in))
		if err != nil || k.Raw != tt.in {
			t.Errorf("Parse(Quote(%q)) = %+v, %v", tt.in, k, err)
		}
	}
}

func TestStringQuotesOnlyWhenNeeded(t *testing.T) {
	tests := []struct{ raw, want string }{
		{"abc", "abc"},
		{`a"b`, `a"b`},
		{`"abc`, `"\"abc"`},
		{`"`, `"\""`},
	}
	for _, tt := range tests {
		if got := (Key{Raw: tt.raw}).String(); got != tt.want {
			t.Errorf("Key{Raw: %q}.String() = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func BenchmarkParseStructured(b *testing.B) {
	h := "host1.dc1:12345:42:" + nonce
	for b.Loop() {
		if _, err := Parse(h); err != nil {
			b.Fatal(err)
		}
	}
}
