package faultnet

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// WAN is the cut between datacenters as one process applies it: while
// addresses of other datacenters are blocked (Set), every connection this
// process dials to them is refused, the ones it holds are closed, and its
// gossip packets to them are dropped. Every process of both datacenters
// holds the rule, so nothing crosses either way; every process keeps
// running. Its Dial is for rpc.ClientConfig.Dial (gate and manager
// Deps.Dial), Wrap for membership.Config.WrapTransport (the WAN pool).
type WAN struct {
	mu      sync.Mutex
	blocked map[string]bool
	conns   map[string]map[net.Conn]struct{}
}

// NewWAN returns a WAN with nothing blocked.
func NewWAN() *WAN {
	return &WAN{blocked: map[string]bool{}, conns: map[string]map[net.Conn]struct{}{}}
}

// Set replaces the blocked addresses (host:port); empty heals. Open
// connections to newly blocked addresses are closed.
func (w *WAN) Set(addrs []string) {
	w.mu.Lock()
	w.blocked = map[string]bool{}
	var victims []net.Conn
	for _, a := range addrs {
		w.blocked[a] = true
		for c := range w.conns[a] {
			victims = append(victims, c)
		}
	}
	w.mu.Unlock()
	for _, c := range victims {
		c.Close()
	}
}

func (w *WAN) isBlocked(addr string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.blocked[addr]
}

// Dial opens a TCP connection to addr unless it is blocked.
func (w *WAN) Dial(ctx context.Context, addr string) (net.Conn, error) {
	if w.isBlocked(addr) {
		return nil, fmt.Errorf("dial %s: %w", addr, ErrBlocked)
	}
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.blocked[addr] { // cut while dialing
		c.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, ErrBlocked)
	}
	if w.conns[addr] == nil {
		w.conns[addr] = map[net.Conn]struct{}{}
	}
	wc := &wanConn{Conn: c, w: w, addr: addr}
	w.conns[addr][wc] = struct{}{}
	return wc, nil
}

type wanConn struct {
	net.Conn
	w    *WAN
	addr string
	once sync.Once
}

func (c *wanConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.w.mu.Lock()
		delete(c.w.conns[c.addr], c)
		c.w.mu.Unlock()
	})
	return err
}

// Wrap returns t with packets to blocked addresses dropped (as a lossy
// network does: the send reports success) and streams to them refused.
func (w *WAN) Wrap(t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
	return &wanTransport{NodeAwareTransport: t, w: w}
}

type wanTransport struct {
	memberlist.NodeAwareTransport
	w *WAN
}

func (t *wanTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.w.isBlocked(addr) {
		return time.Now(), nil
	}
	return t.NodeAwareTransport.WriteTo(b, addr)
}

func (t *wanTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.w.isBlocked(a.Addr) {
		return time.Now(), nil
	}
	return t.NodeAwareTransport.WriteToAddress(b, a)
}

func (t *wanTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.w.isBlocked(addr) {
		return nil, fmt.Errorf("dial %s: %w", addr, ErrBlocked)
	}
	return t.NodeAwareTransport.DialTimeout(addr, timeout)
}

func (t *wanTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.w.isBlocked(a.Addr) {
		return nil, fmt.Errorf("dial %s: %w", a.Addr, ErrBlocked)
	}
	return t.NodeAwareTransport.DialAddressTimeout(a, timeout)
}
