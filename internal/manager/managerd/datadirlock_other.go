//go:build !unix

package managerd

// probeLock checks nothing where walstore takes no lock (flock is unix-only).
func probeLock(string) error { return nil }
