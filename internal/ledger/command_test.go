package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// sampleCommands has one command of every type, with every field set.
func sampleCommands() []Command {
	s := structured("acme", "host1.dc1:12345", 42, "a1b2c3d4e5f6a7b8", t0)
	s.Request.Datacenters = []string{"dc1", "dc2"}
	return []Command{
		admit(reserve("acme", "order-1", t0)),
		admitWith(s, commit(s, t0+sec)),
		admitWith(s, reject(s, t0+sec, 429)),
		admit(Reserve{Tenant: "t", Key: "k", JobID: "j", Now: -5, MaxEntries: 1 << 40}),
		Expire{Now: t0, MaxRemovals: 300, WatermarkTTL: 7 * 24 * time.Hour},
		admitWith(Reserve{Tenant: "t", Key: "k", JobID: "j", Now: 1, MaxEntries: 3,
			MaxWatermarks: 4, MaxTenantWatermarks: 5, MaxBytes: 1 << 30, MaxTenantBytes: 1 << 28, ResultTTL: time.Hour},
			Commit{Tenant: "t", Key: "k", JobID: "j", Now: 1, ExpiresAt: 2, JobExpiresAt: 3,
				MaxJobs: 10, RejectedExpiresAt: 4, CapacityDetail: "full"}),
		Expire{},
		Unknown{Type: TypeIgnorable | 0x11, Version: 7, Body: []byte("future")},
		AdmitBatch{Items: []Command{admit(reserve("acme", "order-2", t0)), admitWith(s, reject(s, t0+sec, 422)),
			admit(Reserve{Tenant: "t", Key: "k", JobID: "j", Now: 1, MaxEntries: 3})}},
		AdmitBatch{Items: []Command{admitWith(s, QueueCommit(commit(s, t0+sec)))}},
		Confirm{Items: []Confirmation{{"acme", "host1.dc1:12345:42:a1b2c3d4e5f6a7b8", s.JobID, "dc2"}, {"t", "k", "j", "dc3"}}},
		Confirm{Items: []Confirmation{}},
		// The job lifecycle.
		admitWith(s, QueueCommit(commit(s, t0+sec))),
		admitWith(Reserve{Tenant: "t", Key: "k", JobID: "j", Now: 1, MaxEntries: 1},
			Commit{Tenant: "t", Key: "k", JobID: "j", Now: 1, ExpiresAt: 2, JobExpiresAt: 3, Queue: true,
				MaxJobs: 10, RejectedExpiresAt: 4, CapacityDetail: "full"}),
		Lease{Tenant: "acme", Holder: "worker-1", Types: []string{"send_invoice", "resize"}, Max: 2,
			LeaseIDs: []string{"lease-1", "lease-2"}, Now: t0, Expiry: t0 + 30*sec, MaxAttempts: 10},
		Lease{Tenant: "t", Holder: "h", Max: 1, LeaseIDs: []string{"l"}, Now: 1, Expiry: 2},
		Heartbeat{Tenant: "acme", JobID: s.JobID, LeaseID: "lease-1", Now: t0 + sec, Expiry: t0 + 31*sec},
		Complete{Tenant: "acme", JobID: s.JobID, LeaseID: "lease-1", Result: []byte(`{"ok":true}`), Now: t0 + 2*sec},
		Complete{Tenant: "t", JobID: "j", LeaseID: "l"},
		Fail{Tenant: "acme", JobID: s.JobID, LeaseID: "lease-1", Error: "timeout", Retry: true,
			Now: t0 + 2*sec, RetryAt: t0 + 12*sec, MaxAttempts: 10},
		Fail{Tenant: "t", JobID: "j", LeaseID: "l", Error: "bad input"},
		ExpireLeases{Now: t0, Max: 500, RetryAt: t0 + sec, MaxAttempts: 10},
		ExpireLeases{},
		// A replayable lease.
		Lease{Tenant: "acme", Holder: "worker-1", Max: 2, LeaseIDs: []string{"lease-1", "lease-2"},
			Now: t0, Expiry: t0 + 30*sec, MaxAttempts: 10, Replay: true},
		// The byte budgets: Lease (with and without replay), Complete and
		// Fail.
		Lease{Tenant: "acme", Holder: "worker-1", Max: 2, LeaseIDs: []string{"lease-1", "lease-2"},
			Now: t0, Expiry: t0 + 30*sec, MaxAttempts: 10, Replay: true, MaxBytes: 8 << 20},
		Lease{Tenant: "t", Holder: "h", Max: 1, LeaseIDs: []string{"l"}, Now: 1, Expiry: 2, MaxBytes: 1},
		Complete{Tenant: "acme", JobID: s.JobID, LeaseID: "lease-1", Result: []byte(`{"ok":true}`), Now: t0 + 2*sec,
			MaxBytes: 1 << 30, MaxTenantBytes: 1 << 28},
		Complete{Tenant: "t", JobID: "j", LeaseID: "l", MaxTenantBytes: 1},
		Fail{Tenant: "acme", JobID: s.JobID, LeaseID: "lease-1", Error: "timeout", Retry: true,
			Now: t0 + 2*sec, RetryAt: t0 + 12*sec, MaxAttempts: 10, MaxBytes: 1 << 30, MaxTenantBytes: 1 << 28},
		Fail{Tenant: "t", JobID: "j", LeaseID: "l", MaxBytes: 1},
		// One round: Admit, alone and in a reserve batch.
		Admit{Reserve: s, Outcome: QueueCommit(commit(s, t0))},
		Admit{Reserve: s, Outcome: reject(s, t0, 422)},
		AdmitBatch{Items: []Command{Admit{Reserve: s, Outcome: commit(s, t0)}, admit(reserve("acme", "order-3", t0))}},
		// Worker commands batched.
		WorkerBatch{Items: []Command{
			Lease{Tenant: "acme", Holder: "worker-1", Max: 2, LeaseIDs: []string{"lease-1", "lease-2"}, Now: t0, Expiry: t0 + 30*sec, MaxAttempts: 10},
			Heartbeat{Tenant: "acme", JobID: s.JobID, LeaseID: "lease-1", Now: t0 + sec, Expiry: t0 + 31*sec},
			Complete{Tenant: "acme", JobID: s.JobID, LeaseID: "lease-1", Result: []byte(`{"ok":true}`), Now: t0 + 2*sec},
			Fail{Tenant: "t", JobID: "j", LeaseID: "l", MaxBytes: 1},
		}},
		// A tenant's actions on its jobs.
		Cancel{JobAction{Tenant: "acme", JobID: s.JobID, Key: "cancel-1", Fingerprint: "fp", Now: t0, ExpiresAt: t0 + sec,
			MaxEntries: 10, MaxBytes: 1 << 30, MaxTenantBytes: 1 << 28}},
		Retry{JobAction{Tenant: "t", JobID: "j", Key: "k", Fingerprint: "f", Now: 1, ExpiresAt: 2, MaxEntries: 1}},
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, c := range sampleCommands() {
		b := Encode(c)
		if u, ok := c.(Unknown); CommandType(b[0]) != c.CommandType() || (b[1] != FormatVersion && !ok) || (ok && b[1] != u.Version) {
			t.Fatalf("%T: header %x", c, b[:2])
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, c)
		}
		if !bytes.Equal(Encode(got), b) {
			t.Fatalf("%T: re-encoding differs", c)
		}
		// AppendCommand appends.
		if ab := AppendCommand([]byte("xy"), c); !bytes.Equal(ab[2:], b) || string(ab[:2]) != "xy" {
			t.Fatalf("%T: AppendCommand", c)
		}
	}
}

