// Package faultnet is the fault layer of the tests module: what the
// fault-injection manager (tests/cmd/oncemanager-faults) adds to the real
// manager through managerd.Options, and nothing the product links.
//
//   - Layer wraps the manager's Raft stream layer with a failpoint that cuts
//     links. Block(addrs) refuses every new connection to those peers and
//     closes the open ones; a partition of a manager from the others is Block
//     on both sides, since Raft's transport sends each RPC on a connection it
//     dialed itself.
//   - Clock is the manager's wall clock shifted by an offset (clock skew).
//   - Mount serves both, and a leadership transfer, under /debug/failpoints.
//
// Tests and the chaos nemesis drive them through tests/localcluster.
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

// Layer is a raft.StreamLayer whose links can be cut. It wraps another
// stream layer (the manager's TCP layer), which it closes on Close.
type Layer struct {
	inner raft.StreamLayer

	mu      sync.Mutex
	closed  bool
	blocked map[string]bool
	conns   map[string]map[*conn]struct{} // open dialed connections by peer address
}

// Wrap returns a Layer over inner, with no link blocked.
func Wrap(inner raft.StreamLayer) *Layer {
	return &Layer{inner: inner, blocked: map[string]bool{}, conns: map[string]map[*conn]struct{}{}}
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
	c, err := l.inner.Dial(address, timeout)
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

// Accept implements net.Listener. Accepted connections are not cut by Block:
// the peer, blocked on its side too, closes them.
func (l *Layer) Accept() (net.Conn, error) { return l.inner.Accept() }

// Close implements net.Listener: it closes the wrapped layer (with every
// connection it holds) and every connection dialed through this one.
func (l *Layer) Close() error {
	err := l.inner.Close()
	l.mu.Lock()
	l.closed = true
	var all []*conn
	for _, m := range l.conns {
		for c := range m {
			all = append(all, c)
		}
	}
	l.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
	return err
}

// Addr implements net.Listener: the wrapped layer's (advertised) address.
func (l *Layer) Addr() net.Addr { return l.inner.Addr() }

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
	peer string
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns[c.peer], c)
		c.l.mu.Unlock()
	})
	return err
}
