package ledger

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/testutil"
)

// The disk-backed state, beyond the contract tests (which run on it by
// default): it survives closing, restoring, and kill -9, and it gives
// byte-identical snapshots to the in-memory state for the same log.

func TestDiskAndMemoryGiveIdenticalSnapshots(t *testing.T) {
	logs := genLog(31, 4000, 40)
	mem, disk := New(Options{}), openFSM(t, t.TempDir(), Options{})
	for i := 0; i < len(logs); i += 37 { // batches of an odd size, and singles
		batch := logs[i:min(len(logs), i+37)]
		if i%2 == 0 {
			for _, l := range batch {
				if !sameResult(asResult(mem.Apply(l)), asResult(disk.Apply(l))) {
					t.Fatalf("index %d: results differ", l.Index)
				}
			}
			continue
		}
		want, got := mem.ApplyBatch(batch), disk.ApplyBatch(batch)
		for j := range batch {
			if !sameResult(asResult(want[j]), asResult(got[j])) {
				t.Fatalf("index %d (in a batch): results differ:\nmemory %+v\ndisk   %+v", batch[j].Index, want[j], got[j])
			}
		}
	}
	if !bytes.Equal(persist(t, mem), persist(t, disk)) {
		t.Fatal("memory and disk snapshots differ for the same log")
	}
	checkInvariants(t, disk)
}

func asResult(v interface{}) Result {
	r, _ := v.(Result)
	return r
}

