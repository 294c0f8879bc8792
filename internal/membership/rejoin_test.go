package membership

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

// A manager that crashed and comes back at once under its name on a new
// address (a container rescheduled), before the pool has found the old one
// dead, is listed alive at its new address once the old one is reclaimed:
// the pool does not keep the old address, nor lose the node.
func TestCrashedNodeRejoinsOnANewAddress(t *testing.T) {
	a := startPool(t, "a", RoleManager, nil)
	b := startPool(t, "b", RoleManager, func(c *Config) { c.Seeds = []string{a.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b}, "a", "b"))
	old := b.Addr()
	if err := b.Shutdown(); err != nil { // a crash: no leave
		t.Fatal(err)
	}
	b2 := startPool(t, "b", RoleManager, func(c *Config) { c.Seeds = []string{a.Addr()} })
	if b2.Addr() == old {
		t.Fatalf("the new b has the old address %s", old)
	}
	testutil.WaitFor(t, 2*waitTimeout, func() (bool, string) {
		for _, m := range a.Members() {
			if m.Name == "b" {
				return m.State == StateAlive && m.Addr == b2.Addr(), fmt.Sprintf("a to list b alive at %s (%+v)", b2.Addr(), m)
			}
		}
		return false, "a to list b"
	})
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b2}, "a", "b"))
}

// A pool of another datacenter is never merged, even when a seed list points
// across: the join fails and neither side lists the other.
func TestLANPoolRefusesAnotherDatacenter(t *testing.T) {
	a := startPool(t, "a", RoleManager, nil)
	b := startPool(t, "b", RoleManager, func(c *Config) { c.Meta.Datacenter = "dc2" })
	n, err := b.Join(context.Background(), []string{a.Addr()})
	if n != 0 || !errors.Is(err, ErrJoin) {
		t.Fatalf("a node of dc2 joined dc1's pool: n=%d err=%v", n, err)
	}
	// memberlist says only EOF: the error names the pool b belongs to, which
	// a's log names too ("discarding stream with unacceptable label").
	if !strings.Contains(err.Error(), `this node's pool is "once-lan/dc2"`) {
		t.Errorf("the join error does not name b's pool: %v", err)
	}
	never(t, time.Second, func() (bool, string) {
		for _, pair := range [][2]*Pool{{a, b}, {b, a}} {
			if ok, what := lists(pair[0], pair[1].cfg.NodeName); ok {
				return true, what
			}
		}
		return false, ""
	})
}

// A second node under a live member's name (an orchestrator's split brain:
// the old container still runs while the new one starts) does not evict the
// live one: every member keeps listing it alive at its own address, then
// and a few gossip rounds later, and nobody lists the newcomer's address.
func TestTwinDoesNotEvictTheLiveNode(t *testing.T) {
	a := startPool(t, "a", RoleManager, nil)
	b := startPool(t, "b", RoleManager, func(c *Config) { c.Seeds = []string{a.Addr()} })
	c := startPool(t, "c", RoleGate, func(c *Config) { c.Seeds = []string{a.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b, c}, "a", "b", "c"))
	twin := startPool(t, "b", RoleManager, func(cfg *Config) {
		cfg.Seeds = []string{a.Addr(), c.Addr()}
		cfg.Meta.RaftAddr = "127.0.0.1:3"
	})
	select {
	case <-twin.Joined():
	case <-time.After(waitTimeout):
		t.Fatal("the twin did not reach a seed")
	}
	never(t, 3*time.Second, func() (bool, string) {
		for _, p := range []*Pool{a, c} {
			for _, m := range p.Members() {
				if m.Name == "b" && (m.Addr != b.Addr() || m.State != StateAlive || m.Meta.RaftAddr != "127.0.0.1:2") {
					return true, fmt.Sprintf("%s lists b as %+v, not alive at %s", p.cfg.NodeName, m, b.Addr())
				}
			}
		}
		return false, ""
	})
}
