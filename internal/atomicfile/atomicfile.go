// Package atomicfile replaces a file atomically and durably: the new content
// is written to a temporary file beside it, fsynced, renamed over the old one,
// and the directory is fsynced so that the rename survives a crash. A reader
// sees the old content or the new, never a part; after a crash the file is
// the old one or the new one.
//
// It replaces four hand-written copies (the ledger engine's CURRENT file, the
// manager's known datacenters, oncectl's snapshot archive and the Go client's
// keys file). google/renameio does the same but leaves the directory's fsync
// to the caller.
package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Suffix names the temporary file: path+Suffix, one per path, so a write
// interrupted by a crash leaves at most one, which the next write replaces.
const Suffix = ".tmp"

// Write replaces path with what write writes; the new file has permissions
// 0600 (those of a file it replaces are not kept). On a failure before the
// rename, path is unchanged and the temporary file is removed; when only the
// directory's fsync after the rename fails (the disk failing), path already
// holds the new content, which a crash could still undo. Writers of the same
// path must not run at once.
//
// A temporary file left by an interrupted write is removed, not reused: its
// permissions (or, for a symbolic link, its target) would otherwise become
// those of path, or receive the content.
func Write(path string, write func(io.Writer) error) (err error) {
	tmp := path + Suffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// WriteBytes is Write of data.
func WriteBytes(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// MkdirAll creates dir and any missing parents, as os.MkdirAll does, and
// makes dir durable: it fsyncs the parent of dir and of each of its
// ancestors, up to the root. A crash after MkdirAll returns cannot take
// away the directory, and with it what is later made durable inside it (a
// node's first Raft log, its ledger). Directories that already exist are
// made durable too: a call interrupted between the creation and its fsyncs
// (a crash, a failed fsync) leaves directories in place but not durable,
// possibly several levels of them, and the next call, which finds them,
// cannot tell which, so it must still make each of them so. Above the
// directories this call creates and dir's parent, an ancestor that cannot
// be opened for want of permission is skipped (this process could not have
// created what it holds either), and so is one whose file system does not
// fsync directories (EINVAL, ENOTSUP).
func MkdirAll(dir string, perm os.FileMode) error {
	return mkdirAll(dir, perm, SyncDir)
}

// mkdirAll is MkdirAll with the directory fsync given (a test records it).
func mkdirAll(dir string, perm os.FileMode, syncDir func(string) error) error {
	dir = filepath.Clean(dir)
	created := map[string]bool{dir: true} // whose parent's fsync must succeed
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		created[d] = true
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for d := dir; filepath.Dir(d) != d; d = filepath.Dir(d) {
		err := syncDir(filepath.Dir(d))
		if err != nil && (created[d] || !skippable(err)) {
			return err
		}
	}
	return nil
}

// skippable reports whether a failed fsync of an ancestor MkdirAll did not
// create says nothing about the durability of what it created.
func skippable(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP)
}

// SyncDir fsyncs a directory, making the entries created, renamed or removed
// in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
