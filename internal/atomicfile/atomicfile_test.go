package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteReplaces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := WriteBytes(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	// A temporary file left by a crash mid-write is replaced, not appended to.
	if err := os.WriteFile(path+Suffix, []byte("left by a crash, longer than the next content"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteBytes(path, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if got := read(t, path); got != "two" {
		t.Fatalf("content %q, want %q", got, "two")
	}
	if _, err := os.Stat(path + Suffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file after a write: %v", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Fatalf("permissions %v, want 0600", perm)
	}
}

// A temporary file left by an interrupted write, or put there by someone
// else, is not reused: with O_TRUNC its permissions became path's (0644 here,
// for a file promised 0600), and a symbolic link there sent the content to
// its target, outside the rename.
func TestWriteDoesNotReuseALeftoverTemporaryFile(t *testing.T) {
	t.Run("its permissions", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(path+Suffix, []byte("left over"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path+Suffix, 0o644); err != nil { // whatever the umask
			t.Fatal(err)
		}
		if err := WriteBytes(path, []byte("new")); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := st.Mode().Perm(); perm != 0o600 {
			t.Fatalf("permissions %v, want 0600", perm)
		}
	})
	t.Run("a symbolic link", func(t *testing.T) {
		dir := t.TempDir()
		path, target := filepath.Join(dir, "f"), filepath.Join(dir, "elsewhere")
		if err := os.WriteFile(target, []byte("untouched"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, path+Suffix); err != nil {
			t.Fatal(err)
		}
		if err := WriteBytes(path, []byte("new")); err != nil {
			t.Fatal(err)
		}
		if got := read(t, target); got != "untouched" {
			t.Fatalf("the link's target holds %q, want it untouched", got)
		}
		st, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Mode().IsRegular() || read(t, path) != "new" {
			t.Fatalf("%s is %v holding %q, want a regular file holding %q", path, st.Mode(), read(t, path), "new")
		}
	})
}

func TestFailedWriteKeepsTheOldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := WriteBytes(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		if _, err := io.WriteString(w, "half of the new"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want the writer's error", err)
	}
	if got := read(t, path); got != "old" {
		t.Fatalf("content %q after a failed write, want %q", got, "old")
	}
	if _, err := os.Stat(path + Suffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file after a failed write: %v", err)
	}
}

func TestWriteIntoMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "f")
	if err := WriteBytes(path, []byte("x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Write into a missing directory = %v, want ErrNotExist", err)
	}
}

// TestMkdirAll: MkdirAll creates the missing directories as os.MkdirAll does,
// is a no-op on an existing one and fails where a file stands in the way. (The
// fsync of each new directory's parent cannot be observed without a crash.)
func TestMkdirAll(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "c")
	for range 2 {
		if err := MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Fatalf("stat %s: %v, %v", dir, st, err)
		}
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(file, "d"), 0o750); err == nil {
		t.Fatal("MkdirAll under a file: no error")
	}
}

// parentsUp returns the parent of d and of each of its ancestors, bottom up:
// what MkdirAll(d) fsyncs.
func parentsUp(d string) []string {
	var ps []string
	for ; filepath.Dir(d) != d; d = filepath.Dir(d) {
		ps = append(ps, filepath.Dir(d))
	}
	return ps
}

