package membership

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/once-dev/once/internal/testutil"
)

// TestClockOffsetsMeasured skews two nodes' clocks (Config.Now) and checks
// that every node measures the others' offsets from its probes.
func TestClockOffsetsMeasured(t *testing.T) {
	skews := map[string]time.Duration{"a": 0, "b": 10 * time.Minute, "c": -10 * time.Minute}
	var pools []*Pool
	var seed string
	for _, name := range []string{"a", "b", "c"} {
		skew := skews[name]
		p := startPool(t, name, RoleManager, func(c *Config) {
			c.Now = func() time.Time { return time.Now().Add(skew) }
			if seed != "" {
				c.Seeds = []string{seed}
			}
		})
		if seed == "" {
			seed = p.Addr()
		}
		pools = append(pools, p)
	}
	testutil.WaitFor(t, waitTimeout, seesAlive(pools, "a", "b", "c"))
	// Loopback round trips are short; allow for a loaded machine.
	const tolerance = 250 * time.Millisecond
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		for _, p := range pools {
			self := p.cfg.NodeName
			got := map[string]PeerOffset{}
			for _, o := range p.ClockOffsets() {
				got[o.Name] = o
			}
			for name, skew := range skews {
				if name == self {
					continue
				}
				o, ok := got[name]
				want := skew - skews[self]
				if !ok || o.Offset < want-tolerance || o.Offset > want+tolerance || o.NodeID != "id-"+name || o.Samples == 0 {
					return false, fmt.Sprintf("%s to measure %s at %v (got %+v, %v)", self, name, want, o, ok)
				}
			}
			if _, ok := got[self]; ok {
				return false, self + " lists itself"
			}
		}
		return true, ""
	})
}

// TestClockOffsetsDropDeparted checks that a member that is gone no longer
// counts.
func TestClockOffsetsDropDeparted(t *testing.T) {
	a := startPool(t, "a", RoleManager, nil)
	b := startPool(t, "b", RoleManager, func(c *Config) {
		c.Seeds = []string{a.Addr()}
		c.Now = func() time.Time { return time.Now().Add(time.Hour) }
	})
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		offs := a.ClockOffsets()
		return len(offs) == 1 && offs[0].Name == "b" && offs[0].Offset > 50*time.Minute, fmt.Sprintf("a to measure b (%+v)", offs)
	})
	if err := b.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		offs := a.ClockOffsets()
		return len(offs) == 0, fmt.Sprintf("a to drop b (%+v)", offs)
	})
}

func TestAckPayloadMalformedIgnored(t *testing.T) {
	a := startPool(t, "a", RoleManager, nil)
	d := (*pingDelegate)(a)
	if got := d.AckPayload(); len(got) != 9 || got[0] != ackPayloadVersion {
		t.Fatalf("AckPayload = %x", got)
	}
	a.mu.Lock()
	a.members["x"] = &Member{Name: "x", State: StateAlive}
	a.mu.Unlock()
	for _, payload := range [][]byte{nil, {2, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 0}, make([]byte, 10)} {
		d.NotifyPingComplete(nodeNamed("x"), time.Millisecond, payload)
	}
	if offs := a.ClockOffsets(); len(offs) != 0 {
		t.Fatalf("malformed payloads were counted: %+v", offs)
	}
	d.NotifyPingComplete(nodeNamed("x"), time.Millisecond, d.AckPayload())
	if offs := a.ClockOffsets(); len(offs) != 1 || offs[0].Name != "x" {
		t.Fatalf("a well-formed payload was not counted: %+v", offs)
	}
}

func nodeNamed(name string) *memberlist.Node { return &memberlist.Node{Name: name} }

// A member that failed and comes back is a new process, maybe on a new
// address and with its clock set right: the samples of its former life do
// not count for it (they would, for up to clockSampleMaxAge, until fresh
// probes outvoted them, had nothing asked for the offsets while it was
// down).
func TestClockOffsetsForgetAFormerLife(t *testing.T) {
	a := startPool(t, "a", RoleManager, nil)
	meta, err := Meta{Role: RoleManager, Datacenter: "dc1", NodeID: "id-x", RaftAddr: "127.0.0.1:2"}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	node := func(port uint16) *memberlist.Node {
		return &memberlist.Node{Name: "x", Addr: net.IPv4(127, 0, 0, 1), Port: port, Meta: meta}
	}
	ev := (*eventDelegate)(a)
	ev.NotifyJoin(node(1001))
	// x's clock an hour ahead, as measured on a probe.
	ahead := make([]byte, 1, 9)
	ahead[0] = ackPayloadVersion
	ahead = binary.BigEndian.AppendUint64(ahead, uint64(time.Now().Add(time.Hour).UnixNano()))
	(*pingDelegate)(a).NotifyPingComplete(node(1001), time.Millisecond, ahead)
	if offs := a.ClockOffsets(); len(offs) != 1 || offs[0].Offset < 50*time.Minute {
		t.Fatalf("x not measured an hour ahead: %+v", offs)
	}
	ev.NotifyLeave(node(1001)) // a failure
	ev.NotifyJoin(node(1002))  // back, on another address
	if offs := a.ClockOffsets(); len(offs) != 0 {
		t.Fatalf("the offsets of x's former life still count: %+v", offs)
	}
}
