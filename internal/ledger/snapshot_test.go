package ledger

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// populated returns an FSM after the first n entries of a random log, and the
// rest of the log.
func populated(t testing.TB, seed uint64, n, total int) (*FSM, []*raft.Log) {
	t.Helper()
	logs := genLog(seed, total, 40)
	f := newFSM(t, Options{})
	f.ApplyBatch(logs[:n])
	return f, logs[n:]
}

// sameState fails unless a and b hold the same state, as every reader sees it.
func sameState(t *testing.T, a, b *FSM) {
	t.Helper()
	ta, tb := dumpTables(a), dumpTables(b)
	if !reflect.DeepEqual(ta, tb) {
		t.Fatalf("tables differ:\n%+v\n%+v", ta, tb)
	}
	if sa, sb := a.Stats(), b.Stats(); sa != sb {
		t.Fatalf("stats differ: %+v vs %+v", sa, sb)
	}
	if la, lb := a.LedgerTime(), b.LedgerTime(); la != lb {
		t.Fatalf("ledger time differs: %d vs %d", la, lb)
	}
	for _, e := range ta.Entries {
		if got, ok := b.Entry(e.Tenant, e.Key); !ok || !reflect.DeepEqual(got, e) {
			t.Fatalf("Entry(%s, %s) differs", e.Tenant, e.Key)
		}
	}
	for _, j := range ta.Jobs {
		if got, ok := b.Job(j.Tenant, j.ID); !ok || !reflect.DeepEqual(got, j) {
			t.Fatalf("Job(%s, %s) differs", j.Tenant, j.ID)
		}
	}
	for _, tn := range []string{"acme", "globex", "initech"} {
		for _, typ := range []string{"", "a", "b"} {
			ja, na, ma := a.ListJobs(tn, ListOptions{Type: typ, Limit: 7})
			jb, nb, mb := b.ListJobs(tn, ListOptions{Type: typ, Limit: 7})
			if !reflect.DeepEqual(ja, jb) || na != nb || ma != mb {
				t.Fatalf("ListJobs(%s, %s) differs", tn, typ)
			}
		}
	}
	for _, tn := range []string{"acme", "globex", "initech"} {
		for _, status := range []string{"committed", "queued", "running", "succeeded", "failed", "dead"} {
			ja, na, ma := a.ListJobs(tn, ListOptions{Status: status, Limit: 5})
			jb, nb, mb := b.ListJobs(tn, ListOptions{Status: status, Limit: 5})
			if !reflect.DeepEqual(ja, jb) || na != nb || ma != mb {
				t.Fatalf("ListJobs(%s, status %s) differs", tn, status)
			}
		}
	}
	la, oka := a.NextLeaseExpiry()
	lb, okb := b.NextLeaseExpiry()
	if la != lb || oka != okb {
		t.Fatal("NextLeaseExpiry differs")
	}
	na, oka := a.NextExpiry()
	nb, okb := b.NextExpiry()
	if na != nb || oka != okb {
		t.Fatal("NextExpiry differs")
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	a, rest := populated(t, 13, 3000, 4000)
	if st := a.Stats(); st.Entries == 0 || st.Jobs == 0 || st.Watermarks == 0 || st.Jobs == st.Queued+st.Running+st.Succeeded+st.Failed+st.Dead {
		t.Fatalf("the log left too little state to test: %+v", st)
	}
	// Jobs in the lifecycle, in several states (TestSnapshotRoundTripLifecycle
	// has every state, on both backends).
	if st := a.Stats(); st.Queued+st.Running == 0 || st.Succeeded+st.Failed+st.Dead == 0 {
		t.Fatalf("the log left no lifecycle jobs to test: %+v", st)
	}
	b := restore(t, persist(t, a))
	sameState(t, a, b)
	checkInvariants(t, b)
	// Both go on identically.
	for _, l := range rest {
		ra, rb := a.Apply(l), b.Apply(l)
		if ra != nil && !sameResult(ra.(Result), rb.(Result)) {
			t.Fatalf("log %d: %+v vs %+v", l.Index, ra, rb)
		}
	}
	sameState(t, a, b)
	if !bytes.Equal(persist(t, a), persist(t, b)) {
		t.Fatal("snapshots differ after applying the rest of the log")
	}
}

func TestSnapshotOfEmptyFSM(t *testing.T) {
	b := restore(t, persist(t, newFSM(t, Options{})))
	sameState(t, newFSM(t, Options{}), b)
}

// TestSnapshotIsAView: what Persist writes is the state at Snapshot time, not
// at Persist time.
func TestSnapshotIsAView(t *testing.T) {
	f, rest := populated(t, 12, 2000, 3000)
	want := persist(t, f)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	f.ApplyBatch(rest)
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), want) {
		t.Fatal("Persist wrote state applied after Snapshot")
	}
}

