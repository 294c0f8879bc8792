package membership

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

func TestPoolJoinsThroughOneSeedEach(t *testing.T) {
	m1 := startPool(t, "m1", RoleManager, nil)
	m2 := startPool(t, "m2", RoleManager, func(c *Config) { c.Seeds = []string{m1.Addr()} })
	g1 := startPool(t, "g1", RoleGate, func(c *Config) { c.Seeds = []string{m2.Addr()} })
	pools := []*Pool{m1, m2, g1}

	for _, p := range pools {
		select {
		case <-p.Joined():
		case <-time.After(waitTimeout):
			t.Fatalf("%s never joined", p.cfg.NodeName)
		}
	}
	testutil.WaitFor(t, waitTimeout, seesAlive(pools, "m1", "m2", "g1"))

	mgrs := g1.Managers("dc1")
	if len(mgrs) != 2 || mgrs[0].Meta.NodeID != "id-m1" || mgrs[1].Meta.NodeID != "id-m2" {
		t.Fatalf("Managers(dc1) = %+v", mgrs)
	}
	if mgrs[0].Meta.RaftAddr != "127.0.0.1:2" || mgrs[0].Addr != m1.Addr() {
		t.Fatalf("manager entry = %+v (m1 at %s)", mgrs[0], m1.Addr())
	}
	if got := g1.Managers("dc2"); len(got) != 0 {
		t.Fatalf("Managers(dc2) = %+v", got)
	}
	if l := g1.LocalNode(); l.Name != "g1" || l.Meta.Role != RoleGate || l.Addr != g1.Addr() || l.State != StateAlive {
		t.Fatalf("LocalNode = %+v", l)
	}
	// A seed that is this node itself is not a pool to join.
	if n, err := m1.Join(context.Background(), []string{m1.Addr()}); n != 0 || err != nil {
		t.Fatalf("self join = %d, %v", n, err)
	}
}

func TestSeedRetryUntilSeedStarts(t *testing.T) {
	// The second node's seed is down when it starts and comes up later.
	seed, port := downSeed(t)
	late := startPool(t, "late", RoleGate, func(c *Config) { c.Seeds = []string{seed} })
	select {
	case <-late.Joined():
		t.Fatal("joined a seed that is not running")
	default:
	}
	first := startPool(t, "first", RoleManager, func(c *Config) { c.BindPort = port })
	select {
	case <-late.Joined():
	case <-time.After(waitTimeout):
		t.Fatal("the background retry never reached the seed")
	}
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{late, first}, "late", "first"))
}

// TestUnansweredSeedIsRetriedAfterJoining: a node whose seeds name two parts
// of the pool (a WAN pool's seeds: a manager of its own datacenter and one of
// another) and that reaches only one of them keeps trying the other, so the
// parts merge when it comes up instead of staying two pools for good.
func TestUnansweredSeedIsRetriedAfterJoining(t *testing.T) {
	down, port := downSeed(t)
	near := startPool(t, "near", RoleManager, nil)
	joiner := startPool(t, "joiner", RoleManager, func(c *Config) { c.Seeds = []string{down, near.Addr()} })
	select {
	case <-joiner.Joined():
	case <-time.After(waitTimeout):
		t.Fatal("never joined the seed that was up")
	}
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{near, joiner}, "near", "joiner"))
	far := startPool(t, "far", RoleManager, func(c *Config) { c.BindPort = port })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{near, joiner, far}, "near", "joiner", "far"))
}

func TestUpdateMetaPropagates(t *testing.T) {
	m1 := startPool(t, "m1", RoleManager, nil)
	m2 := startPool(t, "m2", RoleManager, func(c *Config) { c.Seeds = []string{m1.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{m1, m2}, "m1", "m2"))
	events, cancel := m1.Subscribe()
	defer cancel()

	meta := m2.LocalNode().Meta
	meta.HasRaftState = true
	meta.RPCAddr = "127.0.0.1:9999"
	if err := m2.UpdateMeta(meta); err != nil {
		t.Fatalf("UpdateMeta: %v", err)
	}
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		for _, m := range m1.Managers("dc1") {
			if m.Name == "m2" {
				return m.Meta.HasRaftState && m.Meta.RPCAddr == "127.0.0.1:9999", fmt.Sprintf("m1 to see m2's new meta, has %+v", m.Meta)
			}
		}
		return false, "m1 to list m2"
	})
	// The subscriber got the update.
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev := <-events:
			if ev.Member.Name == "m2" && ev.Type == EventUpdate && ev.Member.Meta.HasRaftState {
				goto sticky
			}
		case <-deadline:
			t.Fatal("no update event for m2")
		}
	}
sticky:
	// HasRaftState is sticky, and the identity cannot change.
	meta.HasRaftState = false
	if err := m2.UpdateMeta(meta); err != nil {
		t.Fatal(err)
	}
	if !m2.LocalNode().Meta.HasRaftState {
		t.Fatal("HasRaftState went back to false")
	}
	meta.NodeID = "other"
	if err := m2.UpdateMeta(meta); !errors.Is(err, ErrInvalidMeta) {
		t.Fatalf("changing NodeID: %v", err)
	}
	// ModifyMeta owns the bootstrap fields; UpdateMeta keeps them.
	if err := m2.ModifyMeta(func(m *Meta) { m.Bootstrap = BootstrapMeta{Expect: 3, Vote: 42} }); err != nil {
		t.Fatal(err)
	}
	meta = m2.LocalNode().Meta
	meta.Bootstrap = BootstrapMeta{}
	meta.Version = 2
	if err := m2.UpdateMeta(meta); err != nil {
		t.Fatal(err)
	}
	if got := m2.LocalNode().Meta; got.Bootstrap.Vote != 42 || got.Version != 2 {
		t.Fatalf("meta after UpdateMeta = %+v", got)
	}
}

