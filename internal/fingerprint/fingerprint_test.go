package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"job request", `{"type": "send_invoice", "payload": {"order": "ORD-123"}, "datacenters": ["dc1"]}`,
			`{"datacenters":["dc1"],"payload":{"order":"ORD-123"},"type":"send_invoice"}`},
		{"sorted keys and no whitespace", " {\n\t\"b\" : 1 ,\r\n \"a\" : 2 }\n ", `{"a":2,"b":1}`},
		{"nested objects and arrays", `{"z":[{"y":1,"x":[3,2,1]},[],{}],"a":{"c":{"e":null,"d":true}}}`,
			`{"a":{"c":{"d":true,"e":null}},"z":[{"x":[3,2,1],"y":1},[],{}]}`},
		{"array order is kept", `[3, 1, 2]`, `[3,1,2]`},
		{"keys sort by bytes", `{"b":0,"B":0,"a":0,"é":0,"A":0,"":0,"aa":0}`, `{"":0,"A":0,"B":0,"a":0,"aa":0,"b":0,"é":0}`},
		{"numbers keep their text", `[1, 1.0, 1e0, 1E+0, -0, 0.10, 123456789012345678901234567890, 1e400]`,
			`[1,1.0,1e0,1E+0,-0,0.10,123456789012345678901234567890,1e400]`},
		{"escapes are normalized", `["\u0061\/\b\f\n\r\t\"\\"]`, `["a/\b\f\n\r\t\"\\"]`},
		{"html escaped like encoding/json", `["<a>&</a>"]`, `["\u003ca\u003e\u0026\u003c/a\u003e"]`},
		{"control characters escaped", "[\"\\u0001\\u001f\"]", `["\u0001\u001f"]`},
		{"non-ASCII kept as UTF-8", `["caf\u00e9", "café", "😀", "\ud83d\ude00"]`, `["café","café","😀","😀"]`},
		{"line separators escaped", `["\u2028\u2029"]`, `["\u2028\u2029"]`},
		{"scalars at top level", ` "x" `, `"x"`},
		{"top-level number", `42`, `42`},
		{"top-level null", `null`, `null`},
		{"booleans", `[true,false]`, `[true,false]`},
		{"escaped keys are sorted unescaped", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{"same key in different objects", `[{"a":1},{"a":2}]`, `[{"a":1},{"a":2}]`},
		{"nested depth at the limit", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
			strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonicalize(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Fatalf("Canonicalize(%q) =\n  %s\nwant\n  %s", tt.in, got, tt.want)
			}
			again, err := Canonicalize(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("Canonicalize is not idempotent: %s -> %s, %v", got, again, err)
			}
			if ref, err := referenceCanonicalize([]byte(tt.in)); err != nil || !bytes.Equal(ref, got) {
				t.Fatalf("reference gives %s, %v", ref, err)
			}
		})
	}
}

