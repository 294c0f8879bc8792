package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/rpc/rpctest"
	"github.com/once-dev/once/internal/testutil"
)

// watchedListener is a net.Listener that keeps the connections it accepted,
// each telling whether its peer closed it (a read saw EOF or a reset).
type watchedListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*watchedConn
}

type watchedConn struct {
	net.Conn
	eof atomic.Bool
}

func (l *watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	w := &watchedConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, w)
	l.mu.Unlock()
	return w, nil
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	// A peer that closes its end with data it has not read yet (a frame
	// the server sent just before) resets the connection instead: closed
	// all the same.
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		c.eof.Store(true)
	}
	return n, err
}

// state says how many connections l accepted and how many of them their
// peer closed.
func (l *watchedListener) state() (accepted, closed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		if c.eof.Load() {
			closed++
		}
	}
	return len(l.conns), closed
}

// federationOnly is a Service for a Server that is asked only Federation
// (which the Server answers itself, from SetFederation).
type federationOnly struct{ rpc.Service }

// serveFederation serves view's Federation on a watched listener until the
// test ends.
func serveFederation(t *testing.T, view *rpcpb.FederationView) (string, *watchedListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := &watchedListener{Listener: ln}
	srv := rpc.NewServer(federationOnly{}, rpc.ServerConfig{})
	srv.SetFederation(func() *rpcpb.FederationView { return view })
	rpctest.Serve(t, srv, wl)
	return ln.Addr().String(), wl
}

// When the local resolver stops naming a manager (replaced, moved, gone),
// the poller closes its connection to it rather than keeping it open, or
// redialling a dead address, for the gate's whole life; the connection to a
// manager still named is kept across refreshes.
func TestFederationPollerClosesTheConnectionsOfManagersNoLongerResolved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a1, l1 := serveFederation(t, &rpcpb.FederationView{Datacenter: "dc1",
		Datacenters: map[string]*rpcpb.Managers{"dc1": {Addrs: []string{"first:1"}}}})
	a2, l2 := serveFederation(t, &rpcpb.FederationView{Datacenter: "dc1",
		Datacenters: map[string]*rpcpb.Managers{"dc1": {Addrs: []string{"second:1"}}}})
	var mu sync.Mutex
	managers := []string{a1}
	p := newFederationPoller(rpc.ResolverFunc(func() []string {
		mu.Lock()
		defer mu.Unlock()
		return managers
	}), "", nil, slog.New(slog.DiscardHandler))
	t.Cleanup(p.rc.Close)

	p.refresh(ctx)
	if got := fmt.Sprint(p.Datacenters()); got != "map[dc1:[first:1]]" {
		t.Fatalf("view read from the first manager: %s", got)
	}
	if accepted, closed := l1.state(); accepted != 1 || closed != 0 {
		t.Fatalf("first manager: %d connections accepted, %d closed; want 1, 0", accepted, closed)
	}

	mu.Lock()
	managers = []string{a2}
	mu.Unlock()
	testutil.WaitFor(t, 5*time.Second, func() (bool, string) {
		p.refresh(ctx)
		accepted, closed := l1.state()
		return accepted == 1 && closed == 1, fmt.Sprintf("the connection to the first manager, no longer resolved, closed (%d accepted, %d closed)", accepted, closed)
	})
	if got := fmt.Sprint(p.Datacenters()); got != "map[dc1:[second:1]]" {
		t.Fatalf("view read from the second manager: %s", got)
	}
	for range 3 {
		p.refresh(ctx)
	}
	if accepted, closed := l2.state(); accepted != 1 || closed != 0 {
		t.Fatalf("second manager, still resolved: %d connections accepted, %d closed; want 1, 0", accepted, closed)
	}
}
