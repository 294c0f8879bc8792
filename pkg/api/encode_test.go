package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// checkAppendJSON fails t unless j.AppendJSON gives, after a prefix it keeps,
// exactly what json.Marshal(j) gives, or fails where json.Marshal fails.
func checkAppendJSON(t *testing.T, j *Job) {
	t.Helper()
	want, wantErr := json.Marshal(j)
	prefix := []byte("prefix:")
	got, err := j.AppendJSON(prefix[:len(prefix):len(prefix)])
	if wantErr != nil {
		var re *RawJSONError
		if err == nil || !errors.Is(err, ErrInvalidRawJSON) || !errors.As(err, &re) {
			t.Fatalf("json.Marshal(%#v) failed (%v); AppendJSON gave %q, error %v", j, wantErr, got, err)
		}
		var se *json.SyntaxError
		if !errors.As(err, &se) {
			t.Fatalf("AppendJSON's error %v does not wrap a *json.SyntaxError", err)
		}
		if re.Member != "payload" && re.Member != "result" {
			t.Fatalf("AppendJSON's error names member %q", re.Member)
		}
		if string(got) != string(prefix) {
			t.Fatalf("AppendJSON failed and gave %q, not the prefix %q", got, prefix)
		}
		return
	}
	if err != nil {
		t.Fatalf("AppendJSON(%#v) failed: %v; json.Marshal gave %s", j, err, want)
	}
	if !bytes.HasPrefix(got, prefix) {
		t.Fatalf("AppendJSON lost the prefix: %q", got)
	}
	if got := got[len(prefix):]; !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON(%#v)\n got %s\nwant %s", j, got, want)
	}
}