func TestCanonicalizeInvalid(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // a fragment of the error text
	}{
		{"empty", ``, "unexpected end of JSON input"},
		{"whitespace only", " \n", "unexpected end of JSON input"},
		{"truncated object", `{"a":1`, "unexpected end of JSON input"},
		{"truncated array", `[1,`, "unexpected end of JSON input"},
		{"truncated string", `["ab`, "unexpected end of JSON input"},
		{"bad escape", `["\x"]`, "invalid character 'x' in string escape code"},
		{"raw control character in string", "[\"a\tb\"]", "invalid character '\\t' in string literal"},
		{"trailing comma in array", `[1,]`, "invalid"},
		{"trailing comma in object", `{"a":1,}`, "invalid"},
		{"missing colon", `{"a" 1}`, "invalid"},
		{"missing comma", `[1 2]`, "invalid"},
		{"non-string key", `{1:2}`, "invalid"},
		{"bare word", `nope`, "invalid"},
		{"single quotes", `{'a':1}`, "invalid"},
		{"leading zero", `[01]`, "invalid"},
		{"NaN", `[NaN]`, "invalid"},
		{"trailing value", `{} {}`, "invalid character '{' after top-level value"},
		{"trailing garbage", `{"a":1} x`, "invalid character 'x' after top-level value"},
		{"duplicate key", `{"a":1,"a":2}`, `duplicate object key "a"`},
		{"duplicate key same value", `{"a":1,"a":1}`, `duplicate object key "a"`},
		{"duplicate key after unescaping", `{"a":1,"\u0061":2}`, `duplicate object key "a"`},
		{"nested duplicate key", `{"p":[{"x":{"k":1,"k":2}}]}`, `duplicate object key "k"`},
		{"invalid UTF-8", "[\"\xff\"]", "not valid UTF-8"},
		{"invalid UTF-8 outside string", "[1]\xff", "not valid UTF-8"},
		{"lone high surrogate", `["\ud800"]`, `lone UTF-16 surrogate \uD800`},
		{"lone low surrogate", `["\udc00"]`, `lone UTF-16 surrogate \uDC00`},
		{"reversed pair", `["\udc00\ud800"]`, `lone UTF-16 surrogate \uDC00`},
		{"high then non-surrogate", `["\ud800\u0041"]`, `lone UTF-16 surrogate \uD800`},
		{"lone surrogate in key", `{"\ud800":1}`, `lone UTF-16 surrogate`},
		{"too deep", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), "nesting deeper than 1000 levels"},
		{"too deep objects", strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1), "nesting deeper than 1000 levels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tt.in))
			if err == nil {
				t.Fatalf("Canonicalize(%q) = %s, want error", tt.in, got)
			}
			if !errors.Is(err, ErrInvalidJSON) {
				t.Errorf("errors.Is(%v, ErrInvalidJSON) = false", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if ref, err := referenceCanonicalize([]byte(tt.in)); err == nil {
				t.Errorf("the reference accepts it: %s", ref)
			}
		})
	}
}

