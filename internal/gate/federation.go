package gate

import (
	"context"
	"crypto/tls"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc"
)

// Federation tells a gate which datacenters exist and where their managers
// are. A gate forwards a submission to the leader of every datacenter it
// names, its own through its usual resolver, the others directly at the
// addresses Federation gives (docs/multidc.md says why not through the local
// managers).
type Federation interface {
	// Datacenters maps each known datacenter to its managers' RPC addresses
	// (host:port). The gate's own datacenter need not be in it. Nil while
	// the view is not known yet: a submission naming a datacenter the gate
	// cannot find is then answered 503 (retry), not 400.
	Datacenters() map[string][]string
}

// StaticFederation is a fixed federation view.
type StaticFederation map[string][]string

// Datacenters implements Federation.
func (s StaticFederation) Datacenters() map[string][]string { return s }

// federationRefresh is how often a gate re-reads the federation view from its
// datacenter's managers.
const federationRefresh = 5 * time.Second

// federationFormingRefresh is how often a gate re-reads the view while the
// federation is forming (until it is formed, below).
const federationFormingRefresh = 250 * time.Millisecond

// formingFederation is a Federation read over time (the federationPoller),
// which may not name every datacenter yet. The federation is formed when the
// gate has read a view and the set of datacenters it names has not changed
// for the settle window (GATE_FEDERATION_SETTLE_SECONDS): managers join the
// WAN pool at start, and a view read before their gossip converged lacks the
// datacenters not heard of yet. Until it is formed, a datacenter the gate
// does not know may still appear: it is answered 503 (retry), not 400. A
// change of the set (a datacenter joins or is forgotten) makes it forming
// again for the window.
type formingFederation interface {
	// Forming reports whether the federation is not formed now.
	Forming() bool
	// FormedOnce reports whether it has been formed since the gate started:
	// GET /readyz waits for it.
	FormedOnce() bool
}

// federationForming reports whether a datacenter the gate does not know
// may still appear: no view read yet, or the federation still forming.
func (g *Gate) federationForming() bool {
	if g.federation == nil {
		return false
	}
	if g.federation.Datacenters() == nil {
		return true
	}
	f, ok := g.federation.(formingFederation)
	return ok && f.Forming()
}

// federationFormedOnce reports whether the gate knows the federation well
// enough to be ready: a fixed view always, a polled one once formed.
func (g *Gate) federationFormedOnce() bool {
	f, ok := g.federation.(formingFederation)
	return !ok || f.FormedOnce()
}

// firstViewer is a Federation read over time that tells when it has read
// its first view (the federationPoller).
type firstViewer interface {
	// FirstView is closed once a view has been read.
	FirstView() <-chan struct{}
}

