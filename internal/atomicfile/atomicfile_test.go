package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
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
