package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/once-dev/once/pkg/api"
)

// FuzzCanonicalize checks that Canonicalize never panics and agrees exactly with
// referenceCanonicalize; that it accepts only
// valid JSON and returns valid, compact JSON with the same meaning that is its
// own canonical form; and that every body api.DecodeJobRequest accepts has a
// canonical form (so the gate never fails to fingerprint a valid request).
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{"type": "send_invoice", "payload": {"order": "ORD-123"}, "datacenters": ["dc1"]}`,
		`{"b":[1,2.0,{"d":null,"c":"\u00e9<>"}],"a":true}`,
		`{"a":1,"a":2}`,
		`["\ud83d\ude00","\ud800"]`,
		`{"type":"t","payload":{"x":1e400}} `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		canon, err := Canonicalize(body)
		ref, refErr := referenceCanonicalize(body)
		if (err == nil) != (refErr == nil) || !bytes.Equal(canon, ref) {
			t.Fatalf("Canonicalize(%q) = %q, %v; the reference gives %q, %v", body, canon, err, ref, refErr)
		}
		_, decodeErr := api.DecodeJobRequest(body, "home")
		if err != nil {
			if !errors.Is(err, ErrInvalidJSON) {
				t.Fatalf("error %v does not match ErrInvalidJSON", err)
			}
			if decodeErr == nil {
				t.Fatalf("DecodeJobRequest accepts %q, but Canonicalize: %v", body, err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("Canonicalize accepted invalid JSON %q", body)
		}
		if !json.Valid(canon) {
			t.Fatalf("Canonicalize(%q) = %q, not valid JSON", body, canon)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, canon); err != nil || !bytes.Equal(compact.Bytes(), canon) {
			t.Fatalf("Canonicalize(%q) = %q, not compact", body, canon)
		}
		again, err := Canonicalize(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", body, canon, again, err)
		}
		v1, err1 := decodeAny(body)
		v2, err2 := decodeAny(canon)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(v1, v2) {
			t.Fatalf("Canonicalize(%q) = %q changed the meaning", body, canon)
		}
	})
}

func decodeAny(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// TestAgreesWithDecodeJobRequest pins the edges where api.DecodeJobRequest and
// Canonicalize must agree: a body the gate accepts always has a fingerprint.
func TestAgreesWithDecodeJobRequest(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{"plain", `{"type":"t","payload":{"b":1,"a":[1,2]}}`, true},
		{"payload at the depth limit", `{"type":"t","payload":` + deep(MaxDepth-1) + `}`, true},
		{"payload over the depth limit", `{"type":"t","payload":` + deep(MaxDepth) + `}`, false},
		{"payload duplicate key", `{"type":"t","payload":{"a":1,"a":1}}`, false},
		{"payload lone surrogate", `{"type":"t","payload":"\udfff"}`, false},
		{"payload surrogate pair", `{"type":"t","payload":"\ud83d\ude00"}`, true},
		{"invalid UTF-8", "{\"type\":\"t\",\"payload\":\"\xc3\"}", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, decErr := api.DecodeJobRequest([]byte(tt.body), "home")
			_, canonErr := Canonicalize([]byte(tt.body))
			if (decErr == nil) != tt.ok || (canonErr == nil) != tt.ok {
				t.Fatalf("DecodeJobRequest: %v; Canonicalize: %v; want ok=%v", decErr, canonErr, tt.ok)
			}
		})
	}
}
