//go:build unix

package walstore

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the store's exclusive lock: an flock on dir/LOCK, released
// when the returned file is closed (or the process dies). It returns
// ErrLocked if another open store, in this process or another, holds it.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		_ = f.Close() // the lock was not taken
		return nil, err
	}
	return f, nil
}

// flock takes an exclusive flock on f without waiting: ErrLocked if another
// open file description holds one.
func flock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}
