package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestDecodeJobRequestValid(t *testing.T) {
	dcs := func(n int) string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("%q", fmt.Sprintf("dc%d", i))
		}
		return "[" + strings.Join(names, ",") + "]"
	}
	dcList := func(n int) []string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("dc%d", i)
		}
		return names
	}
	tests := []struct {
		name string
		body string
		want JobRequest
	}{
		{"contract example", `{"type": "send_invoice", "payload": {"order": "ORD-123"}, "datacenters": ["dc1"]}`,
			JobRequest{Type: "send_invoice", Payload: json.RawMessage(`{"order":"ORD-123"}`), Datacenters: []string{"dc1"}}},
		{"type only: payload null, default datacenter", `{"type":"t"}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`null`), Datacenters: []string{"home"}}},
		{"explicit null payload", `{"type":"t","payload":null}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`null`), Datacenters: []string{"home"}}},
		{"null datacenters means default", `{"type":"t","datacenters":null}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`null`), Datacenters: []string{"home"}}},
		{"member order does not matter", `{"datacenters":["b","a"],"payload":1,"type":"t"}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`1`), Datacenters: []string{"a", "b"}}},
		{"whitespace everywhere", " \n{ \"type\" :\t\"t\" , \"payload\" : [ 1 , { \"a\" : \"b c\" } ] }\r\n ",
			JobRequest{Type: "t", Payload: json.RawMessage(`[1,{"a":"b c"}]`), Datacenters: []string{"home"}}},
		{"payload scalars", `{"type":"t","payload":"s"}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`"s"`), Datacenters: []string{"home"}}},
		{"payload number literal kept", `{"type":"t","payload":1.50e+3}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`1.50e+3`), Datacenters: []string{"home"}}},
		{"payload member order kept", `{"type":"t","payload":{"b":1,"a":2}}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`{"b":1,"a":2}`), Datacenters: []string{"home"}}},
		{"payload same key in sibling objects", `{"type":"t","payload":[{"a":1},{"a":2}]}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`[{"a":1},{"a":2}]`), Datacenters: []string{"home"}}},
		{"payload surrogate pair", `{"type":"t","payload":"\ud83d\ude00"}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`"\ud83d\ude00"`), Datacenters: []string{"home"}}},
		{"type of every allowed character", `{"type":"AZaz09._-"}`,
			JobRequest{Type: "AZaz09._-", Payload: json.RawMessage(`null`), Datacenters: []string{"home"}}},
		{"type 128 characters", `{"type":"` + strings.Repeat("t", 128) + `"}`,
			JobRequest{Type: strings.Repeat("t", 128), Payload: json.RawMessage(`null`), Datacenters: []string{"home"}}},
		{"type with JSON escape", `{"type":"send\u005finvoice"}`,
			JobRequest{Type: "send_invoice", Payload: json.RawMessage(`null`), Datacenters: []string{"home"}}},
		{"datacenter 64 characters", `{"type":"t","datacenters":["` + strings.Repeat("d", 64) + `"]}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`null`), Datacenters: []string{strings.Repeat("d", 64)}}},
		{"16 datacenters", `{"type":"t","datacenters":` + dcs(16) + `}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`null`), Datacenters: slices.Sorted(slices.Values(dcList(16)))}},
		{"datacenter names are case-sensitive", `{"type":"t","datacenters":["dc1","DC1"]}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`null`), Datacenters: []string{"DC1", "dc1"}}},
		{"datacenters are a set: repeats count once, sorted", `{"type":"t","datacenters":["dc2","dc1","dc2"]}`,
			JobRequest{Type: "t", Payload: json.RawMessage(`null`), Datacenters: []string{"dc1", "dc2"}}},
		{"payload nested to the depth limit", `{"type":"t","payload":` + strings.Repeat("[", MaxJSONDepth-1) + strings.Repeat("]", MaxJSONDepth-1) + `}`,
			JobRequest{Type: "t", Payload: json.RawMessage(strings.Repeat("[", MaxJSONDepth-1) + strings.Repeat("]", MaxJSONDepth-1)), Datacenters: []string{"home"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeJobRequest([]byte(tt.body), "home")
			if err != nil {
				t.Fatalf("DecodeJobRequest(%q): %v", tt.body, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("DecodeJobRequest(%q) =\n  %#v\nwant\n  %#v", tt.body, got, tt.want)
			}
		})
	}
}