func TestJobAppendJSON(t *testing.T) {
	awkward := "a<b>&c\"d\\e/\x00\x01\x1f\x7f\b\f\n\r\t \u2028\u2029\xff\xe2\x80\xc3\x28é😀\ufffd\ud7ff"
	full := Job{
		JobID: "job_1", Type: "send_invoice", Status: "committed", IdempotencyKey: "k-1",
		CreatedAt:   "2026-01-02T03:04:05.123456789Z",
		Datacenters: map[string]DatacenterStatus{"dc2": {Status: "rejected", Reason: "quota"}, "dc1": {Status: "committed"}},
		Payload:     json.RawMessage(`{"order":"ORD-123","n":[1,2.5e3,-0,true,false,null]}`),
		State:       "succeeded", Attempts: 3, Result: json.RawMessage(`"ok"`), Error: "boom",
		NamedDatacenters: []string{"dc1", "dc2"},
	}
	many := map[string]DatacenterStatus{}
	for i := range 40 { // more than MaxDatacenters: the keys leave the stack
		many[fmt.Sprintf("dc%02d", 39-i)] = DatacenterStatus{Status: "committed"}
	}
	tests := []struct {
		name string
		job  *Job
	}{
		{"nil job", nil},
		{"zero", &Job{}},
		{"full", &full},
		{"admission", func() *Job { j := full.Admission(); return &j }()},
		{"awkward strings", &Job{JobID: awkward, Type: awkward, Status: awkward, IdempotencyKey: awkward,
			CreatedAt: awkward, State: awkward, Error: awkward, NamedDatacenters: []string{awkward, "", awkward},
			Datacenters: map[string]DatacenterStatus{awkward: {Status: awkward, Reason: awkward}, "": {}}}},
		{"invalid UTF-8 keys that escape alike", &Job{Datacenters: map[string]DatacenterStatus{
			"\xff": {Status: "a"}, "\xfe": {Status: "b"}, "\xfe\xff": {}, "a\x80": {}, "a": {}}}},
		{"empty datacenters", &Job{Datacenters: map[string]DatacenterStatus{}}},
		{"many datacenters", &Job{Datacenters: many}},
		{"empty named datacenters", &Job{NamedDatacenters: []string{}}},
		{"negative attempts", &Job{Attempts: -7}},
		{"large attempts", &Job{Attempts: 1 << 62}},
		{"empty result", &Job{Result: json.RawMessage{}}},
		{"null payload", &Job{Payload: json.RawMessage("null")}},
		{"spaced payload", &Job{Payload: json.RawMessage(" \t\r\n{ \"a\" : [ 1 , \"x y\\\" <&> \" ] , \"b\":{ } }\n ")}},
		{"raw HTML and separators", &Job{Payload: json.RawMessage("\"<\u2028\u2029\xe2\x80\xa8\xe2\x80&>\""),
			Result: json.RawMessage(`["\u2028", "\\", "\"", "\\\"<"]`)}},
		{"raw invalid UTF-8 in a string", &Job{Payload: json.RawMessage("\"\xff\xe2\x80\"")}},
		{"raw number", &Job{Payload: json.RawMessage(" -1.5e+10 "), Result: json.RawMessage("0")}},
		{"invalid payload", &Job{Payload: json.RawMessage(`{"a":`)}},
		{"empty payload", &Job{Payload: json.RawMessage{}}},
		{"payload of two values", &Job{Payload: json.RawMessage(`1 2`)}},
		{"invalid result", &Job{Payload: json.RawMessage(`{}`), Result: json.RawMessage(`nul`)}},
		{"whitespace result", &Job{Result: json.RawMessage(` `)}},
		{"invalid payload, HTML in it", &Job{Payload: json.RawMessage(`"<" x`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkAppendJSON(t, tc.job) })
	}
}

func FuzzJobAppendJSON(f *testing.F) {
	f.Add("job_1", "send_invoice", "committed", "k-1", "2026-01-02T03:04:05Z", uint8(2), "dc1", "dc2", "rejected", "quota",
		[]byte(`{"order": "ORD-123"}`), false, "succeeded", 3, []byte(`"ok"`), "boom", "dc1")
	f.Add("<&>", "\u2028", "\xff", "\x00\n", "\"\\", uint8(1), "\xfe", "\xff", "", "",
		[]byte(" [ \"<\u2029>\" , 1 ] "), false, "", 0, []byte(nil), "", "")
	f.Add("", "", "", "", "", uint8(0), "", "", "", "", []byte(nil), true, "", -1, []byte(`{`), "\x7f", "")
	f.Add("", "", "", "", "", uint8(3), "a", "a", "s", "", []byte(`{"a":`), false, "", 0, []byte(` `), "", "\xe2\x80")
	f.Fuzz(func(t *testing.T, jobID, typ, status, key, createdAt string, dcMode uint8, dc1, dc2, st, reason string,
		payload []byte, payloadNil bool, state string, attempts int, result []byte, errText, named string) {
		j := &Job{JobID: jobID, Type: typ, Status: status, IdempotencyKey: key, CreatedAt: createdAt,
			Payload: payload, State: state, Attempts: attempts, Result: result, Error: errText}
		if payloadNil {
			j.Payload = nil
		}
		switch dcMode % 4 {
		case 0: // nil
		case 1:
			j.Datacenters = map[string]DatacenterStatus{}
		case 2:
			j.Datacenters = map[string]DatacenterStatus{dc1: {Status: st, Reason: reason}}
		case 3:
			j.Datacenters = map[string]DatacenterStatus{dc1: {Status: st}, dc2: {Status: reason, Reason: st},
				dc1 + dc2: {Reason: reason}}
		}
		if named != "" {
			j.NamedDatacenters = strings.Split(named, ",")
		}
		checkAppendJSON(t, j)
	})
}

func benchJob() *Job {
	return &Job{
		JobID: "j_0123456789abcdef0123456789abcdef", Type: "send_invoice", Status: "committed",
		IdempotencyKey: "client-7:000000000042:3f9a", CreatedAt: "2026-01-02T03:04:05.123456789Z",
		Datacenters: map[string]DatacenterStatus{"dc2": {Status: "committed"}, "dc1": {Status: "committed"}},
		Payload:     json.RawMessage(`{"order":"ORD-123","lines":[{"sku":"A&B","qty":2},{"sku":"<C>","qty":1}],"note":"rush"}`),
	}
}

// benchSink keeps the benchmarks' answers on the heap, as the gate's are.
var benchSink []byte

// BenchmarkJobAppendJSON and BenchmarkJobMarshal count what rendering an
// admission answer allocates each way (-benchmem).
func BenchmarkJobAppendJSON(b *testing.B) {
	j := benchJob()
	b.ReportAllocs()
	for b.Loop() {
		out, err := j.AppendJSON(make([]byte, 0, 512))
		if err != nil {
			b.Fatal(err)
		}
		benchSink = out
	}
}

func BenchmarkJobMarshal(b *testing.B) {
	j := benchJob()
	b.ReportAllocs()
	for b.Loop() {
		out, err := json.Marshal(j)
		if err != nil {
			b.Fatal(err)
		}
		benchSink = out
	}
}
