package gate

import (
	"bytes"
	"encoding/json"
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

// checkCanonical asserts decodeMembers agrees with api.DecodeJobRequest on
// the canonical form of body, and fingerprintBody with the reference
// (decoding and re-encoding); it reports whether the fast path answered.
func checkCanonical(t *testing.T, body string) bool {
	t.Helper()
	canonical, members, err := fingerprint.CanonicalizeObject([]byte(body))
	if err != nil {
		return false
	}
	want, werr := api.DecodeJobRequest(canonical, "home")
	if werr == nil {
		for _, federated := range []bool{false, true} {
			got, claimed := fingerprintBody(canonical, members, want, federated)
			ref, refClaimed := referenceFingerprintBody(t, canonical, federated)
			if !bytes.Equal(got, ref) || claimed != refClaimed {
				t.Fatalf("%s (federated %v): fingerprint body %s (claimed %v), the reference %s (%v)", body, federated, got, claimed, ref, refClaimed)
			}
		}
	}
	got, ok := decodeMembers(members, "home")
	if !ok {
		return false
	}
	if werr != nil {
		t.Fatalf("%s: decodeMembers accepted what DecodeJobRequest refuses: %v", body, werr)
	}
	if got.Type != want.Type || !bytes.Equal(got.Payload, want.Payload) || !reflect.DeepEqual(got.Datacenters, want.Datacenters) {
		t.Fatalf("%s:\n got %+v\nwant %+v", body, got, want)
	}
	return true
}

// referenceFingerprintBody is fingerprintBody the slow way, decoding and
// re-encoding the body with encoding/json.
func referenceFingerprintBody(t *testing.T, canonical []byte, federated bool) ([]byte, bool) {
	t.Helper()
	job, err := api.DecodeJobRequest(canonical, "home")
	if err != nil {
		t.Fatal(err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(canonical, &members); err != nil {
		t.Fatal(err)
	}
	dcs, omitted := members["datacenters"]
	omitted = !omitted || string(dcs) == "null"
	claimed := omitted && federated
	if claimed {
		delete(members, "datacenters")
	} else if members["datacenters"], err = json.Marshal(job.Datacenters); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(members)
	if err != nil {
		t.Fatal(err)
	}
	out, err := fingerprint.Canonicalize(b)
	if err != nil {
		t.Fatal(err)
	}
	return out, claimed
}

func TestDecodeMembersMatchesDecodeJobRequest(t *testing.T) {
	for _, b := range append([]string{
		`{"payload":1,"type":"demo"}`,
		`{"datacenters":["home"],"type":"demo"}`,
		`{"datacenters":["dc2","dc1"],"payload":{"datacenters":["x"]},"type":"demo"}`,
	}, canonicalValid...) {
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

func FuzzDecodeMembers(f *testing.F) {
	for _, b := range append(canonicalValid, canonicalInvalid...) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body string) {
		checkCanonical(t, body)
	})
}

// BenchmarkDecodeRequest compares the decoding of a canonical body on the miss
// path: decodeMembers against api.DecodeJobRequest, which it replaces for
// valid bodies.
func BenchmarkDecodeRequest(b *testing.B) {
	canonical, members, err := fingerprint.CanonicalizeObject([]byte(invoiceBody))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decodeMembers", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeMembers(members, "dc1"); !ok {
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