// A closed and reopened store is the state it held, and goes on from its
// applied index; the log before it is refused as already applied.
func TestDiskReopenGoesOn(t *testing.T) {
	logs := genLog(32, 3000, 40)
	dir := t.TempDir()
	f, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch(logs[:1800])
	before := persist(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := openFSM(t, dir, Options{})
	if !bytes.Equal(before, persist(t, g)) {
		t.Fatal("reopened state differs")
	}
	checkInvariants(t, g)
	if got := g.Stats().AppliedIndex; got != logs[1799].Index {
		t.Fatalf("applied index %d after reopen, want %d", got, logs[1799].Index)
	}
	// Raft replays from its snapshot's index: what the store has is skipped.
	for _, l := range logs[1000:1800] {
		if l.Type != raft.LogCommand {
			continue
		}
		if r := asResult(g.Apply(l)); r.Outcome != OutcomeInvalid || !errors.Is(r.Err, ErrInvalidCommand) {
			t.Fatalf("replay of applied index %d: %+v", l.Index, r)
		}
	}
	g.ApplyBatch(logs[1800:])
	want := New(Options{})
	want.ApplyBatch(logs)
	if !bytes.Equal(persist(t, want), persist(t, g)) {
		t.Fatal("state after reopen and the rest of the log differs from one pass")
	}
}

// Restore writes a new generation and switches to it; a failed Restore
// leaves the state and the directory as they were.
func TestDiskRestore(t *testing.T) {
	src, _ := populated(t, 33, 1500, 1500)
	snap := persist(t, src)
	dir := t.TempDir()
	f, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.ApplyBatch(genLog(34, 300, 40))
	old := persist(t, f)
	bad := append(bytes.Clone(snap[:len(snap)-1]), snap[len(snap)-1]^1) // CRC mismatch at the very end
	if err := f.Restore(io.NopCloser(bytes.NewReader(bad))); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("Restore of a damaged snapshot: %v", err)
	}
	if !bytes.Equal(old, persist(t, f)) {
		t.Fatal("a failed Restore changed the state")
	}
	if gens := generations(t, dir); len(gens) != 1 {
		t.Fatalf("generations after a failed Restore: %v", gens)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, persist(t, f)) {
		t.Fatal("restored state differs from the snapshot")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if gens := generations(t, dir); len(gens) != 1 || gens[0] != "gen-2" {
		t.Fatalf("generations after Restore: %v, want [gen-2]", gens)
	}
	g := openFSM(t, dir, Options{})
	if !bytes.Equal(snap, persist(t, g)) {
		t.Fatal("restored state differs after reopen")
	}
	checkInvariants(t, g)
}

func generations(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "gen-*"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// A snapshot taken before a Restore still streams the old state after it
// (its view keeps the old generation open until released).
func TestDiskSnapshotOutlivesRestore(t *testing.T) {
	f, _ := populated(t, 35, 800, 800)
	want := persist(t, f)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := populated(t, 36, 500, 500)
	if err := f.Restore(io.NopCloser(bytes.NewReader(persist(t, other)))); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := snap.(*Snapshot).PersistTo(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !bytes.Equal(want, buf.Bytes()) {
		t.Fatal("a snapshot taken before Restore changed")
	}
}

func TestOpenRefusesWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "CURRENT"), []byte("gen-7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrStore) {
		t.Fatalf("CURRENT naming a missing generation: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "CURRENT"), []byte("latest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrStore) {
		t.Fatalf("CURRENT naming no generation: %v", err)
	}
}

// The crash test's log, and its child's environment variable.
const (
	crashChildEnv = "ONCE_LEDGER_CRASH_CHILD"
	crashLogLen   = 60000
)

func crashLog() []*raft.Log { return genLog(37, crashLogLen, 40) }

// TestMain runs crashChild instead of the tests in the child process.
func init() {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		os.Exit(0)
	}
}

// crashChild applies the crash log to the store in dir in batches, taking a
// snapshot every few batches, and reports on stdout each batch applied
// ("applied N") and each snapshot persisted ("snapshot N"), until killed.
func crashChild(dir string) {
	f, err := Open(dir, Options{})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	logs := crashLog()
	applied := f.Stats().AppliedIndex
	out := bufio.NewWriter(os.Stdout)
	for i, n := 0, 0; i < len(logs); n++ {
		j := min(len(logs), i+1+n%97)
		if logs[j-1].Index > applied {
			f.ApplyBatch(logs[i:j])
		}
		i = j
		fmt.Fprintln(out, "applied", logs[j-1].Index)
		if n%40 == 39 {
			snap, err := f.Snapshot()
			if err == nil {
				err = snap.(*Snapshot).PersistTo(io.Discard)
				snap.Release()
			}
			if err != nil {
				fmt.Fprintln(out, "error", err)
				return
			}
			fmt.Fprintln(out, "snapshot", snap.(*Snapshot).applied)
		}
		out.Flush()
	}
	fmt.Fprintln(out, "done")
	out.Flush()
	select {} // wait to be killed
}

// kill -9 in the middle of applying (and of snapshotting): the store reopens
// consistent, at or past the last snapshot it persisted, and the log after
// its applied index brings it to exactly the state of one uninterrupted pass.
func TestDiskSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	diskPassOnly(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var lastSnap uint64
	for round := range 3 {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAt := uint64(5000 + rng.IntN(40000))
		sc := bufio.NewScanner(stdout)
		var applied uint64
		for sc.Scan() {
			word, num, _ := strings.Cut(sc.Text(), " ")
			n, _ := strconv.ParseUint(num, 10, 64)
			switch word {
			case "applied":
				applied = n
			case "snapshot":
				lastSnap = max(lastSnap, n)
			case "error":
				t.Fatalf("child: %s", sc.Text())
			}
			if applied >= killAt || word == "done" {
				break
			}
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		f, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9 at %d: %v", round, applied, err)
		}
		got := f.Stats().AppliedIndex
		checkInvariants(t, f)
		if got < lastSnap {
			t.Fatalf("round %d: store at %d after kill -9, behind the snapshot persisted at %d", round, got, lastSnap)
		}
		t.Logf("round %d: killed after %d applied (last snapshot %d); the store reopened at %d", round, applied, lastSnap, got)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Replay the whole log as Raft would (the store skips what it has).
	f := openFSM(t, dir, Options{})
	logs := crashLog()
	for i := 0; i < len(logs); i += 64 {
		f.ApplyBatch(logs[i:min(len(logs), i+64)])
	}
	want := New(Options{})
	want.ApplyBatch(logs)
	if !bytes.Equal(persist(t, want), persist(t, f)) {
		t.Fatal("state after kill -9 and replay differs from one uninterrupted pass")
	}
}

// TestKeyCountsAcrossReopen: a reopened store counts its entries' and jobs'
// keys in the background (engine/keys.go). Commands applied before that scan ends
// read pebble, and what they change is merged with the scan's counts; then
// an absent key is answered from the counts, and every answer is the same.
func TestKeyCountsAcrossReopen(t *testing.T) {
	diskPassOnly(t)
	dir := t.TempDir()
	h := &harness{t: t, f: openFSM(t, dir, Options{})}
	for i := range 20 {
		r := reserve(tenant, fmt.Sprintf("old-%d", i), t0)
		if i%2 == 0 {
			h.must(admitWith(r, commit(r, tCommit)), OutcomeCommitted)
		} else {
			h.must(admitWith(r, reject(r, tCommit, 422)), OutcomeRejected)
		}
	}
	checkInvariants(t, h.f) // counted as they were applied
	if err := h.f.Close(); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	var logged testutil.Buffer
	h.f = openFSM(t, dir, Options{Store: StoreOptions{Logger: slog.New(slog.NewTextHandler(&logged, nil)),
		Knobs: TestingKnobs{KeyScanStarts: func() { <-release }}}})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the FSM's Close
	keys := h.f.s.store.Keys()

	// While the scan waits: every read goes to pebble.
	h.must(admit(reserve(tenant, "old-2", t0)), OutcomeExists)
	h.must(admit(reserve(tenant, "old-3", t0)), OutcomeExists)
	for i := range 10 {
		r := reserve(tenant, fmt.Sprintf("new-%d", i), tCommit)
		h.must(admitWith(r, commit(r, tCommit)), OutcomeCommitted)
	}
	// The uncommitted old entries expire; the committed ones stay.
	h.must(expire(t0+pendingTTL), OutcomeExpired)
	if keys.Ready() {
		t.Fatal("counts ready before the scan")
	}

	once.Do(func() { close(release) })
	keys.ScanDone()
	if want := `msg="ledger key counts scanned" count=30 `; !strings.Contains(logged.String(), want) { // 20 entries, 10 jobs
		t.Errorf("log %q, want %q", logged.String(), want)
	}
	h.must(admit(reserve(tenant, "new-10", tCommit)), OutcomeCommitted) // the merge is at this batch's start
	if !keys.Ready() {
		t.Fatal("counts not merged after the scan")
	}
	checkInvariants(t, h.f) // the merged counts are the tables'
	h.must(admit(reserve(tenant, "old-2", t0)), OutcomeExists)
	h.must(admit(reserve(tenant, "new-4", tCommit)), OutcomeExists)
	h.must(admit(reserve(tenant, "old-3", tCommit+rejectTTL)), OutcomeCommitted) // expired while the scan waited
	if _, ok := h.f.Job(tenant, "job-"+tenant+"-old-4"); !ok {
		t.Fatal("a committed old job is missing")
	}
	if _, ok := h.f.Job(tenant, "job-"+tenant+"-never"); ok {
		t.Fatal("a job that never was")
	}
}

// TestStoreLayoutIsStable pins the store's format: the same log leaves the
// same keys and values in pebble, every table and order included (the
// snapshot tests see only the primary tables). A change of this digest is a
// change of store format version 1, which a store written by an earlier
// build must still open as.
func TestStoreLayoutIsStable(t *testing.T) {
	diskPassOnly(t)
	f := openFSM(t, t.TempDir(), Options{})
	f.ApplyBatch(genLog(31, 4000, 40))
	h := sha256.New()
	keys := 0
	f.s.store.Walk(nil, nil, func(k, v []byte) bool {
		keys++
		h.Write(binary.AppendUvarint(nil, uint64(len(k))))
		h.Write(k)
		h.Write(binary.AppendUvarint(nil, uint64(len(v))))
		h.Write(v)
		return true
	})
	const want = "7ffa40de104c5fda2140433e00fb891db74ba34640fd3eef4ca2dff86da23281"
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("%d keys, digest %s, want %s", keys, got, want)
	}
}
