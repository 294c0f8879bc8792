package ledger

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// An entry this build cannot decode halts the replica: it is not marked
// applied, no later entry is applied, the operator is told which entry and
// why, and no snapshot is taken of the state.
func TestHaltOnUndecodableEntry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    []byte
		typ     CommandType
		version uint8
		cause   error
	}{
		{"a future version", append([]byte{byte(TypeAdmit), 9}, Encode(admit(base))[2:]...), TypeAdmit, 9, ErrUnsupportedVersion},
		{"unknown type", []byte{0x3f, 1, 1, 2, 3}, 0x3f, 1, ErrUnknownCommand},
		{"malformed", Encode(admit(base))[:12], TypeAdmit, FormatVersion, ErrMalformed},
		// An Admit's parts are no commands of the log: a Reserve, a Commit or
		// a Reject alone (types 0x01-0x03, pre-1.0), or a batch of Commits
		// and Rejects (0x06), halts as any type this build does not know.
		{"a standalone reserve", append([]byte{0x01, FormatVersion}, base.appendBody(nil)...), 0x01, FormatVersion, ErrUnknownCommand},
		{"a standalone commit", append([]byte{0x02, FormatVersion}, commit(base, tCommit).appendBody(nil)...), 0x02, FormatVersion, ErrUnknownCommand},
		{"a standalone reject", append([]byte{0x03, FormatVersion}, reject(base, tCommit, 422).appendBody(nil)...), 0x03, FormatVersion, ErrUnknownCommand},
		{"a resolve batch", []byte{0x06, FormatVersion, 0}, 0x06, FormatVersion, ErrUnknownCommand},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var halts []*HaltError
			h := &harness{t: t}
			h.f = newFSM(t, Options{OnHalt: func(e *HaltError) { halts = append(halts, e) }})
			h.must(admit(base), OutcomeCommitted)
			before := dumpTables(h.f)

			res := h.applyRaw(tc.data)
			var he *HaltError
			if res.Outcome != OutcomeInvalid || !errors.As(res.Err, &he) {
				t.Fatalf("result %+v, want OutcomeInvalid with a *HaltError", res)
			}
			if he.Index != h.idx || he.Type != tc.typ || he.Version != tc.version ||
				!errors.Is(res.Err, ErrHalted) || !errors.Is(res.Err, tc.cause) {
				t.Fatalf("halt error %+v (%v), want index %d, %s version %d, %v", he, res.Err, h.idx, tc.typ, tc.version, tc.cause)
			}
			msg := res.Err.Error()
			for _, want := range []string{fmt.Sprintf("index %d", h.idx), tc.typ.String(), fmt.Sprintf("version %d", tc.version)} {
				if !strings.Contains(msg, want) {
					t.Fatalf("message %q does not name %q", msg, want)
				}
			}
			if len(halts) != 1 || halts[0] != he {
				t.Fatalf("OnHalt calls %v, want one with the error", halts)
			}
			if h.f.Halted() != he {
				t.Fatalf("Halted() = %v", h.f.Halted())
			}
			if st := h.f.Stats(); st.AppliedIndex != h.idx-1 {
				t.Fatalf("applied index %d, want %d: the entry is not applied", st.AppliedIndex, h.idx-1)
			}

			// Nothing after it is applied, singly or in a batch.
			res = h.apply(admit(reserve(tenant, "later", t0)))
			if !errors.Is(res.Err, ErrHalted) {
				t.Fatalf("a later entry: %+v, want the halt error", res)
			}
			h.idx++
			out := h.f.ApplyBatch([]*raft.Log{{Index: h.idx, Type: raft.LogCommand, Data: Encode(admit(reserve(tenant, "later", t0)))}})
			if r := out[0].(Result); !errors.Is(r.Err, ErrHalted) {
				t.Fatalf("a later batch: %+v, want the halt error", r)
			}
			if st := h.f.Stats(); st.AppliedIndex != 1 {
				t.Fatalf("applied index %d after the halt, want 1", st.AppliedIndex)
			}
			if !reflect.DeepEqual(before, dumpTables(h.f)) {
				t.Fatal("the state changed after the halt")
			}
			if _, err := h.f.Snapshot(); !errors.Is(err, ErrHalted) {
				t.Fatalf("Snapshot of a halted FSM: %v, want ErrHalted", err)
			}
			if len(halts) != 1 {
				t.Fatalf("OnHalt called %d times, want once", len(halts))
			}
		})
	}
}

// In a batch, the entries before the undecodable one are applied, it and
// those after it are not.
func TestHaltInBatch(t *testing.T) {
	calls := 0
	f := newFSM(t, Options{OnHalt: func(*HaltError) { calls++ }})
	out := f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: Encode(admit(reserve(tenant, "a", t0)))},
		{Index: 2, Type: raft.LogCommand, Data: []byte{byte(TypeAdmit), 7}},
		{Index: 3, Type: raft.LogCommand, Data: Encode(admit(reserve(tenant, "b", t0)))},
	})
	if r := out[0].(Result); r.Outcome != OutcomeCommitted {
		t.Fatalf("entry 1: %+v", r)
	}
	for i := 1; i < 3; i++ {
		var he *HaltError
		if r := out[i].(Result); !errors.As(r.Err, &he) || he.Index != 2 {
			t.Fatalf("entry %d: %+v, want the halt at index 2", i+1, r)
		}
	}
	if _, ok := f.Entry(tenant, "a"); !ok {
		t.Fatal("the entry before the halt is not applied")
	}
	if _, ok := f.Entry(tenant, "b"); ok {
		t.Fatal("the entry after the halt is applied")
	}
	if st := f.Stats(); st.AppliedIndex != 1 || calls != 1 {
		t.Fatalf("applied index %d (want 1), OnHalt calls %d (want 1)", st.AppliedIndex, calls)
	}
}

// An entry at or below the applied index (Raft's replay after a restart) is
// skipped without being decoded: it was applied before.
func TestNoHaltOnEntriesAlreadyApplied(t *testing.T) {
	f := newFSM(t, Options{})
	f.Apply(&raft.Log{Index: 5, Type: raft.LogCommand, Data: Encode(admit(base))})
	res := f.Apply(&raft.Log{Index: 4, Type: raft.LogCommand, Data: []byte{byte(TypeAdmit), 9}}).(Result)
	if errors.Is(res.Err, ErrHalted) || f.Halted() != nil || !errors.Is(res.Err, ErrInvalidCommand) {
		t.Fatalf("an entry below the applied index: %+v, halted %v", res, f.Halted())
	}
}

// A disk ledger halted by an entry restarts where it was: the entry is
// judged again on the replay (and halts again for a build that cannot read
// it), nothing after it is there.
func TestHaltSurvivesRestart(t *testing.T) {
	diskPassOnly(t)
	dir := t.TempDir()
	f, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := []byte{byte(TypeExpire), 9}
	f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: Encode(admit(base))},
		{Index: 2, Type: raft.LogCommand, Data: bad},
		{Index: 3, Type: raft.LogCommand, Data: Encode(admit(reserve(tenant, "later", t0)))},
	})
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openFSM(t, dir, Options{})
	if st := f.Stats(); st.AppliedIndex != 1 || st.Entries != 1 {
		t.Fatalf("after the restart: %+v, want applied index 1 and one entry", st)
	}
	res := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: bad}).(Result)
	if !errors.Is(res.Err, ErrHalted) || !errors.Is(res.Err, ErrUnsupportedVersion) {
		t.Fatalf("the replayed entry: %+v, want the halt again", res)
	}
}
