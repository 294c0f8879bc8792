//go:build !unix

package walstore

import (
	"os"
	"path/filepath"
)

// lockDir opens dir/LOCK without locking it: flock is unix-only, and the
// manager runs on Linux.
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o640)
}