// awaitFederationView waits until the gate has read a federation view, for
// at most GATE_FORWARD_TIMEOUT_SECONDS or until ctx ends; false if it has
// not. A fixed view is always read.
func (g *Gate) awaitFederationView(ctx context.Context) bool {
	f, ok := g.federation.(firstViewer)
	if !ok {
		return true
	}
	select {
	case <-f.FirstView():
		return true
	default:
	}
	t := time.NewTimer(g.cfg.ForwardTimeout)
	defer t.Stop()
	select {
	case <-f.FirstView():
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// federationForget is how long a gate keeps a datacenter that the views it
// reads no longer name. Managers remember the federation across their own
// restarts for as long (rpc.FederationMemory); the gate's memory covers a view
// read from a manager that lost its data directory. A datacenter that is kept
// but unreachable gets 503, which a client retries.
const federationForget = rpc.FederationMemory

// federationPoller is the Federation a gate started by Main uses: it reads
// the federation view (rpc.Client.FederationOf) from one of its datacenter's
// managers every federationRefresh, keeping the last view it got. Its client
// keeps a connection to each manager it asked; FederationOf calls an address
// directly, without the client's resolver, so the client never drops one on
// its own: when the local resolver's addresses change (a manager replaced,
// moved or gone), refresh closes them all (the next call reopens the ones
// still named) rather than leave gRPC redialling a dead address for as long
// as the gate lives.
type federationPoller struct {
	local rpc.Resolver
	rc    *rpc.Client
	log   *slog.Logger
	// addrs is the sorted set of the local managers' addresses at the last
	// refresh (refresh's goroutine only).
	addrs []string
	view  atomic.Pointer[map[string][]string]
	// seen is when each datacenter was last named by a view (refresh's
	// goroutine only).
	seen map[string]time.Time
	now  func() time.Time
	// settle is GATE_FEDERATION_SETTLE_SECONDS (formingFederation).
	settle time.Duration
	// names is the sorted set of datacenters of the last view, changed when
	// it last changed (refresh's goroutine only); formed and formedOnce are
	// what formingFederation reports.
	names      []string
	changed    time.Time
	formed     atomic.Bool
	formedOnce atomic.Bool
	// read is closed by the first view stored (FirstView).
	read chan struct{}
}

func newFederationPoller(local rpc.Resolver, secret string, tlsCfg *tls.Config, log *slog.Logger) *federationPoller {
	rc := rpc.NewClient(rpc.ClientConfig{Secret: secret, TLS: tlsCfg})
	return &federationPoller{local: local, rc: rc, log: log,
		seen: map[string]time.Time{}, now: time.Now, settle: DefaultFederationSettle, read: make(chan struct{})}
}

// FirstView implements firstViewer.
func (p *federationPoller) FirstView() <-chan struct{} { return p.read }

// Forming implements formingFederation.
func (p *federationPoller) Forming() bool { return !p.formed.Load() }

// FormedOnce implements formingFederation.
func (p *federationPoller) FormedOnce() bool { return p.formedOnce.Load() }

// Datacenters implements Federation.
func (p *federationPoller) Datacenters() map[string][]string {
	if v := p.view.Load(); v != nil {
		return *v
	}
	return nil
}

// run refreshes the view until ctx ends: every federationRefresh, or every
// federationFormingRefresh while the federation is forming.
func (p *federationPoller) run(ctx context.Context) {
	defer p.rc.Close()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.refresh(ctx)
		if p.formed.Load() {
			t.Reset(federationRefresh)
		} else {
			t.Reset(federationFormingRefresh)
		}
	}
}

// refresh asks the local managers in turn until one answers, first closing
// the client's connections if their addresses changed since the last refresh.
func (p *federationPoller) refresh(ctx context.Context) {
	ms := p.local.Managers()
	if addrs := slices.Sorted(slices.Values(ms)); !slices.Equal(addrs, p.addrs) {
		p.addrs = addrs
		p.rc.CloseIdleConnections() // no call is in flight: refresh makes them all
	}
	for _, addr := range ms {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		f, err := p.rc.FederationOf(actx, addr)
		cancel()
		if err != nil {
			p.log.Debug("reading the federation view", logging.KeyAddr, addr, logging.KeyError, err)
			continue
		}
		dcs := make(map[string][]string, len(f.GetDatacenters()))
		for dc, m := range f.GetDatacenters() {
			dcs[dc] = m.GetAddrs()
		}
		p.store(dcs)
		return
	}
}

// store makes fetched the view, keeping (with their last addresses) the
// datacenters it does not name that a view named within federationForget.
func (p *federationPoller) store(fetched map[string][]string) {
	now := p.now()
	v := maps.Clone(fetched)
	for dc := range v {
		p.seen[dc] = now
	}
	old := p.Datacenters()
	for dc, at := range p.seen {
		if _, ok := v[dc]; ok {
			continue
		}
		if now.Sub(at) >= federationForget {
			delete(p.seen, dc)
			p.log.Info("datacenter forgotten: no view has named it for a long time", logging.KeyDatacenter, dc)
			continue
		}
		v[dc] = append([]string{}, old[dc]...) // its last addresses, [] if it has none
	}
	if !maps.EqualFunc(old, v, slices.Equal) {
		p.log.Info("federation view changed", logging.KeyDatacenter, slices.Sorted(maps.Keys(v)))
	}
	p.view.Store(&v)
	if old == nil {
		close(p.read)
	}
	if names := slices.Sorted(maps.Keys(v)); old == nil || !slices.Equal(names, p.names) {
		p.names, p.changed = names, now
	}
	formed := now.Sub(p.changed) >= p.settle
	if formed && !p.formed.Load() {
		p.log.Info("federation formed: its datacenters have not changed for the settle window",
			logging.KeyDatacenter, p.names, logging.KeyDuration, p.settle)
	}
	p.formed.Store(formed)
	if formed {
		p.formedOnce.Store(true)
	}
}

// dcClients holds one rpc.Client per remote datacenter, made on first use;
// each resolves its managers from the current federation view. Once closed
// (Gate.Close), it makes none.
type dcClients struct {
	mu      sync.Mutex
	clients map[string]*rpc.Client
	closed  bool
}

// knownDatacenter says whether dc is the gate's own or in the federation view.
func (g *Gate) knownDatacenter(dc string) bool {
	if dc == g.cfg.Datacenter {
		return true
	}
	if g.federation == nil {
		return false
	}
	_, ok := g.federation.Datacenters()[dc]
	return ok
}

// clientFor returns the client of datacenter dc's leader.
func (g *Gate) clientFor(dc string) *rpc.Client {
	if dc == g.cfg.Datacenter {
		return g.client
	}
	g.remote.mu.Lock()
	defer g.remote.mu.Unlock()
	if c, ok := g.remote.clients[dc]; ok {
		return c
	}
	if g.remote.closed {
		// The gate is closed: its own client, closed too, fails every
		// call at once, and no connection is made that nothing would close.
		return g.client
	}
	if g.remote.clients == nil {
		g.remote.clients = map[string]*rpc.Client{}
	}
	fed := g.federation
	c := g.newClient(rpc.ResolverFunc(func() []string {
		if fed == nil {
			return nil
		}
		return fed.Datacenters()[dc]
	}), g.log.With(logging.KeyComponent, "rpc", logging.KeyDatacenter, dc))
	g.remote.clients[dc] = c
	return c
}

// closeRemote closes every remote datacenter's client, with the calls still
// in flight on it (a fan-out to a datacenter that does not answer): closing
// only its idle connections left those open for good.
func (g *Gate) closeRemote() {
	g.remote.mu.Lock()
	clients := g.remote.clients
	g.remote.clients, g.remote.closed = nil, true
	g.remote.mu.Unlock()
	for _, c := range clients {
		c.Close()
	}
}