// TestCanonicalizeAgreesWithEncodingJSON checks that for bodies without
// duplicate keys and with integral numbers the canonical form is what
// json.Marshal produces for the decoded value (sorted map keys, compact,
// HTML-escaped strings).
func TestCanonicalizeAgreesWithEncodingJSON(t *testing.T) {
	bodies := []string{
		`{"type":"send_invoice","payload":{"order":"ORD-123","lines":[{"sku":"A","n":2},{"sku":"<B>","n":1}]},"datacenters":["dc1","dc2"]}`,
		`{"z":"\u2028","y":"\u00e9\t","x":[null,true,false,{}],"w":{"b":{"d":1,"c":2},"a":[]}}`,
		`[{"k":"v"}, "s", 0, -12, null]`,
	}
	for _, b := range bodies {
		var v any
		dec := json.NewDecoder(strings.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Canonicalize([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Canonicalize(%s) =\n  %s\njson.Marshal gives\n  %s", b, got, want)
		}
	}
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func mustCanon(t testing.TB, s string) []byte {
	t.Helper()
	c, err := Canonicalize([]byte(s))
	if err != nil {
		t.Fatalf("Canonicalize(%q): %v", s, err)
	}
	return c
}

func TestFingerprintInvariance(t *testing.T) {
	base := Fingerprint("acme", "POST", "/v1/jobs", mustCanon(t,
		`{"type":"send_invoice","payload":{"order":"ORD-123","n":[1,2]},"datacenters":["dc1"]}`))
	if !hexSHA256.MatchString(base) {
		t.Fatalf("Fingerprint = %q, want 64 lowercase hex characters", base)
	}
	same := []string{
		`{"datacenters":["dc1"],"payload":{"n":[1,2],"order":"ORD-123"},"type":"send_invoice"}`,
		"{\n  \"payload\" : { \"n\" : [ 1 , 2 ] , \"order\" : \"ORD-123\" },\n  \"type\" : \"send_invoice\",\n  \"datacenters\" : [ \"dc1\" ]\n}\n",
		`{"type":"send\u005finvoice","payload":{"order":"ORD\u002d123","n":[1,2]},"datacenters":["dc1"]}`,
	}
	for _, s := range same {
		if got := Fingerprint("acme", "POST", "/v1/jobs", mustCanon(t, s)); got != base {
			t.Errorf("Fingerprint of %q = %s, want %s", s, got, base)
		}
	}
}

func TestFingerprintDiffers(t *testing.T) {
	body := `{"type":"t","payload":{"a":1}}`
	type input struct{ tenant, method, path, body string }
	base := input{"acme", "POST", "/v1/jobs", body}
	tests := []struct {
		name string
		in   input
	}{
		{"tenant", input{"other", "POST", "/v1/jobs", body}},
		{"method", input{"acme", "PUT", "/v1/jobs", body}},
		{"path", input{"acme", "POST", "/v1/jobs/", body}},
		{"value", input{"acme", "POST", "/v1/jobs", `{"type":"t","payload":{"a":2}}`}},
		{"number text", input{"acme", "POST", "/v1/jobs", `{"type":"t","payload":{"a":1.0}}`}},
		{"number vs string", input{"acme", "POST", "/v1/jobs", `{"type":"t","payload":{"a":"1"}}`}},
		{"nested key", input{"acme", "POST", "/v1/jobs", `{"type":"t","payload":{"b":1}}`}},
		{"array order", input{"acme", "POST", "/v1/jobs", `{"type":"t","payload":[1,2]}`}},
		{"added field", input{"acme", "POST", "/v1/jobs", `{"type":"t","payload":{"a":1},"datacenters":["dc1"]}`}},
		// Length prefixes keep part boundaries: "ab"+"c" is not "a"+"bc".
		{"tenant/method boundary", input{"acmeP", "OST", "/v1/jobs", body}},
		{"method/path boundary", input{"acme", "POST/", "v1/jobs", body}},
		{"empty tenant", input{"", "POST", "/v1/jobs", body}},
	}
	fp := func(in input) string {
		return Fingerprint(in.tenant, in.method, in.path, mustCanon(t, in.body))
	}
	want := fp(base)
	seen := map[string]string{want: "base"}
	for _, tt := range tests {
		got := fp(tt.in)
		if got == want {
			t.Errorf("%s: fingerprint equals the base fingerprint", tt.name)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("%s: fingerprint equals that of %s", tt.name, prev)
		}
		seen[got] = tt.name
	}
}

func TestFingerprintPinned(t *testing.T) {
	// Pins the encoding: a change here changes every stored fingerprint, which
	// would make in-flight retries across an upgrade look like key reuse. The
	// value was computed independently:
	//   h = sha256(); for p in parts: h.update(len(p) as 8-byte big-endian); h.update(p)
	got := Fingerprint("default", "POST", "/v1/jobs", []byte(`{"type":"t"}`))
	const want = "c24c5a70d8c64f571a83ba88c62d3a8565974acd3a4f26fd1059a7e588604dc0"
	if got != want {
		t.Fatalf("Fingerprint = %s, want %s", got, want)
	}
	// A body too long to be hashed from one buffer is streamed, to the same
	// encoding.
	long := []byte(`{"pad":"` + strings.Repeat("x", 600) + `"}`)
	if got, want := Fingerprint("default", "POST", "/v1/jobs", long), "9116ec01df83e476b3254537cd45bd6eb57d0f6e2daf99c3b32774dfd8d8a040"; got != want {
		t.Fatalf("Fingerprint of a %d-byte body = %s, want %s", len(long), got, want)
	}
	if n := testing.AllocsPerRun(100, func() { _ = Fingerprint("default", "POST", "/v1/jobs", []byte(`{"type":"t"}`)) }); n > 1 {
		t.Fatalf("Fingerprint allocates %v times, want 1 (the string)", n)
	}
}

func BenchmarkCanonicalize(b *testing.B) {
	for _, n := range []int{1, 100, 5000} {
		body := benchBody(n)
		b.Run(fmt.Sprintf("items=%d/bytes=%d", n, len(body)), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Canonicalize(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFingerprint(b *testing.B) {
	canon := mustCanon(b, string(benchBody(100)))
	b.SetBytes(int64(len(canon)))
	b.ReportAllocs()
	for b.Loop() {
		Fingerprint("tenant-a", "POST", "/v1/jobs", canon)
	}
}

func benchBody(items int) []byte {
	var b strings.Builder
	b.WriteString(`{"type":"send_invoice","datacenters":["dc1","dc2"],"payload":{"order":"ORD-123","lines":[`)
	for i := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%d","qty":%d,"price":%d.99,"note":"line <%d> & more","tags":["a","b"]}`, i, i%7, i, i)
	}
	b.WriteString(`]}}`)
	return []byte(b.String())
}

// BenchmarkReferenceCanonicalize measures the json.Decoder.Token-based reference
// implementation, for comparison with BenchmarkCanonicalize.
func BenchmarkReferenceCanonicalize(b *testing.B) {
	body := benchBody(100)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := referenceCanonicalize(body); err != nil {
			b.Fatal(err)
		}
	}
}