// TestMkdirAllSyncsParents: MkdirAll fsyncs the parent of each directory it
// creates, the first existing ancestor included, and the parents of dir and
// of its ancestors when they already exist: a call interrupted after the
// creation, before its fsync, leaves a directory a crash could still take
// away, which the next call must make durable.
func TestMkdirAllSyncsParents(t *testing.T) {
	root := t.TempDir()
	var synced []string
	record := func(d string) error {
		synced = append(synced, d)
		return SyncDir(d)
	}
	a := filepath.Join(root, "a")
	b := filepath.Join(a, "b")
	c := filepath.Join(b, "c")
	if err := mkdirAll(c, 0o750, record); err != nil {
		t.Fatal(err)
	}
	if want := append([]string{b, a, root}, parentsUp(root)...); !slices.Equal(synced, want) {
		t.Fatalf("creating %s fsynced %q, want %q", c, synced, want)
	}

	// The directory an interrupted call created, not yet durable.
	d := filepath.Join(c, "d")
	if err := os.Mkdir(d, 0o750); err != nil {
		t.Fatal(err)
	}
	synced = nil
	if err := mkdirAll(d, 0o750, record); err != nil {
		t.Fatal(err)
	}
	if want := parentsUp(d); !slices.Equal(synced, want) {
		t.Fatalf("for an existing %s fsynced %q, want %q", d, synced, want)
	}

	// A failed fsync is MkdirAll's error.
	boom := errors.New("boom")
	if err := mkdirAll(d, 0o750, func(string) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("MkdirAll with a failing fsync = %v, want it", err)
	}
}

// TestMkdirAllSyncsWhatAnInterruptedCallCreated: a call killed after
// os.MkdirAll created several levels, before it fsynced them, leaves them
// all in place and none durable. The next call finds them all and must make
// each durable, not only the last: a crash could otherwise take the
// topmost away, and everything below it, the log and the ledger included.
func TestMkdirAllSyncsWhatAnInterruptedCallCreated(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "a")
	b := filepath.Join(a, "b")
	c := filepath.Join(b, "c")
	if err := os.MkdirAll(c, 0o750); err != nil { // the interrupted call
		t.Fatal(err)
	}
	for _, dir := range []string{c, filepath.Join(c, "d")} {
		synced := map[string]bool{}
		record := func(d string) error {
			synced[d] = true
			return SyncDir(d)
		}
		if err := mkdirAll(dir, 0o750, record); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{b, a, root} { // the parents of c, b and a
			if !synced[p] {
				t.Errorf("MkdirAll(%s) after an interrupted MkdirAll(%s) did not fsync %s", dir, c, p)
			}
		}
	}
}

// TestMkdirAllSkipsUnreadableAncestors: above what it creates and dir's
// parent, MkdirAll skips an ancestor it may not open (a 0711 home
// directory), which it could not have created into either, or whose file
// system does not fsync directories; other errors (EIO), and a refusal
// where it created, are its error.
func TestMkdirAllSkipsUnreadableAncestors(t *testing.T) {
	root := t.TempDir()
	a := filepath.Join(root, "a")
	b := filepath.Join(a, "b")
	if err := os.MkdirAll(a, 0o750); err != nil {
		t.Fatal(err)
	}
	denyAbove := func(deny string) func(string) error {
		return func(d string) error {
			if d == deny {
				return &fs.PathError{Op: "open", Path: d, Err: fs.ErrPermission}
			}
			return SyncDir(d)
		}
	}
	if err := mkdirAll(b, 0o750, denyAbove(filepath.Dir(root))); err != nil {
		t.Fatalf("MkdirAll with an unreadable ancestor above: %v", err)
	}
	einval := func(d string) error {
		if d == filepath.Dir(root) {
			return &fs.PathError{Op: "sync", Path: d, Err: syscall.EINVAL}
		}
		return SyncDir(d)
	}
	if err := mkdirAll(b, 0o750, einval); err != nil {
		t.Fatalf("MkdirAll with an ancestor above on a file system without directory fsync: %v", err)
	}
	eio := func(d string) error {
		if d == filepath.Dir(root) {
			return &fs.PathError{Op: "sync", Path: d, Err: syscall.EIO}
		}
		return SyncDir(d)
	}
	if err := mkdirAll(b, 0o750, eio); !errors.Is(err, syscall.EIO) {
		t.Fatalf("MkdirAll with an ancestor whose fsync fails = %v, want EIO", err)
	}
	if err := mkdirAll(filepath.Join(b, "c"), 0o750, denyAbove(b)); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("MkdirAll whose new directory's parent cannot be fsynced = %v, want the error", err)
	}
	if err := mkdirAll(b, 0o750, denyAbove(a)); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("MkdirAll whose parent cannot be fsynced = %v, want the error", err)
	}
}