func TestDecodeDoesNotAlias(t *testing.T) {
	b := Encode(admit(reserve("acme", "k", t0)))
	c, err := DecodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xff
	}
	if r := c.(Admit).Reserve; string(r.Request.Payload) != `{"order":"k"}` || r.Tenant != "acme" {
		t.Fatalf("decoded command changed with its input: %+v", r)
	}
}

func TestStructuredFieldsOnlyWhenStructured(t *testing.T) {
	r := reserve("acme", "k", t0)
	r.ClientID, r.Sequence, r.Nonce = "c", 9, "n" // not Structured: not encoded
	got, err := DecodeCommand(Encode(admit(r)))
	if err != nil {
		t.Fatal(err)
	}
	if g := got.(Admit).Reserve; g.ClientID != "" || g.Sequence != 0 || g.Nonce != "" {
		t.Fatalf("structured parts of an opaque key survived: %+v", g)
	}
}

func TestDecodeErrors(t *testing.T) {
	valid := Encode(admit(reserve("acme", "k", t0)))
	nonMinimal := []byte{byte(TypeExpire), 1}
	nonMinimal = appendInt64(nonMinimal, 1)
	nonMinimal = append(nonMinimal, 0x80, 0x00) // 0 as a 2-byte varint
	nonMinimal = appendInt64(nonMinimal, 0)
	badBool := Encode(admitWith(reserve("acme", "k", t0), commit(reserve("acme", "k", t0), t0)))
	badBool[len(badBool)-1] = 2 // the queue flag is the last byte
	hugeLen := []byte{byte(TypeAdmit), 1}
	hugeLen = binary.AppendUvarint(hugeLen, 1<<62)
	badStatus := Encode(admitWith(Reserve{Tenant: "t", Key: "k", JobID: "j"}, Reject{Tenant: "t", Key: "k", JobID: "j"}))
	badStatus = append(badStatus[:len(badStatus)-2-1], 0x80, 0x80, 0x04, 0, 0) // status 65536
	badFailBool := Encode(Fail{Tenant: "t", JobID: "j", LeaseID: "l"})
	badFailBool[2+2+2+2+1] = 7 // the retry flag: after the header, three 1-byte strings and an empty one

	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"one byte", []byte{1}, ErrMalformed},
		{"header only", []byte{byte(TypeAdmit), 1}, ErrMalformed},
		{"admit without a verdict", append([]byte{byte(TypeAdmit), 1}, reserve("acme", "k", t0).appendBody(nil)...), ErrMalformed},
		{"admit with no verdict's tag", Encode(Admit{Reserve: reserve("acme", "k", t0)}), ErrMalformed},
		// Reserve, Commit, Reject and ResolveBatch (0x01-0x03, 0x06) are no
		// command of the log: refused as unknown.
		{"a standalone reserve", append([]byte{0x01, 1}, reserve("acme", "k", t0).appendBody(nil)...), ErrUnknownCommand},
		{"a standalone commit", []byte{0x02, 1}, ErrUnknownCommand},
		{"a standalone reject", []byte{0x03, 1}, ErrUnknownCommand},
		{"a resolve batch", []byte{0x06, 1, 0}, ErrUnknownCommand},
		{"trailing byte", append(bytes.Clone(valid), 0), ErrMalformed},
		{"non-minimal varint", nonMinimal, ErrMalformed},
		{"bad bool", badBool, ErrMalformed},
		{"length past the end", hugeLen, ErrMalformed},
		{"status out of range", badStatus, ErrMalformed},
		{"unknown type", []byte{0x07, 1}, ErrUnknownCommand},
		{"zero type", []byte{0x00, 1, 2, 3}, ErrUnknownCommand},
		{"admit v2", append([]byte{byte(TypeAdmit), 2}, valid[2:]...), ErrUnsupportedVersion},
		{"admit v0", []byte{byte(TypeAdmit), 0}, ErrUnsupportedVersion},
		{"admit_batch v9", []byte{byte(TypeAdmitBatch), 9}, ErrUnsupportedVersion},
		{"expire v3", []byte{byte(TypeExpire), 3}, ErrUnsupportedVersion},
		{"lease v4", []byte{byte(TypeLease), 4}, ErrUnsupportedVersion},
		{"heartbeat v0", []byte{byte(TypeHeartbeat), 0}, ErrUnsupportedVersion},
		{"complete v3", []byte{byte(TypeComplete), 3}, ErrUnsupportedVersion},
		{"fail v3", []byte{byte(TypeFail), 3}, ErrUnsupportedVersion},
		{"expire_leases v2", []byte{byte(TypeExpireLeases), 2}, ErrUnsupportedVersion},
		{"fail bad bool", badFailBool, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeCommand(tc.in)
			if !errors.Is(err, tc.want) || c != nil {
				t.Fatalf("DecodeCommand = %v, %v; want nil, %v", c, err, tc.want)
			}
		})
	}
	// Every strict prefix of every valid command fails to decode.
	for _, c := range sampleCommands() {
		if _, ok := c.(Unknown); ok {
			continue
		}
		b := Encode(c)
		for n := 0; n < len(b); n++ {
			if _, err := DecodeCommand(b[:n]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%T prefix %d/%d: %v", c, n, len(b), err)
			}
		}
	}
}