// TestPersistWhileApplying runs Persist, Apply and the readers at once; under
// -race this checks the locking and the copy-on-write sharing.
func TestPersistWhileApplying(t *testing.T) {
	f, rest := populated(t, 13, 2000, 6000)
	want := persist(t, f)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()

	var wg sync.WaitGroup
	var sink memSink
	var persistErr error
	start := make(chan struct{})
	wg.Add(3)
	go func() {
		defer wg.Done()
		<-start
		persistErr = snap.Persist(&sink)
	}()
	go func() {
		defer wg.Done()
		<-start
		for i := 0; i < len(rest); i += 16 {
			f.ApplyBatch(rest[i:min(len(rest), i+16)])
		}
	}()
	go func() {
		defer wg.Done()
		<-start
		for i := 0; i < 300; i++ {
			f.Entry("acme", "k1")
			f.ListJobs("globex", ListOptions{Limit: 20})
			f.NextExpiry()
			f.Stats()
			if s, err := f.Snapshot(); err == nil {
				s.Release()
			}
		}
	}()
	close(start)
	wg.Wait()
	if persistErr != nil {
		t.Fatal(persistErr)
	}
	if !bytes.Equal(sink.Bytes(), want) {
		t.Fatal("a snapshot persisted during Apply is not the state at Snapshot time")
	}
	checkInvariants(t, f)
	checkInvariants(t, restore(t, sink.Bytes()))
}