func TestDecodeJobRequestInvalid(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		field  string
		detail string // the whole Error() text, or a prefix of it ending in "..."
	}{
		// The body as a whole.
		{"empty body", ``, "", "invalid request: body is not valid JSON: unexpected end of JSON input"},
		{"whitespace body", "  ", "", "invalid request: body is not valid JSON: unexpected end of JSON input"},
		{"not JSON", `type=t`, "", "invalid request: body is not valid JSON: invalid character 'y' in literal true (expecting 'r')"},
		{"array body", `[{"type":"t"}]`, "", "invalid request: body must be a JSON object"},
		{"string body", `"t"`, "", "invalid request: body must be a JSON object"},
		{"null body", `null`, "", "invalid request: body must be a JSON object"},
		{"truncated", `{"type":"t"`, "", "invalid request: body is not valid JSON: unexpected end of JSON input"},
		{"truncated in value", `{"type":"t","payload":{"a":`, "", "invalid request: body is not valid JSON: unexpected end of JSON input"},
		{"trailing comma", `{"type":"t",}`, "", "invalid request: body is not valid JSON: ..."},
		{"missing colon", `{"type" "t"}`, "", "invalid request: body is not valid JSON: ..."},
		{"single quotes", `{'type':'t'}`, "", "invalid request: body is not valid JSON: ..."},
		{"invalid payload", `{"type":"t","payload":{a:1}}`, "", "invalid request: body is not valid JSON: ..."},
		{"trailing object", `{"type":"t"}{}`, "", "invalid request: body has trailing data after the JSON object"},
		{"trailing garbage", `{"type":"t"} x`, "", "invalid request: body has trailing data after the JSON object"},
		{"invalid UTF-8", "{\"type\":\"t\",\"payload\":\"\xff\"}", "", "invalid request: body is not valid UTF-8"},
		{"payload deeper than encoding/json allows", `{"type":"t","payload":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
			"", "invalid request: body is not valid JSON: ..."},

		// Members.
		{"unknown field", `{"type":"t","priority":1}`, "priority",
			`invalid request: field "priority" is not allowed (unknown field; the fields are type, payload and datacenters)`},
		{"field names are case-sensitive", `{"Type":"t"}`, "Type", `invalid request: field "Type" is not allowed ...`},
		{"unknown field before type", `{"x":1,"type":"t"}`, "x", `invalid request: field "x" is not allowed ...`},
		{"long unknown field is cut", `{"` + strings.Repeat("f", 100) + `":1}`, strings.Repeat("f", 100),
			`invalid request: field "` + strings.Repeat("f", 64) + `"... is not allowed ...`},
		{"duplicate type", `{"type":"a","type":"b"}`, "type", `invalid request: field "type" is given more than once`},
		{"duplicate payload", `{"type":"t","payload":1,"payload":1}`, "payload", `invalid request: field "payload" is given more than once`},
		{"duplicate datacenters", `{"type":"t","datacenters":["a"],"datacenters":["a"]}`, "datacenters", `invalid request: field "datacenters" is given more than once`},

		// type.
		{"missing type", `{}`, "type", `invalid request: field "type" is required`},
		{"missing type with payload", `{"payload":{"type":"t"}}`, "type", `invalid request: field "type" is required`},
		{"null type", `{"type":null}`, "type", `invalid request: field "type" must be a string of 1 to 128 characters of A-Z a-z 0-9 . _ -`},
		{"number type", `{"type":1}`, "type", `invalid request: field "type" must be a string of 1 to 128 characters of A-Z a-z 0-9 . _ -`},
		{"empty type", `{"type":""}`, "type", `invalid request: field "type" must be 1 to 128 characters of A-Z a-z 0-9 . _ - (got an empty string)`},
		{"type 129 characters", `{"type":"` + strings.Repeat("t", 129) + `"}`, "type",
			`invalid request: field "type" must be 1 to 128 characters of A-Z a-z 0-9 . _ - (got 129 characters)`},
		{"type with space", `{"type":"send invoice"}`, "type",
			`invalid request: field "type" must be 1 to 128 characters of A-Z a-z 0-9 . _ - (got ' ' at offset 4)`},
		{"type with slash", `{"type":"a/b"}`, "type", `invalid request: field "type" must be 1 to 128 characters of A-Z a-z 0-9 . _ - (got '/' at offset 1)`},
		{"type with colon", `{"type":"a:b"}`, "type", `invalid request: field "type" must be 1 to 128 characters of A-Z a-z 0-9 . _ - (got ':' at offset 1)`},
		{"type non-ASCII", `{"type":"café"}`, "type", `invalid request: field "type" must be 1 to 128 characters of A-Z a-z 0-9 . _ - (got byte 0xC3 at offset 3)`},
		{"type with newline escape", `{"type":"a\nb"}`, "type", `invalid request: field "type" must be 1 to 128 characters of A-Z a-z 0-9 . _ - (got byte 0x0A at offset 1)`},

		// payload.
		{"payload duplicate key", `{"type":"t","payload":{"a":1,"a":2}}`, "payload", `invalid request: field "payload" has a duplicate object key "a"`},
		{"payload nested duplicate key", `{"type":"t","payload":[{"x":{"k":1,"\u006b":2}}]}`, "payload", `invalid request: field "payload" has a duplicate object key "k"`},
		{"payload lone surrogate", `{"type":"t","payload":{"s":"\udc00"}}`, "payload", `invalid request: field "payload" has a lone UTF-16 surrogate \uDC00 at offset 6`},
		{"payload lone high surrogate", `{"type":"t","payload":"x\ud800y"}`, "payload", `invalid request: field "payload" has a lone UTF-16 surrogate \uD800 at offset 2`},
		{"payload too deep", `{"type":"t","payload":` + strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth) + `}`, "payload",
			`invalid request: field "payload" nests deeper than 1000 levels (counting the request object)`},

		// datacenters.
		{"datacenters string", `{"type":"t","datacenters":"dc1"}`, "datacenters", `invalid request: field "datacenters" must be an array of datacenter names`},
		{"datacenters object", `{"type":"t","datacenters":{"dc1":true}}`, "datacenters", `invalid request: field "datacenters" must be an array of datacenter names`},
		{"datacenters empty", `{"type":"t","datacenters":[]}`, "datacenters", `invalid request: field "datacenters" must name at least one datacenter (omit it for the gate's own)`},
		{"17 datacenters", `{"type":"t","datacenters":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}`, "datacenters",
			`invalid request: field "datacenters" must name at most 16 datacenters (got 17)`},
		{"datacenter null element", `{"type":"t","datacenters":[null]}`, "datacenters", `invalid request: field "datacenters" element 0 must be a string`},
		{"datacenter number element", `{"type":"t","datacenters":["dc1",2]}`, "datacenters", `invalid request: field "datacenters" element 1 must be a string`},
		{"datacenter empty", `{"type":"t","datacenters":[""]}`, "datacenters",
			`invalid request: field "datacenters" element 0 must be 1 to 64 characters of a-z A-Z 0-9 . _ - (got an empty string)`},
		{"datacenter 65 characters", `{"type":"t","datacenters":["` + strings.Repeat("d", 65) + `"]}`, "datacenters",
			`invalid request: field "datacenters" element 0 must be 1 to 64 characters of a-z A-Z 0-9 . _ - (got 65 characters)`},
		{"datacenter bad character", `{"type":"t","datacenters":["dc1","dc 2"]}`, "datacenters",
			`invalid request: field "datacenters" element 1 must be 1 to 64 characters of a-z A-Z 0-9 . _ - (got ' ' at offset 2)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeJobRequest([]byte(tt.body), "home")
			if err == nil {
				t.Fatalf("DecodeJobRequest(%q) = %#v, want error", tt.body, got)
			}
			if !reflect.DeepEqual(got, JobRequest{}) {
				t.Errorf("DecodeJobRequest returned %#v with its error, want the zero JobRequest", got)
			}
			if !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("errors.Is(%v, ErrInvalidRequest) = false", err)
			}
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a *RequestError", err)
			}
			if re.Field != tt.field {
				t.Errorf("Field = %q, want %q", re.Field, tt.field)
			}
			msg := err.Error()
			if prefix, ok := strings.CutSuffix(tt.detail, "..."); ok {
				if !strings.HasPrefix(msg, prefix) {
					t.Errorf("Error() =\n  %q\nwant prefix\n  %q", msg, prefix)
				}
			} else if msg != tt.detail {
				t.Errorf("Error() =\n  %q\nwant\n  %q", msg, tt.detail)
			}
		})
	}
}

func TestRequestErrorText(t *testing.T) {
	tests := []struct {
		err  *RequestError
		want string
	}{
		{&RequestError{Field: "type", Reason: "is required"}, `invalid request: field "type" is required`},
		{&RequestError{Reason: "must be a JSON object"}, `invalid request: body must be a JSON object`},
		{&RequestError{Field: "a\nb", Reason: "is not allowed"}, `invalid request: field "a\nb" is not allowed`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if !errors.Is(tt.err, ErrInvalidRequest) {
			t.Errorf("%v does not match ErrInvalidRequest", tt.err)
		}
	}
}

// TestDecodedRequestMarshals checks that a decoded request encodes back to a
// body that decodes to the same request.
func TestDecodedRequestMarshals(t *testing.T) {
	body := `{"type":"send_invoice","payload":{"order":"ORD-123","n":[1,2.50]},"datacenters":["dc1","dc2"]}`
	req, err := DecodeJobRequest([]byte(body), "home")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := DecodeJobRequest(b, "home")
	if err != nil {
		t.Fatalf("DecodeJobRequest(%s): %v", b, err)
	}
	if !reflect.DeepEqual(again, req) {
		t.Fatalf("round trip: %#v != %#v", again, req)
	}
}

// FuzzDecodeJobRequest checks that DecodeJobRequest never panics, that every
// error is a *RequestError matching ErrInvalidRequest, and that a decoded request
// obeys the contract's invariants and survives a marshal/decode round trip.
func FuzzDecodeJobRequest(f *testing.F) {
	// More seeds live in testdata/fuzz/FuzzDecodeJobRequest.
	for _, s := range []string{
		`{"type": "send_invoice", "payload": {"order": "ORD-123"}, "datacenters": ["dc1"]}`,
		`{"type":"t"}`,
		`{"type":"t","payload":[1,{"a":null}],"datacenters":null}`,
		`{"type":"t","type":"t"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const home = "home"
		req, err := DecodeJobRequest(body, home)
		if err != nil {
			var re *RequestError
			if !errors.Is(err, ErrInvalidRequest) || !errors.As(err, &re) {
				t.Fatalf("error %v (%T) is not a *RequestError matching ErrInvalidRequest", err, err)
			}
			if !strings.HasPrefix(err.Error(), "invalid request: ") {
				t.Fatalf("error %q does not start with \"invalid request: \"", err)
			}
			if !reflect.DeepEqual(req, JobRequest{}) {
				t.Fatalf("error %v came with a non-zero request %#v", err, req)
			}
			return
		}
		if validateName(req.Type, MaxTypeLen) != nil {
			t.Fatalf("accepted type %q", req.Type)
		}
		if !json.Valid(req.Payload) {
			t.Fatalf("payload %q is not valid JSON", req.Payload)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, req.Payload); err != nil || !bytes.Equal(compact.Bytes(), req.Payload) {
			t.Fatalf("payload %q is not compact", req.Payload)
		}
		if n := len(req.Datacenters); n < 1 || n > MaxDatacenters {
			t.Fatalf("accepted %d datacenters", n)
		}
		seen := make(map[string]bool)
		for _, dc := range req.Datacenters {
			if dc != home && validateName(dc, MaxDatacenterLen) != nil {
				t.Fatalf("accepted datacenter %q", dc)
			}
			if seen[dc] {
				t.Fatalf("accepted duplicate datacenter %q", dc)
			}
			seen[dc] = true
		}
		// A decoded request, encoded again, decodes to itself.
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("json.Marshal(%#v): %v", req, err)
		}
		again, err := DecodeJobRequest(b, home)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", b, err)
		}
		if again.Type != req.Type || !reflect.DeepEqual(again.Datacenters, req.Datacenters) {
			t.Fatalf("round trip: %#v != %#v", again, req)
		}
		p1, err1 := decodeAny(req.Payload)
		p2, err2 := decodeAny(again.Payload)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(p1, p2) {
			t.Fatalf("round trip changed the payload: %s -> %s", req.Payload, again.Payload)
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

// FuzzCheckJSONValue holds the single-pass payload checker to a slow reference
// built on json.Decoder.Token: on every JSON value encoding/json accepts, both
// accept or both refuse.
func FuzzCheckJSONValue(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[true,false,null,{"a":"x"}]}`,
		`{"b":1,"a":2,"b":3}`,
		`{"\u0061":1,"a":2}`,
		`["\ud83d\ude00","\\ud800"]`,
		`"\udc00"`,
		`[[[[-1.5e+10]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		if !json.Valid(v) {
			return
		}
		got := checkJSONValue(v)
		want := referenceCheck(v)
		if (got == nil) != (want == nil) {
			t.Fatalf("checkJSONValue(%q) = %v; the reference gives %v", v, got, want)
		}
	})
}

func TestCheckJSONValue(t *testing.T) {
	tests := []struct {
		v  string
		ok bool
	}{
		{`{}`, true},
		{` [ ] `, true},
		{`{"a":{"a":{"a":1}}}`, true},
		{`{"b":1,"a":2,"c":{"b":1,"a":2}}`, true},
		{`{"b":1,"a":2,"b":3}`, false},
		{`{"a":1,"\u0061":2}`, false},
		{`{"a\\":1,"a\u005c":2}`, false},
		{`["\\ud800"]`, true},
		{`["\\\ud800"]`, false},
		{`["\ud800\udc00", "\uDBFF\uDFFF"]`, true},
		{`["\ud800\ud800"]`, false},
		{`[1e5, -0.5E-3, true, false, null, ""]`, true},
	}
	for _, tt := range tests {
		if err := checkJSONValue([]byte(tt.v)); (err == nil) != tt.ok {
			t.Errorf("checkJSONValue(%s) = %v, want ok=%v", tt.v, err, tt.ok)
		}
		if err := referenceCheck([]byte(tt.v)); (err == nil) != tt.ok {
			t.Errorf("referenceCheck(%s) = %v, want ok=%v", tt.v, err, tt.ok)
		}
	}
}

// referenceCheck is checkJSONValue written the slow, obvious way.
func referenceCheck(v []byte) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := referenceWalk(dec, 1); err != nil {
		return err
	}
	return checkSurrogates(v, 0)
}

func referenceWalk(dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if depth+1 > MaxJSONDepth {
		return errors.New("too deep")
	}
	keys := map[string]bool{}
	for dec.More() {
		if d == '{' {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			k := tok.(string)
			if keys[k] {
				return errors.New("duplicate key")
			}
			keys[k] = true
		}
		if err := referenceWalk(dec, depth+1); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}
