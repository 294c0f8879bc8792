package testutil

import (
	"net"
	"strconv"
	"testing"
)

// Ports handed out are free, and never handed out twice: clusters that pick
// their ports before any of them binds (a federation's datacenters) must not
// share one. Without the memory of what was handed out, 20 calls of 10 from
// the ~22,000 ports below the ephemeral range repeat one most of the time.
func TestFreePortsNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		ports, err := FreePorts(10)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Fatalf("port %d is not free: %v", p, err)
			}
			ln.Close()
		}
	}
}
