//go:build unix

package client

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lockFile takes an exclusive advisory lock (flock) on path, created if
// missing, waiting for another holder until ctx ends (a *KeysLockedError
// naming the holder's process id when the file records it); unlock
// releases it. flock locks an open file description: two Keys of one
// process exclude each other too. The holder writes its process id in the
// file while it holds the lock, and empties it before releasing it.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	// flock has no timeout: try it, and wait between tries.
	for wait := time.Millisecond; ; wait = min(2*wait, 16*time.Millisecond) {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == syscall.EINTR {
			continue
		}
		if err != syscall.EWOULDBLOCK {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			b, _ := os.ReadFile(path)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			f.Close()
			return nil, &KeysLockedError{Path: path, PID: pid, Err: ctx.Err()}
		case <-t.C:
		}
	}
	switch {
	case err == nil:
	case err == syscall.ENOLCK || err == syscall.EOPNOTSUPP || err == syscall.ENOTSUP: // one errno on Linux, two elsewhere
		// A file system without locks (some network ones): as where
		// flock does not exist, one process at a time.
		f.Close()
		return func() {}, nil
	default:
		f.Close()
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = f.Truncate(0)
		f.Close() // closing the file releases the lock
	}, nil
}
