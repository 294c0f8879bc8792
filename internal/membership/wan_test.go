package membership

import (
	"fmt"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

// TestWANPoolSpansDatacentersAndStaysApartFromLAN: managers of two
// datacenters in WAN pools see each other (Managers(dc) per datacenter), and a
// LAN pool seeded with a WAN member's address never joins it: the labels
// differ.
func TestWANPoolSpansDatacentersAndStaysApartFromLAN(t *testing.T) {
	wan := func(dc string, seeds ...string) func(*Config) {
		return func(c *Config) {
			c.WAN = true
			c.Meta.Datacenter = dc
			c.Seeds = seeds
		}
	}
	a := startPool(t, "m1.dc1", RoleManager, wan("dc1"))
	b := startPool(t, "m1.dc2", RoleManager, wan("dc2", a.Addr()))
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b}, "m1.dc1", "m1.dc2"))
	for _, p := range []*Pool{a, b} {
		if n1, n2 := len(p.Managers("dc1")), len(p.Managers("dc2")); n1 != 1 || n2 != 1 {
			t.Fatalf("%s sees %d managers in dc1 and %d in dc2, want 1 and 1", p.cfg.NodeName, n1, n2)
		}
	}

	lan := startPool(t, "m2", RoleManager, func(c *Config) { c.Seeds = []string{a.Addr()} })
	never(t, 2*time.Second, func() (bool, string) {
		if _, ok := memberState(a, "m2"); ok {
			return true, "the WAN pool lists the LAN node m2"
		}
		if _, ok := memberState(lan, "m1.dc1"); ok {
			return true, "the LAN node lists the WAN node m1.dc1"
		}
		return false, ""
	})
}

func TestWANProfileValidates(t *testing.T) {
	c := Config{NodeName: "n", Profile: ProfileWAN, Meta: Meta{Role: RoleGate, Datacenter: "dc1", NodeID: "n", Version: 1}}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate with the wan profile: %v", err)
	}
	if got := c.memberlistConfig().ProbeInterval; got != 5*time.Second {
		t.Fatalf("wan profile probe interval %v, want memberlist's WAN default 5s", got)
	}
}

// When every manager of a datacenter comes back on new addresses (each
// crashed, none left), the other datacenters' WAN pools list them at their
// new addresses: none is kept at an old one, none is lost.
func TestWANFollowsADatacenterRestartedOnNewAddresses(t *testing.T) {
	wan := func(dc string, seeds ...string) func(*Config) {
		return func(c *Config) {
			c.WAN = true
			c.Meta.Datacenter = dc
			c.Seeds = seeds
		}
	}
	a := startPool(t, "m1.dc1", RoleManager, wan("dc1"))
	b1 := startPool(t, "m1.dc2", RoleManager, wan("dc2", a.Addr()))
	b2 := startPool(t, "m2.dc2", RoleManager, wan("dc2", b1.Addr()))
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b1, b2}, "m1.dc1", "m1.dc2", "m2.dc2"))
	for _, p := range []*Pool{b1, b2} {
		if err := p.Shutdown(); err != nil { // crashed: no leave
			t.Fatal(err)
		}
	}
	n1 := startPool(t, "m1.dc2", RoleManager, wan("dc2", a.Addr()))
	n2 := startPool(t, "m2.dc2", RoleManager, wan("dc2", n1.Addr()))
	testutil.WaitFor(t, 3*waitTimeout, func() (bool, string) {
		want := map[string]string{"m1.dc2": n1.Addr(), "m2.dc2": n2.Addr()}
		got := map[string]string{}
		for _, m := range a.Managers("dc2") {
			got[m.Name] = m.Addr
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("dc1 to list dc2's managers at %v, not %v", want, got)
	})
}