func TestLeaveAndFailureAreTold(t *testing.T) {
	a := startPool(t, "a", RoleManager, nil)
	b := startPool(t, "b", RoleManager, func(c *Config) { c.Seeds = []string{a.Addr()} })
	c := startPool(t, "c", RoleManager, func(c *Config) { c.Seeds = []string{a.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b, c}, "a", "b", "c"))
	events, cancel := a.Subscribe()
	defer cancel()

	before := time.Now()
	if err := b.Leave(5 * time.Second); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(); err != nil { // no Leave: a failure
		t.Fatal(err)
	}
	got := map[string]EventType{}
	deadline := time.After(waitTimeout)
	for len(got) < 2 {
		select {
		case ev := <-events:
			if ev.Type == EventLeave || ev.Type == EventFailed {
				got[ev.Member.Name] = ev.Type
			}
		case <-deadline:
			t.Fatalf("departure events so far: %v", got)
		}
	}
	if got["b"] != EventLeave || got["c"] != EventFailed {
		t.Fatalf("events = %v; want b left, c failed", got)
	}
	states := map[string]Member{}
	for _, m := range a.Members() {
		states[m.Name] = m
	}
	if states["b"].State != StateLeft || states["c"].State != StateDead || states["a"].State != StateAlive {
		t.Fatalf("members = %+v", states)
	}
	if ls := states["c"].LastSeen; ls.Before(before) || ls.After(time.Now()) {
		t.Fatalf("c last seen %v", ls)
	}
	if len(a.Managers("dc1")) != 1 {
		t.Fatalf("alive managers = %+v", a.Managers("dc1"))
	}
}

func TestSlowSubscriberDoesNotBlock(t *testing.T) {
	a := startPool(t, "a", RoleManager, nil)
	_, cancelSlow := a.Subscribe() // never read
	defer cancelSlow()
	b := startPool(t, "b", RoleManager, func(c *Config) {
		c.Seeds = []string{a.Addr()}
		c.BroadcastTimeout = 20 * time.Millisecond // do not wait for each update to spread
	})
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b}, "a", "b"))
	// Far more updates than the channel holds: memberlist must not stall.
	for i := range 3 * subscriberBuffer {
		if err := b.ModifyMeta(func(m *Meta) { m.Version = i + 10 }); err != nil && !errors.Is(err, ErrBroadcastTimeout) {
			t.Fatal(err)
		}
	}
	want := 3*subscriberBuffer - 1 + 10
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		for _, m := range a.Members() {
			if m.Name == "b" && m.Meta.Version == want {
				return true, ""
			}
		}
		return false, "a to see b's last version"
	})
}

func TestSubscriberCoalesces(t *testing.T) {
	s := &subscriber{pending: map[string]Event{}, wake: make(chan struct{}, 1), out: make(chan Event, 1),
		done: make(chan struct{}), exited: make(chan struct{})}
	mem := func(name string, v int) Member { return Member{Name: name, Meta: Meta{Version: v}} }
	s.push(Event{EventJoin, mem("x", 1)})
	s.push(Event{EventJoin, mem("y", 1)})
	s.push(Event{EventUpdate, mem("x", 2)})
	s.push(Event{EventUpdate, mem("x", 3)})
	s.push(Event{EventFailed, mem("y", 2)})
	var got []Event
	for {
		ev, ok := s.pop()
		if !ok {
			break
		}
		got = append(got, ev)
	}
	if len(got) != 2 || got[0].Member.Name != "x" || got[0].Type != EventJoin || got[0].Member.Meta.Version != 3 ||
		got[1].Member.Name != "y" || got[1].Type != EventFailed {
		t.Fatalf("coalesced = %+v", got)
	}
	go s.run()
	s.close()
	if _, ok := <-s.out; ok {
		t.Fatal("channel not closed")
	}
}

func TestShutdownClosesSubscriptions(t *testing.T) {
	p := startPool(t, "solo", RoleGate, nil)
	ch, cancel := p.Subscribe()
	if err := p.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch; ok {
		t.Fatal("open after shutdown")
	}
	cancel()
	if err := p.UpdateMeta(p.LocalNode().Meta); !errors.Is(err, ErrShutdown) {
		t.Fatalf("UpdateMeta after shutdown: %v", err)
	}
	if err := p.Leave(time.Second); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Leave after shutdown: %v", err)
	}
	if _, err := p.Join(context.Background(), []string{"127.0.0.1:1"}); !errors.Is(err, ErrShutdown) {
		t.Fatalf("Join after shutdown: %v", err)
	}
	ch2, cancel2 := p.Subscribe()
	defer cancel2()
	if _, ok := <-ch2; ok {
		t.Fatal("subscription after shutdown is open")
	}
}

// The enums name themselves in logs; a value without a name says its number.
func TestEnumNames(t *testing.T) {
	for _, tc := range []struct {
		v    fmt.Stringer
		want string
	}{
		{StateAlive, "alive"}, {StateSuspect, "suspect"}, {StateLeft, "left"}, {State(-1), "state(-1)"}, {State(7), "state(7)"},
		{EventJoin, "join"}, {EventFailed, "failed"}, {EventType(0), "event(0)"},
		{KeyringList, "list"}, {KeyringRemove, "remove"}, {KeyringOp(0), "keyring-op(0)"}, {KeyringOp(9), "keyring-op(9)"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%#v: %q, want %q", tc.v, got, tc.want)
		}
	}
}
