//go:build unix

package managerd

import (
	"errors"
	"os"
	"syscall"

	"github.com/once-dev/once/internal/walstore"
)

// probeLock takes and releases an exclusive flock on path without creating
// it: walstore.ErrLocked if another open file description holds it.
func probeLock(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close() // closing releases the lock
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return walstore.ErrLocked
		}
		return err
	}
	return nil
}
