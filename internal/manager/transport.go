package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/certs"
)

// newTransport returns deps.Transport, or raft's NetworkTransport over the
// TCP stream layer (wrapped by deps.WrapStreamLayer, if set).
func newTransport(cfg Config, deps Deps, hcl hclog.Logger) (raft.Transport, error) {
	if deps.Transport != nil {
		if string(deps.Transport.LocalAddr()) != cfg.RaftAdvertise {
			return nil, fmt.Errorf("raft transport address %s is not the advertised %s", deps.Transport.LocalAddr(), cfg.RaftAdvertise)
		}
		return deps.Transport, nil
	}
	tcp, err := listenTCP(cfg.RaftAddr, cfg.RaftAdvertise)
	if err != nil {
		return nil, err
	}
	var layer raft.StreamLayer = tcp
	if deps.WrapStreamLayer != nil {
		layer = deps.WrapStreamLayer(tcp)
	}
	if deps.ClusterTLS != nil {
		layer = TLSStreamLayer(layer, deps.ClusterTLS)
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 8,
		Timeout: 10 * time.Second,
		Logger:  hcl.Named("transport"),
		// 1 disables pipelined replication: raft v1.7's pipeline can deadlock
		// after a follower answers Success=false, leaving that follower without
		// new entries (heartbeats still flow, so no election heals it) and
		// Shutdown hanging (grafana/pyroscope#5518, hashicorp/raft#612). Each
		// AppendEntries still carries up to MaxAppendEntries entries.
		MaxRPCsInFlight: 1,
	}), nil
}

// tlsLayer carries Raft over mutual TLS (MANAGER_TLS_*, or the CA derived
// from MANAGER_CLUSTER_SECRET_FILE): every connection, dialed or accepted,
// has a cluster certificate at both ends, and an accepted one a manager's
// (certs.RaftRoles): a gate's certificate is refused. An accepted
// connection's handshake runs on its first read, so a peer without a cluster
// certificate fails there and raft drops the connection.
type tlsLayer struct {
	raft.StreamLayer
	server, client *tls.Config
}

// TLSStreamLayer is layer carrying Raft over mutual TLS with c's
// certificates, as a manager's own stream layer does: what the holder of
// c reaches a manager's Raft port with (its security tests).
func TLSStreamLayer(layer raft.StreamLayer, c *certs.Cluster) raft.StreamLayer {
	return &tlsLayer{StreamLayer: layer, server: c.RaftServerConfig(), client: c.ClientConfig()}
}

func (l *tlsLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.server), nil
}

func (l *tlsLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := l.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, l.client)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("raft: TLS handshake with %s: %w", address, err)
	}
	return tc, nil
}

// closeTransport closes t if it can be closed (NetworkTransport and
// InmemTransport can; both are idempotent).
func closeTransport(t raft.Transport) error {
	if c, ok := t.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// tcpLayer is the default Raft stream layer: plain TCP on cfg.RaftAddr,
// advertising cfg.RaftAdvertise. Unlike raft.NewTCPTransport's layer it closes
// every connection it dialed or accepted when it is closed: raft's
// NetworkTransport closes only its listener, and a pooled connection left open
// keeps the peer's handler goroutine reading forever.
type tcpLayer struct {
	ln        net.Listener
	advertise net.Addr

	mu     sync.Mutex
	closed bool
	conns  map[*trackedConn]struct{}
}

// listenTCP binds the Raft address. advertise (may be empty: the bound
// address) is the address peers use to reach this node; it must be routable,
// not 0.0.0.0.
func listenTCP(bind, advertise string) (*tcpLayer, error) {
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
	return &tcpLayer{ln: ln, advertise: adv, conns: map[*trackedConn]struct{}{}}, nil
}

// Dial implements raft.StreamLayer.
func (l *tcpLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	return l.track(c)
}

// Accept implements net.Listener.
func (l *tcpLayer) Accept() (net.Conn, error) {
	c, err := l.ln.Accept()
	if err != nil {
		return nil, err
	}
	return l.track(c)
}

func (l *tcpLayer) track(c net.Conn) (net.Conn, error) {
	t := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[t] = struct{}{}
	return t, nil
}

// Close implements net.Listener: the listener and every open connection.
func (l *tcpLayer) Close() error {
	err := l.ln.Close()
	l.mu.Lock()
	l.closed = true
	all := slices.Collect(maps.Keys(l.conns))
	l.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
	return err
}

// Addr implements net.Listener: the advertised address.
func (l *tcpLayer) Addr() net.Addr { return l.advertise }

type trackedConn struct {
	net.Conn
	l    *tcpLayer
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return err
}
