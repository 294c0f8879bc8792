package localcluster

import (
	"errors"
	"os"
	"testing"

	"github.com/once-dev/once/internal/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyTestMain(m) }

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS([]byte("Name:\tmanager\nVmPeak:\t  999 kB\nVmRSS:\t   123456 kB\nRssAnon:\t 1 kB\n"))
	if err != nil || got != 123456<<10 {
		t.Fatalf("parseVmRSS = %d, %v; want %d", got, err, 123456<<10)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tmany kB\n"} {
		if _, err := parseVmRSS([]byte(bad)); !errors.Is(err, ErrNoRSS) {
			t.Errorf("parseVmRSS(%q) = %v, want ErrNoRSS", bad, err)
		}
	}
}

// The test process's own status parses: the format is the kernel's.
func TestParseOwnVmRSS(t *testing.T) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc: not Linux")
	}
	if rss, err := parseVmRSS(b); err != nil || rss <= 0 {
		t.Fatalf("own VmRSS: %d, %v", rss, err)
	}
}

func TestRSSOfANodeNeverStarted(t *testing.T) {
	if _, err := (&Node{Name: "manager1"}).RSS(); !errors.Is(err, ErrNoRSS) {
		t.Fatalf("RSS of a node never started: %v, want ErrNoRSS", err)
	}
}
