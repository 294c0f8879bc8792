package localcluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrNoRSS is returned by RSS when the process's resident size cannot be
// read: it is not running, or /proc is not there (not Linux).
var ErrNoRSS = errors.New("localcluster: resident set size unavailable")

// RSS returns the resident set size in bytes of the node's current process,
// read from /proc/<pid>/status (VmRSS), as `ps` and the kernel's OOM killer
// see it.
func (n *Node) RSS() (int64, error) {
	pid := n.PID()
	if pid == 0 || !n.Running() {
		return 0, fmt.Errorf("%s: %w", n.Name, ErrNoRSS)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("%s: %w: %w", n.Name, ErrNoRSS, err)
	}
	return parseVmRSS(b)
}

// parseVmRSS reads the "VmRSS:  123456 kB" line of a /proc/<pid>/status.
func parseVmRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%w: malformed VmRSS line %q", ErrNoRSS, sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrNoRSS, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("%w: no VmRSS line", ErrNoRSS)
}
