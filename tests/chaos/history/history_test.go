package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRecorderConcurrent(t *testing.T) {
	rec := NewRecorder()
	const clients, each = 16, 50
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range each {
				h := rec.Invoke(Op{Client: fmt.Sprintf("c%d", c), Key: fmt.Sprintf("c%d:%d:0123456789abcdef", c, s), Seq: uint64(s)})
				rec.Complete(h, Outcome{Status: 201, JobID: fmt.Sprintf("j-%d-%d", c, s)})
			}
		}()
	}
	wg.Wait()

	ops := rec.Ops()
	if len(ops) != clients*each || rec.Len() != clients*each {
		t.Fatalf("got %d ops, want %d", len(ops), clients*each)
	}
	for i, op := range ops {
		if op.Index != i {
			t.Fatalf("op %d has index %d", i, op.Index)
		}
		if !op.Done || op.Kind != KindSubmit || op.Class() != Committed {
			t.Fatalf("op %d not completed as committed submit: %v", i, op)
		}
		if op.Complete < op.Invoke {
			t.Fatalf("op %d completes (%v) before it is invoked (%v)", i, op.Complete, op.Invoke)
		}
		if i > 0 && op.Invoke < ops[i-1].Invoke {
			t.Fatalf("op %d invoked before op %d", i, i-1)
		}
	}
}

func TestRecorderCompleteTwicePanics(t *testing.T) {
	rec := NewRecorder()
	h := rec.Invoke(Op{Client: "c"})
	rec.Complete(h, Outcome{Status: 503})
	defer func() {
		if recover() == nil {
			t.Fatal("second Complete did not panic")
		}
	}()
	rec.Complete(h, Outcome{Status: 201})
}

func TestJSONLRoundTrip(t *testing.T) {
	rec := NewRecorder()
	h := rec.Invoke(Op{Client: "host1.dc1:c0", Gate: "http://127.0.0.1:1", Tenant: "acme",
		Key: "host1.dc1:c0:1:0123456789abcdef", Seq: 1, Attempt: 1, Type: "chaos.noop",
		Payload: json.RawMessage(`{"a":[1,2,"<x>"]}`), Datacenters: []string{"dc1"}})
	rec.Complete(h, Outcome{Status: 201, JobID: "j1", Replayed: "false", BodyHash: "ab", ExpiresAt: "2026-11-21T12:05:00.000Z"})
	h = rec.Invoke(Op{Client: "host1.dc1:c0", Key: "host1.dc1:c0:1:0123456789abcdef", Attempt: 1, Dup: true})
	rec.Complete(h, Outcome{Err: "context deadline exceeded", Timeout: true})
	rec.Invoke(Op{Kind: KindNemesis, Client: "nemesis", Note: "kill manager-1"})

	var buf bytes.Buffer
	if err := rec.WriteJSONL(&buf); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != 3 {
		t.Fatalf("%d lines, want 3:\n%s", n, buf.String())
	}
	t.Logf("history:\n%s", buf.String())
	got, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if want := rec.Ops(); !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip differs:\n got %v\nwant %v", got, want)
	}
	if got[1].Class() != Indeterminate || got[2].Class() != Indeterminate {
		t.Fatalf("timeout and unfinished ops must be indeterminate: %v %v", got[1].Class(), got[2].Class())
	}
}

func TestReadJSONLRejectsGarbage(t *testing.T) {
	for name, in := range map[string]string{
		"not json":      "hello\n",
		"unknown field": `{"index":0,"kind":"submit","client":"c","invoke_ns":1,"done":false,"surprise":1}` + "\n",
		"no kind":       `{"index":0,"client":"c","invoke_ns":1,"done":false}` + "\n",
		"unknown kind":  `{"index":0,"kind":"Submit","client":"c","key":"c:1:0123456789abcdef","invoke_ns":1,"done":false}` + "\n",
		"submit no key": `{"index":0,"kind":"submit","client":"c","invoke_ns":1,"done":true,"status":201,"job_id":"j"}` + "\n",
		"dup index": `{"index":0,"kind":"submit","client":"c","invoke_ns":1,"done":false}` + "\n" +
			`{"index":0,"kind":"submit","client":"c","invoke_ns":2,"done":false}` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ReadJSONL(strings.NewReader(in)); !errors.Is(err, ErrFormat) {
				t.Fatalf("err = %v, want ErrFormat", err)
			}
		})
	}
}

func TestClass(t *testing.T) {
	for _, tc := range []struct {
		out       Outcome
		class     Class
		retryable bool
	}{
		{Outcome{Status: 201, JobID: "j"}, Committed, false},
		{Outcome{Status: 422, Code: "job_rejected"}, Rejected, false},
		{Outcome{Status: 429, Code: "job_rejected", RetryAfter: "60"}, Rejected, false},
		{Outcome{Status: 429, Code: "slow_down"}, Indeterminate, true},
		{Outcome{Status: 503, Code: "unavailable"}, Indeterminate, true},
		{Outcome{Status: 500, Code: "internal"}, Indeterminate, true},
		{Outcome{Status: 409, Code: "request_in_progress"}, Indeterminate, true},
		{Outcome{Status: 409, Code: "idempotency_key_expired"}, Failed, false},
		{Outcome{Status: 422, Code: "idempotency_key_reused"}, Failed, false},
		{Outcome{Status: 400, Code: "idempotency_key_invalid"}, Failed, false},
		{Outcome{Status: 401, Code: "unauthorized"}, Failed, false},
		{Outcome{Err: "connection refused"}, Indeterminate, true},
		{Outcome{Status: 201, Err: "unexpected EOF"}, Indeterminate, true},
	} {
		if got := tc.out.Class(); got != tc.class {
			t.Errorf("%+v: class %v, want %v", tc.out, got, tc.class)
		}
		if got := tc.out.Retryable(); got != tc.retryable {
			t.Errorf("%+v: retryable %v, want %v", tc.out, got, tc.retryable)
		}
	}
}