func TestRestoreDiscardsPriorState(t *testing.T) {
	a, _ := populated(t, 14, 1500, 1500)
	b, _ := populated(t, 15, 1500, 1500)
	var changes []Change
	b.onChange = func(c Change) { changes = append(changes, c) }
	if err := b.Restore(io.NopCloser(bytes.NewReader(persist(t, a)))); err != nil {
		t.Fatal(err)
	}
	sameState(t, a, b)
	if len(changes) != 1 || changes[0].Kind != ChangeRestored {
		t.Fatalf("changes %+v, want one ChangeRestored", changes)
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestRestoreClosesReader(t *testing.T) {
	for _, b := range [][]byte{persist(t, newFSM(t, Options{})), []byte("garbage")} {
		rc := &closeRecorder{Reader: bytes.NewReader(b)}
		_ = newFSM(t, Options{}).Restore(rc)
		if !rc.closed {
			t.Fatal("Restore did not close its reader")
		}
	}
}

func TestRestoreMalformed(t *testing.T) {
	good, _ := populated(t, 16, 300, 300)
	snap := persist(t, good)
	victim, _ := populated(t, 17, 300, 300)
	before := persist(t, victim)
	try := func(name string, b []byte, want error) {
		t.Helper()
		err := victim.Restore(io.NopCloser(bytes.NewReader(b)))
		if !errors.Is(err, want) {
			t.Fatalf("%s: err %v, want %v", name, err, want)
		}
	}
	for n := 0; n < len(snap); n += 1 + n/50 {
		try("truncated", snap[:n], ErrBadSnapshot)
	}
	for i := 0; i < len(snap); i += 1 + i/40 {
		b := bytes.Clone(snap)
		b[i] ^= 0x20
		err := victim.Restore(io.NopCloser(bytes.NewReader(b)))
		if err == nil {
			t.Fatalf("flipped byte %d restored", i)
		}
		if !errors.Is(err, ErrBadSnapshot) && !errors.Is(err, ErrSnapshotVersion) {
			t.Fatalf("flipped byte %d: untyped error %v", i, err)
		}
	}
	try("trailing data", append(bytes.Clone(snap), 0), ErrBadSnapshot)
	v2 := bytes.Clone(snap)
	v2[len(snapshotMagic)] = FormatVersion + 1
	try("a future version", v2, ErrSnapshotVersion)
	try("empty", nil, ErrBadSnapshot)
	try("bad magic", []byte("NOTALEDGER"), ErrBadSnapshot)
	try("huge record", append([]byte(snapshotMagic+"\x01"), 0xff, 0xff, 0xff, 0xff, 0x0f), ErrBadSnapshot)
	if after := persist(t, victim); !bytes.Equal(before, after) {
		t.Fatal("a failed Restore changed the state")
	}
}

// restoreSeeds are the seed corpus of FuzzRestore.
func restoreSeeds(t testing.TB) map[string][]byte {
	small, _ := populated(t, 18, 120, 120)
	s := persist(t, small)
	return map[string][]byte{
		"empty-fsm": persist(t, newFSM(t, Options{})),
		"small":     s,
		"truncated": s[:len(s)/2],
	}
}

// FuzzRestore: Restore never panics; a snapshot it accepts is consistent and
// round-trips.
func FuzzRestore(f *testing.F) {
	for _, b := range restoreSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := newFSM(t, Options{})
		err := fsm.Restore(io.NopCloser(bytes.NewReader(data)))
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) && !errors.Is(err, ErrSnapshotVersion) {
				t.Fatalf("untyped error %v", err)
			}
			if st := fsm.Stats(); st != (Stats{}) {
				t.Fatalf("a failed Restore left state %+v", st)
			}
			return
		}
		checkInvariants(t, fsm)
		again := persist(t, fsm)
		if b := persist(t, restore(t, again)); !bytes.Equal(again, b) {
			t.Fatal("an accepted snapshot does not round-trip")
		}
	})
}

func TestReleasedSnapshot(t *testing.T) {
	snap, err := newFSM(t, Options{}).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err == nil || !sink.cancelled {
		t.Fatalf("Persist after Release: err %v, cancelled %v", err, sink.cancelled)
	}
}

// failingReader returns err once its data is read.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestRestoreReadErrorIsWrapped: a Restore whose stream fails (a disk error
// reading the snapshot file, a broken InstallSnapshot stream) is refused as
// a bad snapshot and keeps the stream's error, wrapped, for errors.Is and
// errors.As: a read failure stays distinguishable from damaged bytes, at
// every place Restore reads (header, a record's length, a record, the CRC).
//
// Failed before those errors were wrapped with %w.
func TestRestoreReadErrorIsWrapped(t *testing.T) {
	good, _ := populated(t, 18, 300, 300)
	snap := persist(t, good)
	victim, _ := populated(t, 19, 300, 300)
	before := persist(t, victim)
	injected := errors.New("injected: read failed")
	for _, n := range []int{0, 4, len(snapshotMagic) + 1, len(snapshotMagic) + 3, len(snap) / 2, len(snap) - 2} {
		err := victim.Restore(io.NopCloser(&failingReader{data: snap[:n], err: injected}))
		if !errors.Is(err, injected) || !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("stream failing after %d of %d bytes: %v, want ErrBadSnapshot wrapping the read error", n, len(snap), err)
		}
	}
	if !bytes.Equal(before, persist(t, victim)) {
		t.Fatal("a failed Restore changed the state")
	}
}