func TestDecodeIgnorable(t *testing.T) {
	for _, in := range [][]byte{{0x80, 0}, {0xff, 0xff, 1, 2, 3}, {0x85, 1}} {
		c, err := DecodeCommand(in)
		if err != nil {
			t.Fatalf("%x: %v", in, err)
		}
		u, ok := c.(Unknown)
		if !ok || byte(u.Type) != in[0] || u.Version != in[1] || !bytes.Equal(u.Body, in[2:]) {
			t.Fatalf("%x: %#v", in, c)
		}
		if !bytes.Equal(Encode(u), in) {
			t.Fatalf("%x: re-encoded as %x", in, Encode(u))
		}
	}
}

// FuzzDecodeCommand: DecodeCommand never panics; whatever decodes re-encodes
// to the same bytes; and applying it never panics nor breaks an invariant
// (what does not decode halts the FSM).
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range sampleCommands() {
		f.Add(Encode(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeCommand(data)
		if err != nil {
			if c != nil {
				t.Fatalf("command %#v with error %v", c, err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownCommand) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("untyped error %v", err)
			}
		} else if re := Encode(c); !bytes.Equal(re, data) {
			t.Fatalf("re-encoded %x, input %x", re, data)
		}
		// The disk state's decoding, whose strings share one copy of each
		// command's bytes, reads the same command and the same errors.
		sc, serr := decodeCommand(bytes.Clone(data), true)
		if !reflect.DeepEqual(sc, c) || fmt.Sprint(serr) != fmt.Sprint(err) {
			t.Fatalf("shared decoding gave %#v, %v; want %#v, %v", sc, serr, c, err)
		}
		h := newHarness(t)
		h.must(admit(reserve("t", "k", t0)), OutcomeCommitted)
		res := h.applyRaw(data)
		var halt *HaltError
		if err != nil && (res.Outcome != OutcomeInvalid || !errors.As(res.Err, &halt) || halt.Err.Error() != err.Error() || h.f.Halted() != halt) {
			t.Fatalf("decode error %v but result %v (%v), want the FSM halted by it", err, res.Outcome, res.Err)
		}
		if err == nil && res.Outcome == OutcomeInvalid && !errors.Is(res.Err, ErrInvalidCommand) {
			t.Fatalf("invalid result with error %v", res.Err)
		}
		checkInvariants(t, h.f)
	})
}

