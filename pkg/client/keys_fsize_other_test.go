//go:build !linux

package client

import "errors"

// keysLimitFileSize is Linux's only (TestKeysOnAFullDisk).
func keysLimitFileSize(int64) error { return errors.New("RLIMIT_FSIZE is set on Linux only") }
