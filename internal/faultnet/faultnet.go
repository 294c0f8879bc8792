// Package faultnet is the Raft stream layer of a manager: TCP, with a failpoint
// that cuts links. Block(addrs) refuses every new connection to those peers and
// closes the open ones; a partition of a manager from the others is Block on
// both sides, since Raft's transport sends each RPC on a connection it dialed
// itself. Tests and the chaos nemesis drive it through the manager's
// /debug/failpoints endpoint, which exists only when MANAGER_FAILPOINTS is on.
package faultnet

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ErrBlocked is returned by Dial to a blocked peer.
var ErrBlocked = errors.New("faultnet: link blocked by failpoint")

// Layer is a raft.StreamLayer over TCP whose links can be cut.
type Layer struct {
	ln        net.Listener
	advertise net.Addr

	mu       sync.Mutex
	closed   bool
	blocked  map[string]bool
	conns    map[string]map[*conn]struct{} // open dialed connections by peer address
	accepted map[*conn]struct{}            // open accepted connections
}

// Listen binds the Raft address. advertise (may be empty) is the address peers
// use to reach this node; it must be a routable IP, not 0.0.0.0.
func Listen(bind, advertise string) (*Layer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raft listen %s: %w", bind, err)
	}
	var adv net.Addr = ln.Addr()
	if advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("raft advertise address %s: %w", advertise, err)
		}
		adv = a
	}
	if ta, ok := adv.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft advertise address %s is not routable", adv)
	}
	return &Layer{ln: ln, advertise: adv, blocked: map[string]bool{}, conns: map[string]map[*conn]struct{}{},
		accepted: map[*conn]struct{}{}}, nil
}

// Dial implements raft.StreamLayer.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	addr := string(address)
	l.mu.Lock()
	blocked := l.blocked[addr]
	l.mu.Unlock()
	if blocked {
		return nil, fmt.Errorf("dial %s: %w", addr, ErrBlocked)
	}
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	w := &conn{Conn: c, l: l, peer: addr}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	if l.blocked[addr] { // blocked while dialing
		c.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, ErrBlocked)
	}
	if l.conns[addr] == nil {
		l.conns[addr] = map[*conn]struct{}{}
	}
	l.conns[addr][w] = struct{}{}
	return w, nil
}

// Accept implements net.Listener.
func (l *Layer) Accept() (net.Conn, error) {
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	w := &conn{Conn: c, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.accepted[w] = struct{}{}
	return w, nil
}

// Close implements net.Listener. It also closes every connection the layer
// dialed or accepted: raft's NetworkTransport closes only its listener, and a
// pooled connection left open would keep the peer's handler goroutine reading
// forever.
func (l *Layer) Close() error {
	err := l.ln.Close()
	l.mu.Lock()
	l.closed = true
	var all []*conn
	for _, m := range l.conns {
		for c := range m {
			all = append(all, c)
		}
	}
	for c := range l.accepted {
		all = append(all, c)
	}
	l.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
	return err
}

// Addr implements net.Listener: the advertised address.
func (l *Layer) Addr() net.Addr { return l.advertise }

// Block replaces the set of blocked peers (Raft addresses); an empty set heals
// every link. Open connections to newly blocked peers are closed.
func (l *Layer) Block(addrs []string) {
	l.mu.Lock()
	l.blocked = map[string]bool{}
	var victims []*conn
	for _, a := range addrs {
		l.blocked[a] = true
		for c := range l.conns[a] {
			victims = append(victims, c)
		}
	}
	l.mu.Unlock()
	for _, c := range victims {
		c.Close()
	}
}

// Blocked returns the blocked peers, sorted.
func (l *Layer) Blocked() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.blocked))
	for a := range l.blocked {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

type conn struct {
	net.Conn
	l    *Layer
	peer string // "" for an accepted connection
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.peer == "" {
			delete(c.l.accepted, c)
		} else {
			delete(c.l.conns[c.peer], c)
		}
		c.l.mu.Unlock()
	})
	return err
}
