//go:build unix

package client

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock (flock) on path, created if
// missing, waiting for another holder; unlock releases it. flock locks an
// open file description: two Keys of one process exclude each other too.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
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
	return func() { f.Close() }, nil // closing the file releases the lock
}
