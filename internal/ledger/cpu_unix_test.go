//go:build unix

package ledger

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the test process has used, every thread (the
// FSM's and pebble's flushes and compactions) together.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