// TestWriteFuzzCorpus regenerates the checked-in seed corpora under
// testdata/fuzz when LEDGER_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("LEDGER_WRITE_CORPUS") != "1" {
		t.Skip("set LEDGER_WRITE_CORPUS=1 to regenerate testdata/fuzz")
	}
	write := func(target, name string, b []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body := "go test fuzz v1\n[]byte(" + quoteBytes(b) + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Seeds are named by position and type.
	for i, c := range sampleCommands() {
		write("FuzzDecodeCommand", fmt.Sprintf("seed-%d-type-%02x", i, byte(c.CommandType())), Encode(c))
	}
	write("FuzzDecodeCommand", "seed-truncated", Encode(admit(reserve("a", "b", t0)))[:20])
	write("FuzzDecodeCommand", "seed-unknown-version", []byte{byte(TypeAdmit), 9})
	for name, b := range restoreSeeds(t) {
		write("FuzzRestore", "seed-"+name, b)
	}
}

func quoteBytes(b []byte) string {
	var sb bytes.Buffer
	sb.WriteByte('"')
	for _, c := range b {
		switch {
		case c == '"' || c == '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		default:
			const hex = "0123456789abcdef"
			sb.WriteString(`\x`)
			sb.WriteByte(hex[c>>4])
			sb.WriteByte(hex[c&15])
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// A decoder with share reads the strings of an input up to maxShared bytes
// as parts of one copy of it, and those of a longer input each as a copy of
// its own, so a string kept by mistake keeps at most maxShared bytes alive.
func TestSharedStringsBound(t *testing.T) {
	for _, c := range []struct {
		pad    int
		shared bool
	}{{pad: 10, shared: true}, {pad: maxShared, shared: false}} {
		var b []byte
		b = appendString(b, "first")
		b = appendString(b, strings.Repeat("x", c.pad))
		b = appendString(b, "last")
		d := &decoder{b: b, base: ErrMalformed, share: true}
		first, _, last := d.string(), d.string(), d.string()
		if err := d.finish(); err != nil || first != "first" || last != "last" {
			t.Fatalf("pad %d: %q %q %v", c.pad, first, last, err)
		}
		// In the input, "first" starts at 1 (after its length byte) and
		// "last" at len(b)-4: parts of one copy lie as far apart.
		apart := uintptr(unsafe.Pointer(unsafe.StringData(last))) - uintptr(unsafe.Pointer(unsafe.StringData(first)))
		want := uintptr(len(b) - len("last") - 1)
		if (apart == want) != c.shared {
			t.Errorf("pad %d (input of %d bytes): shared = %v, want %v", c.pad, len(b), apart == want, c.shared)
		}
	}
}
