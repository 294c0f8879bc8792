// Package testutil holds helpers shared by the tests of several packages and
// by the tests module's tooling: goleak with a grace period, the one polling
// helper (WaitFor), the one free-port helper (FreePorts), the one fake
// clock (Clock) and the one buffer read while written (Buffer). The product's
// binaries never import it (make deps-check).
package testutil

import (
	"bytes"
	"errors"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// VerifyTestMain runs the tests, gives goroutines that memberlist and raft
// leave behind after Shutdown (a probe waiting out its ack timeout, a
// connection reader noticing its socket closed) up to 10 seconds to finish,
// then fails the run if any goroutine is left (goleak).
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(settled{m, opts}, opts...)
}

type settled struct {
	m    *testing.M
	opts []goleak.Option
}

func (s settled) Run() int {
	code := s.m.Run()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for goleak.Find(s.opts...) != nil && time.Now().Before(deadline) {
		<-tick.C
	}
	return code
}

// WaitFor polls cond every 20ms until it returns true, or fails the test after
// timeout naming what cond says it waits for. It returns how long it waited.
// It is the one polling helper of the tests: wait on a condition, never sleep.
func WaitFor(t testing.TB, timeout time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, what := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		<-tick.C
	}
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1 (also free for UDP,
// which memberlist needs on its gossip port), chosen below the kernel's
// ephemeral port range when there is room: a port from that range can be
// handed to any outgoing connection as its source port while its process is
// down, and the process then cannot listen on it again when it restarts.
//
// It never returns a port it has returned before in this process: a port is
// free only until its user binds it, and two clusters that pick their ports
// before either has started (the datacenters of a federation) would
// otherwise be handed the same one now and then.
func FreePorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	var ports []int
	var hold []io.Closer
	defer func() {
		for _, c := range hold {
			c.Close()
		}
	}()
	taken := map[int]bool{}
	try := func(p int) {
		if taken[p] || handedOut.ports[p] {
			return
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return
		}
		p = ln.Addr().(*net.TCPAddr).Port
		if handedOut.ports[p] { // the kernel's choice (p was 0)
			ln.Close()
			return
		}
		udp, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			ln.Close()
			return // the UDP side is taken: skip this port
		}
		hold = append(hold, ln, udp)
		taken[p] = true
		ports = append(ports, p)
	}
	if lo, hi := belowEphemeral(); hi-lo >= 4*n {
		for tries := 0; len(ports) < n && tries < 100*n; tries++ {
			try(lo + mrand.IntN(hi-lo))
		}
	}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, errors.New("testutil: no free ports")
		}
		try(0)
	}
	for _, p := range ports {
		handedOut.ports[p] = true
	}
	return ports, nil
}

// handedOut is every port FreePorts has returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// belowEphemeral returns a range of ports under the kernel's ephemeral range
// (Linux: /proc/sys/net/ipv4/ip_local_port_range), or an empty one.
func belowEphemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first <= 10000 {
		return 0, 0
	}
	return 10000, first
}

// FreePort returns one port from FreePorts, or fails the test.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

// Clock is a clock for tests that moves only when told to: the one fake
// clock of the tests. It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock that reads start.
func NewClock(start time.Time) *Clock { return &Clock{t: start} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Buffer is a bytes.Buffer that goroutines may write and read at once: a
// logger's or a command's output read while it runs.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
