package gate

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/once-dev/once/internal/fingerprint"
	"github.com/once-dev/once/pkg/api"
)

var canonicalValid = []string{
	invoiceBody,
	`{"type":"demo"}`,
	`{"type":"a.b_c-D9","payload":null}`,
	`{ "payload" : {"z":[1,{"y":"\u0041\"]}"}],"a":"<&>"} , "type":"demo" }`,
	`{"type":"demo","datacenters":["dc1"],"payload":"x,]}"}`,
	`{"type":"demo","datacenters":null,"payload":[]}`,
	`{"datacenters":["dc2","dc1","dc-3"],"type":"t","payload":1.50e3}`,
	`{"type":"demo","datacenters":["dc1","dc1"]}`,
	`{"type":"demo","datacenters":["dc2","dc1","dc2"]}`,
}

var canonicalInvalid = []string{
	`{}`,
	`{"type":""}`,
	`{"type":"a b"}`,
	`{"type":"demo","extra":1}`,
	`{"type":"demo","datacenters":[]}`,
	`{"type":"demo","datacenters":[1]}`,
	`{"type":"demo","datacenters":"dc1"}`,
	`{"type":"demo","datacenters":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}`,
	`{"type":1}`,
	`{"type":"\u00e9"}`,
	`[]`,
	`"type"`,
	`null`,
}

// checkCanonical asserts decodeCanonical agrees with api.DecodeJobRequest on
// the canonical form of body; it reports whether the fast path answered.
func checkCanonical(t *testing.T, body string) bool {
	t.Helper()
	canonical, err := fingerprint.Canonicalize([]byte(body))
	if err != nil {
		return false
	}
	got, ok := decodeCanonical(canonical, "home")
	want, werr := api.DecodeJobRequest(canonical, "home")
	if !ok {
		return false
	}
	if werr != nil {
		t.Fatalf("%s: decodeCanonical accepted what DecodeJobRequest refuses: %v", body, werr)
	}
	if got.Type != want.Type || !bytes.Equal(got.Payload, want.Payload) || !reflect.DeepEqual(got.Datacenters, want.Datacenters) {
		t.Fatalf("%s:\n got %+v\nwant %+v", body, got, want)
	}
	return true
}

func TestDecodeCanonicalMatchesDecodeJobRequest(t *testing.T) {
	for _, b := range canonicalValid {
		if !checkCanonical(t, b) {
			t.Fatalf("%s: the fast path refused a valid body", b)
		}
	}
	for _, b := range canonicalInvalid {
		if checkCanonical(t, b) {
			t.Fatalf("%s: the fast path accepted an invalid body", b)
		}
	}
}

func FuzzDecodeCanonical(f *testing.F) {
	for _, b := range append(canonicalValid, canonicalInvalid...) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body string) {
		checkCanonical(t, body)
		if canonical, err := fingerprint.Canonicalize([]byte(body)); err == nil {
			if fast, slow := normalizeDatacenters(canonical, "home"), normalizeDatacentersSlow(canonical, "home"); !bytes.Equal(fast, slow) {
				t.Fatalf("%s: normalized fast %s, slow %s", body, fast, slow)
			}
		}
	})
}

// BenchmarkDecodeRequest compares the decoding of a canonical body on the miss
// path: decodeCanonical against api.DecodeJobRequest, which it replaces for
// valid bodies.
func BenchmarkDecodeRequest(b *testing.B) {
	canonical, err := fingerprint.Canonicalize([]byte(invoiceBody))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decodeCanonical", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeCanonical(canonical, "dc1"); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("DecodeJobRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := api.DecodeJobRequest(canonical, "dc1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestNormalizeDatacentersFastMatchesSlow: the in-place rewrite of the
// datacenters member gives exactly the bytes of decoding and re-encoding.
func TestNormalizeDatacentersFastMatchesSlow(t *testing.T) {
	bodies := append(append([]string{
		`{"payload":1,"type":"demo"}`,
		`{"datacenters":["home"],"type":"demo"}`,
		`{"datacenters":["dc2","dc1"],"payload":{"datacenters":["x"]},"type":"demo"}`,
	}, canonicalValid...), canonicalInvalid...)
	for _, b := range bodies {
		canonical, err := fingerprint.Canonicalize([]byte(b))
		if err != nil {
			continue
		}
		fast, slow := normalizeDatacenters(canonical, "home"), normalizeDatacentersSlow(canonical, "home")
		if !bytes.Equal(fast, slow) {
			t.Fatalf("%s:\n fast %s\n slow %s", b, fast, slow)
		}
	}
}
