package client

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// keysLimitFileSize sets the soft RLIMIT_FSIZE to n bytes (n < 0: the hard
// limit): a write past it fails with EFBIG, as one fails with ENOSPC on a
// full disk (Go ignores SIGXFSZ).
func keysLimitFileSize(n int64) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &l); err != nil {
		return err
	}
	l.Cur = l.Max
	if n >= 0 {
		l.Cur = uint64(n)
	}
	return syscall.Setrlimit(syscall.RLIMIT_FSIZE, &l)
}

// TestKeysOnAFullDisk: a process whose reservation cannot be written (the
// state file's write fails part way, as on a full disk) gets ErrKeysState
// from Next, every time, never a key of the unreserved block; the state
// file keeps the last block written whole; once writes work again Next
// goes on after it. Guard: the code was right.
func TestKeysOnAFullDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	cmd := keysChildCmd(t, "fullDisk", path, 2)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v; printed %q", err, out)
	}
	var got []string
	for sc := bufio.NewScanner(strings.NewReader(string(out))); sc.Scan(); {
		got = append(got, sc.Text())
	}
	want := []string{"key 1", "key 2", "refused true", "refused true", "key 3"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("child printed %q, want %q", got, want)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != `{"client_id":"c","reserved":4}`+"\n" {
		t.Fatalf("state file %q, %v", b, err)
	}
}
