package membership

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/once-dev/once/internal/testutil"
)

// stallDial is a transport whose stream dials, while stall is set, hang
// until release is closed or the dial's timeout passes (a member that stopped
// answering TCP); inflight counts the dials in progress.
type stallDial struct {
	memberlist.NodeAwareTransport
	stall    *atomic.Bool
	inflight *atomic.Int32
	release  chan struct{}
}

func (s *stallDial) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if s.stall.Load() {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-s.release:
		case <-t.C:
		}
		return nil, errors.New("stalled dial")
	}
	return s.NodeAwareTransport.DialAddressTimeout(a, timeout)
}

// A leaving notice Leave gave up waiting for is still being sent; Shutdown
// must not return before it is done (no goroutine of the pool outlives
// Shutdown).
func TestShutdownWaitsForLeavingNotices(t *testing.T) {
	var stall atomic.Bool
	var inflight atomic.Int32
	release := make(chan struct{})
	defer close(release)
	a := startPool(t, "a", RoleManager, func(c *Config) {
		c.WrapTransport = func(nt memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
			return &stallDial{NodeAwareTransport: nt, stall: &stall, inflight: &inflight, release: release}
		}
	})
	b := startPool(t, "b", RoleManager, func(c *Config) { c.Seeds = []string{a.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b}, "a", "b"))

	stall.Store(true)
	if err := a.Leave(100 * time.Millisecond); !errors.Is(err, ErrBroadcastTimeout) {
		t.Fatalf("leave with b unreachable over TCP: %v; want ErrBroadcastTimeout", err)
	}
	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if n := inflight.Load(); n != 0 {
		t.Fatalf("%d leaving notices still being sent after Shutdown returned", n)
	}
}
