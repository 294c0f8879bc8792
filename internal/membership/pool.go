// Package membership is a gossip pool on hashicorp/memberlist: the LAN pool
// of one datacenter, and the WAN pool of a federation's managers (Label
// tells them apart). Gates and managers join it with a Meta (role,
// datacenter, node ID, RPC and Raft addresses, whether the node holds Raft
// state); gates find the managers through it, and the autopilot
// (internal/autopilot) bootstraps Raft and reconciles its voters from it.
//
// Beyond memberlist, the pool remembers members that left or failed (with the
// time they were last seen) so the autopilot can apply a grace period, and it
// tells a graceful leave from a failure: memberlist v0.6.0 calls NotifyLeave
// for both and leaves Node.State at StateAlive (hashicorp/memberlist#293), so
// Leave first publishes Meta.Leaving and the others classify the departure by
// the last Meta they saw.
package membership

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/once-dev/once/internal/clockwatch"
	"github.com/once-dev/once/internal/logging"
)

// State of a member as this node sees it.
type State int

// Member states.
const (
	// StateAlive: the member answers probes (or has not been found dead yet).
	StateAlive State = iota
	// StateSuspect is reserved: memberlist v0.6.0 does not expose suspicion,
	// so a suspect member is reported alive until it is declared dead.
	StateSuspect
	// StateDead: the member failed (stopped answering, or left without
	// announcing it through Leave).
	StateDead
	// StateLeft: the member left gracefully through Pool.Leave.
	StateLeft
)

var stateNames = [...]string{
	StateAlive:   "alive",
	StateSuspect: "suspect",
	StateDead:    "dead",
	StateLeft:    "left",
}

func (s State) String() string { return nameOf(stateNames[:], int(s), "state") }

// Member is a node of the pool.
type Member struct {
	Name  string // memberlist node name
	Addr  string // gossip address, host:port
	Meta  Meta
	State State
	// LastSeen is, for a member that is alive, the time Members was called;
	// for one that left or failed, when this node learned it (about when it
	// was last seen alive). The autopilot's grace period counts from it.
	LastSeen time.Time
}

// Pool is a running LAN pool. Its methods are safe for concurrent use.
type Pool struct {
	cfg     Config
	log     *slog.Logger
	ml      *memberlist.Memberlist
	keyring *memberlist.Keyring
	// keyMu orders this node's keyring changes with its reads of the keys
	// (keyring.go): memberlist's RemoveKey shifts the keys in the array
	// GetKeys hands out, which is read after memberlist's lock is let go.
	keyMu sync.Mutex
	// selfIP, selfPort: the advertised gossip address, read once after
	// Create. (memberlist's LocalNode returns its internal node, which
	// UpdateNode rewrites: reading it concurrently is a data race.)
	selfIP   net.IP
	selfPort int
	// label is memberlist's label of this pool (Config.memberlistConfig).
	label string

	// lifeMu serializes what memberlist must not see concurrently with
	// Shutdown (UpdateNode, Leave: Leave after Shutdown panics) and orders
	// meta updates. Never held while p.mu is wanted by memberlist callbacks
	// in a way that could deadlock: callbacks take only p.mu.
	lifeMu sync.Mutex

	mu         sync.Mutex
	local      Meta
	localBytes []byte
	members    map[string]*Member // by node name, including departed ones
	// leaving: members that told this node directly (msgLeaving) that they
	// are leaving; their departure is a leave even if the Leaving meta has
	// not reached this node.
	leaving map[string]bool
	subs    map[*subscriber]struct{}
	clocks  *clockwatch.Estimator // by member name; see clock.go
	left    bool
	shut    bool

	// queries are the keyring queries of this node waiting for replies, by
	// id (keyring_query.go).
	queries map[uint64]*keyringQuery
	// querySeq is the id of this node's last keyring query. It starts at a
	// random value (Start), not 0: a reply delayed across a restart of this
	// node must not find a new query of the same id and be taken as its
	// answer (a member counted as having applied a step it was never sent).
	querySeq uint64

	joined     chan struct{}
	joinedOnce sync.Once
	stop       chan struct{}
	wg         sync.WaitGroup
}

// Start creates the memberlist on the configured address and, if Seeds name
// other nodes, joins them in the background: one attempt at once, then
// retries with exponential backoff until one seed answers, ctx is done or
// the pool is shut down. ctx bounds only that retrying; the pool runs until
// Shutdown. Joined tells when the pool has reached another node.
func Start(ctx context.Context, cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Seeds = slices.Clone(cfg.Seeds)
	cfg.SecretKey = bytes.Clone(cfg.SecretKey)
	extra := make([][]byte, len(cfg.ExtraKeys))
	for i, k := range cfg.ExtraKeys {
		extra[i] = bytes.Clone(k)
	}
	cfg.ExtraKeys = extra
	p := &Pool{
		cfg:     cfg,
		log:     logging.OrDiscard(cfg.Logger).With(logging.KeyComponent, "membership"),
		local:   cfg.Meta,
		members: make(map[string]*Member),
		leaving: make(map[string]bool),
		queries: make(map[uint64]*keyringQuery),
		subs:    make(map[*subscriber]struct{}),
		clocks:  clockwatch.NewEstimator(0, clockSampleMaxAge),
		joined:  make(chan struct{}),
		stop:    make(chan struct{}),
	}
	p.querySeq = rand.Uint64() // the ids of two runs of this node do not meet
	b, err := p.local.Encode()
	if err != nil {
		return nil, &ConfigError{Field: "Meta", Err: err}
	}
	p.localBytes = b

	mc := cfg.memberlistConfig()
	mc.Delegate = (*delegate)(p)
	mc.Events = (*eventDelegate)(p)
	mc.Ping = (*pingDelegate)(p)
	mc.Conflict = (*conflictDelegate)(p)
	mc.Logger = logging.StdLogger(cfg.Logger, "memberlist")
	if cfg.SecretKey != nil {
		kr, err := memberlist.NewKeyring(cfg.ExtraKeys, cfg.SecretKey)
		if err != nil {
			return nil, &ConfigError{Field: "SecretKey", Err: fmt.Errorf("%w: %w", ErrInvalidKey, err)}
		}
		p.keyring = kr
		mc.Keyring = kr
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	ml, err := createMemberlist(mc, cfg.WrapTransport)
	if err != nil {
		return nil, fmt.Errorf("membership: start memberlist on %s:%d: %w", mc.BindAddr, cfg.BindPort, err)
	}
	p.ml, p.label = ml, mc.Label
	self := ml.LocalNode()
	p.selfIP, p.selfPort = slices.Clone(self.Addr), int(self.Port)
	p.log.Info("gossip pool started", logging.KeyNode, cfg.NodeName, logging.KeyAddr, p.Addr(),
		logging.KeyDatacenter, cfg.Meta.Datacenter, logging.KeyEncrypted, cfg.SecretKey != nil, logging.KeyProfile, cfg.Profile)

	if len(cfg.Seeds) == 0 {
		p.markJoined()
	} else {
		p.wg.Add(1)
		go p.joinLoop(ctx)
	}
	p.wg.Add(1)
	go p.reconnectLoop()
	return p, nil
}

// Addr returns the gossip address the others reach this node at (useful as a
// seed; with BindPort 0 it carries the port the OS chose).
func (p *Pool) Addr() string {
	return net.JoinHostPort(p.selfIP.String(), strconv.Itoa(p.selfPort))
}

// Joined is closed once the pool has exchanged state with another member
// (right away for a pool without seeds).
func (p *Pool) Joined() <-chan struct{} { return p.joined }

func (p *Pool) markJoined() { p.joinedOnce.Do(func() { close(p.joined) }) }

func (p *Pool) joinLoop(ctx context.Context) {
	defer p.wg.Done()
	wait, maxWait := p.cfg.joinBackoff()
	seeds := p.cfg.Seeds
	joined := false
	for attempt := 1; ; attempt++ {
		n, missed, err := p.join(ctx, seeds)
		if errors.Is(err, ErrShutdown) {
			return
		}
		switch {
		case err == nil && !joined:
			joined = true
			p.log.Info("joined pool", logging.KeyCount, n, logging.KeyAttempt, attempt)
		case err == nil:
			p.log.Info("reached a seed that had not answered", logging.KeyCount, n, logging.KeyAttempt, attempt)
		case joined:
			p.log.Debug("seeds still not answering", logging.KeyError, err, logging.KeyAttempt, attempt)
		}
		if joined {
			// A seed that did not answer may belong to another part of the
			// pool: a WAN pool's seeds name managers of several datacenters,
			// and a manager that reached only its own datacenter's would
			// otherwise settle into a pool without the others for good.
			// Keep trying the seeds that are not yet known members (not
			// after Leave: a node that left does not join anyone again).
			seeds = p.unknownSeeds(ctx, missed)
			if len(seeds) == 0 || p.hasLeft() {
				return
			}
		}
		// Jitter keeps a fleet started at once from retrying in lockstep.
		d := wait/2 + rand.N(wait/2+1)
		if !joined {
			p.log.Warn("join failed, retrying", logging.KeyError, err, logging.KeyAttempt, attempt, logging.KeyDuration, d)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			if !joined {
				p.log.Warn("giving up joining the pool", logging.KeyError, ctx.Err())
			}
			return
		case <-p.stop:
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}

// Join contacts seeds now (once, no retry) and merges their view of the
// pool. Seeds that resolve to this node are skipped; if nothing else is left
// the node is the first of its pool and Join returns 0, nil. It returns the
// number of seeds reached, or a *JoinError (ErrJoin) if none was, e.g.
// because they use another gossip key.
func (p *Pool) Join(ctx context.Context, seeds []string) (int, error) {
	n, _, err := p.join(ctx, seeds)
	return n, err
}

// join is Join that also returns the seeds that did not answer. Each seed
// is contacted on its own (as memberlist.Join does in turn), so the ones
// missed are known.
func (p *Pool) join(ctx context.Context, seeds []string) (int, []string, error) {
	if p.isShut() {
		return 0, nil, ErrShutdown
	}
	others := p.otherSeeds(ctx, seeds)
	if len(others) == 0 {
		p.markJoined()
		return 0, nil, nil
	}
	var missed []string
	var errs []error
	for _, s := range others {
		if _, err := p.ml.Join([]string{s}); err != nil {
			missed = append(missed, s)
			errs = append(errs, err)
		}
	}
	if n := len(others) - len(missed); n > 0 {
		if len(errs) > 0 {
			p.log.Debug("some seeds did not answer", logging.KeyError, errors.Join(errs...))
		}
		p.markJoined()
		return n, missed, nil
	}
	if p.isShut() {
		return 0, missed, ErrShutdown
	}
	return 0, missed, &JoinError{Seeds: others, Err: errors.Join(errs...), Label: p.label}
}

// unknownSeeds returns the seeds whose address is no known member's (alive
// or not: a failed member is the reconnect loop's to retry).
func (p *Pool) unknownSeeds(ctx context.Context, seeds []string) []string {
	if len(seeds) == 0 {
		return nil
	}
	p.mu.Lock()
	known := make(map[string]bool, len(p.members))
	for _, m := range p.members {
		known[m.Addr] = true
	}
	p.mu.Unlock()
	var out []string
	for _, s := range seeds {
		if !known[s] && !slices.ContainsFunc(resolveSeed(ctx, s), func(a string) bool { return known[a] }) {
			out = append(out, s)
		}
	}
	return out
}

// resolveSeed returns the ip:port addresses a host:port seed names (none if
// it does not resolve).
func resolveSeed(ctx context.Context, seed string) []string {
	host, port, err := splitSeed(seed)
	if err != nil {
		return nil
	}
	ips, err := seedIPs(ctx, host)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	}
	return out
}

// seedIPs returns the IP addresses a seed's host names: the host itself if it
// is an IP (LookupIP returns a literal without asking DNS), else what it
// resolves to.
func seedIPs(ctx context.Context, host string) ([]net.IP, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return net.DefaultResolver.LookupIP(lctx, "ip", host)
}

// otherSeeds drops the seeds that are this node's own gossip address, so a
// seed list shared by every node (MANAGER_JOIN=m1,m2,m3) works on m1 too.
func (p *Pool) otherSeeds(ctx context.Context, seeds []string) []string {
	bindAny := net.ParseIP(p.cfg.BindAddr).IsUnspecified()
	out := make([]string, 0, len(seeds))
	for _, s := range seeds {
		host, port, err := splitSeed(s)
		if err != nil {
			continue
		}
		if port != p.selfPort {
			out = append(out, s)
			continue
		}
		ips, err := seedIPs(ctx, host)
		if err != nil {
			out = append(out, s) // let memberlist resolve (and fail) it
			continue
		}
		isSelf := slices.ContainsFunc(ips, func(ip net.IP) bool {
			return ip.Equal(p.selfIP) || (bindAny && ip.IsLoopback())
		})
		if !isSelf {
			out = append(out, s)
		}
	}
	return out
}

// Members returns every known member, alive or departed, sorted by name.
func (p *Pool) Members() []Member {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reapLocked(now)
	out := make([]Member, 0, len(p.members))
	for _, m := range p.members {
		c := *m
		if c.State == StateAlive {
			c.LastSeen = now
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Managers returns the alive managers of datacenter dc, sorted by NodeID.
func (p *Pool) Managers(dc string) []Member {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Member
	for _, m := range p.members {
		if m.State == StateAlive && m.Meta.Role == RoleManager && m.Meta.Datacenter == dc {
			c := *m
			c.LastSeen = now
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Member) int {
		return cmp.Or(strings.Compare(a.Meta.NodeID, b.Meta.NodeID), strings.Compare(a.Name, b.Name))
	})
	return out
}

func (p *Pool) reapLocked(now time.Time) {
	keep := p.cfg.DepartedRetention
	for name, m := range p.members {
		if m.State != StateAlive && now.Sub(m.LastSeen) > keep {
			delete(p.members, name)
		}
	}
}

// LocalNode returns this node, with the Meta it currently publishes.
func (p *Pool) LocalNode() Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := Member{Name: p.cfg.NodeName, Meta: p.local, State: StateAlive, LastSeen: time.Now()}
	if rec, ok := p.members[p.cfg.NodeName]; ok {
		m.Addr = rec.Addr
		m.State = rec.State
	}
	if p.left {
		m.State = StateLeft
	}
	return m
}

// UpdateMeta publishes m as this node's metadata and waits (at most
// Config.BroadcastTimeout) for memberlist to gossip it. Role, Datacenter
// and NodeID cannot change; HasRaftState cannot go back to false; Bootstrap
// and Leaving keep their current values (see ModifyMeta). If the broadcast
// times out the new Meta is still in effect and spreads by push/pull; the
// error then wraps ErrBroadcastTimeout.
func (p *Pool) UpdateMeta(m Meta) error {
	return p.ModifyMeta(func(cur *Meta) {
		m.Bootstrap = cur.Bootstrap
		m.Leaving = cur.Leaving
		*cur = m
	})
}

// ModifyMeta applies fn to a copy of the current Meta and publishes the
// result as UpdateMeta does. Calls are serialized, so concurrent modifiers
// (the manager and the autopilot) do not lose each other's changes.
func (p *Pool) ModifyMeta(fn func(*Meta)) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	cur, err := p.publishedMeta()
	if err != nil {
		return err
	}
	next := cur
	fn(&next)
	if cur.HasRaftState {
		next.HasRaftState = true
	}
	switch {
	case next.Role != cur.Role:
		return &MetaError{Field: "Role", Value: string(next.Role), Err: ErrInvalidMeta, Reason: "cannot change"}
	case next.Datacenter != cur.Datacenter:
		return &MetaError{Field: "Datacenter", Value: next.Datacenter, Err: ErrInvalidMeta, Reason: "cannot change"}
	case next.NodeID != cur.NodeID:
		return &MetaError{Field: "NodeID", Value: next.NodeID, Err: ErrInvalidMeta, Reason: "cannot change"}
	}
	if next == cur {
		return nil
	}
	if err := next.Validate(); err != nil {
		return err
	}
	b, err := next.Encode()
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.local, p.localBytes = next, b
	p.mu.Unlock()
	if err := p.ml.UpdateNode(p.cfg.BroadcastTimeout); err != nil {
		return fmt.Errorf("%w: %w", ErrBroadcastTimeout, err)
	}
	return nil
}

// Leave announces a graceful departure: it publishes Meta.Leaving, then
// broadcasts memberlist's leave, waiting at most timeout for each. The others
// then see this node as StateLeft (a node that missed both messages sees it
// StateDead, the safe side). The node keeps answering gossip until Shutdown;
// it cannot rejoin (start a new Pool).
func (p *Pool) Leave(timeout time.Duration) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	next, err := p.publishedMeta()
	if errors.Is(err, ErrLeft) {
		return nil
	}
	if err != nil {
		return err
	}
	next.Leaving = true
	next.Bootstrap.Vote = 0
	b, err := next.Encode()
	p.mu.Lock()
	if err == nil {
		p.local, p.localBytes = next, b
	}
	p.left = true
	p.mu.Unlock()

	p.log.Info("leaving pool")
	var errs []error
	if err != nil {
		errs = append(errs, err)
	} else if err := p.ml.UpdateNode(timeout); err != nil {
		errs = append(errs, fmt.Errorf("%w: leaving flag: %w", ErrBroadcastTimeout, err))
	}
	// The Leaving meta travels by gossip, and memberlist counts a broadcast
	// done after a few transmissions, not once every member has it: a member
	// that gets the leave message first would take the departure for a
	// failure. So tell every alive member directly, over TCP, first.
	if err := p.announceLeaving(timeout); err != nil {
		errs = append(errs, err)
	}
	if err := p.ml.Leave(timeout); err != nil {
		errs = append(errs, fmt.Errorf("%w: leave: %w", ErrBroadcastTimeout, err))
	}
	return errors.Join(errs...)
}

// publishedMeta returns the Meta this node publishes, or ErrShutdown after
// Shutdown and ErrLeft after Leave. The caller holds lifeMu: Shutdown, Leave
// and ModifyMeta change them only under it, so the answer holds until the
// caller releases it.
func (p *Pool) publishedMeta() (Meta, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.shut:
		return Meta{}, ErrShutdown
	case p.left:
		return Meta{}, ErrLeft
	}
	return p.local, nil
}

// msgLeaving is the user message a leaving node sends every alive member
// (memberlist SendReliable): the type byte, then the node's name.
const msgLeaving byte = 1

func (p *Pool) announceLeaving(timeout time.Duration) error {
	msg := append([]byte{msgLeaving}, p.cfg.NodeName...)
	nodes := slices.DeleteFunc(p.ml.Members(), func(n *memberlist.Node) bool { return n.Name == p.cfg.NodeName })
	errc := make(chan error, len(nodes))
	// A send outlives this call when the timeout ends the wait first (a
	// member not answering TCP holds its dial for TCPTimeout): the pool's
	// WaitGroup lets Shutdown wait for it. Adding here is safe: Leave holds
	// lifeMu and has seen the pool not shut, and Shutdown takes lifeMu
	// before it waits.
	p.wg.Add(len(nodes))
	for _, n := range nodes {
		go func() {
			defer p.wg.Done()
			if err := p.ml.SendReliable(n, msg); err != nil {
				errc <- fmt.Errorf("%s: %w", n.Name, err)
				return
			}
			errc <- nil
		}()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	var errs []error
	for range nodes {
		select {
		case err := <-errc:
			if err != nil {
				errs = append(errs, err)
			}
		case <-t.C:
			return fmt.Errorf("%w: leaving notice", ErrBroadcastTimeout)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: leaving notice: %w", ErrBroadcastTimeout, errors.Join(errs...))
	}
	return nil
}

// reconnectLoop is Serf's reconnect: every reconnect interval it tries to
// join one member that failed (not one that left). A failed member that
// restarted joined only its seeds, which may have restarted too and formed a
// pool of their own; memberlist never probes a dead member again, so without
// this the two pools would never merge.
func (p *Pool) reconnectLoop() {
	defer p.wg.Done()
	tick := time.NewTicker(p.cfg.reconnectInterval())
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		var addrs []string
		p.mu.Lock()
		for _, m := range p.members {
			if m.State == StateDead && m.Name != p.cfg.NodeName {
				addrs = append(addrs, m.Addr)
			}
		}
		stop := p.shut || p.left
		p.mu.Unlock()
		if stop {
			return
		}
		if len(addrs) == 0 {
			continue
		}
		addr := addrs[rand.N(len(addrs))]
		if n, err := p.ml.Join([]string{addr}); n > 0 {
			p.log.Info("reconnected to a failed member", logging.KeyAddr, addr)
		} else {
			p.log.Debug("reconnect failed", logging.KeyAddr, addr, logging.KeyError, err)
		}
	}
}

// Shutdown stops gossip (without a leave message unless Leave was called:
// the others will find this node dead), the join retries and every
// subscription, and waits for the pool's goroutines (a leaving notice Leave
// stopped waiting for, or a keyring query's send KeyringQuery stopped
// waiting for, ends within memberlist's TCP timeout). It is safe to call
// more than once.
func (p *Pool) Shutdown() error {
	p.lifeMu.Lock()
	p.mu.Lock()
	if p.shut {
		p.mu.Unlock()
		p.lifeMu.Unlock()
		return nil
	}
	p.shut = true
	subs := slices.Collect(maps.Keys(p.subs))
	clear(p.subs)
	p.mu.Unlock()
	close(p.stop)
	err := p.ml.Shutdown()
	p.lifeMu.Unlock()
	p.wg.Wait()
	for _, s := range subs {
		s.close()
	}
	p.log.Info("gossip pool stopped")
	if err != nil {
		return fmt.Errorf("membership: shutdown: %w", err)
	}
	return nil
}

func (p *Pool) hasLeft() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.left
}

func (p *Pool) isShut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shut
}

// delegate gives memberlist this node's Meta. No user messages or state.
type delegate Pool

func (d *delegate) NodeMeta(limit int) []byte {
	p := (*Pool)(d)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.localBytes) > limit {
		// Encode enforces MaxMetaSize; a smaller limit would be memberlist's.
		p.log.Error("meta larger than memberlist allows", logging.KeyCount, len(p.localBytes))
		return nil
	}
	return bytes.Clone(p.localBytes)
}

// NotifyMsg receives msgLeaving from a member about to leave, and the
// keyring queries and their replies (keyring_query.go).
func (d *delegate) NotifyMsg(b []byte) {
	if len(b) < 2 {
		return
	}
	p := (*Pool)(d)
	switch b[0] {
	case msgLeaving:
		name := string(b[1:])
		p.mu.Lock()
		p.leaving[name] = true
		p.mu.Unlock()
	case msgKeyringQuery:
		// Answered on its own goroutine: the reply is a reliable send, which
		// must not hold up memberlist's handler.
		msg := bytes.Clone(b[1:])
		p.mu.Lock()
		if p.shut {
			p.mu.Unlock()
			return
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() { defer p.wg.Done(); p.handleKeyringQuery(msg) }()
	case msgKeyringReply:
		p.deliverKeyringReply(b[1:])
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// conflictDelegate is told by memberlist, with its node lock held, of a node
// that announces a name a member at another address holds: memberlist keeps
// that node out of the pool, for as long as the other is alive. Two nodes
// configured with one name are the usual cause, and only the operator can
// undo it, so it is logged as an error that names the settings.
type conflictDelegate Pool

func (d *conflictDelegate) NotifyConflict(existing, other *memberlist.Node) {
	var role Role
	if meta, err := DecodeMeta(other.Meta); err == nil {
		role = meta.Role
	}
	(*Pool)(d).log.Error("two nodes of the pool have one name: the one at addr is kept out of the pool while the one at peer is alive;"+
		" give every manager its own MANAGER_NODE_ID and every gate its own GATE_NODE_NAME"+
		" (or a node came back at a new address before its old one was found dead)",
		logging.KeyNode, existing.Name, logging.KeyAddr, other.Address(), logging.KeyRole, role, logging.KeyPeer, existing.Address())
}

// eventDelegate receives memberlist's membership changes. memberlist calls it
// with its node lock held: it must not call back into memberlist, and must
// not block (subscribers are fed through coalescing queues).
type eventDelegate Pool

func (e *eventDelegate) NotifyJoin(n *memberlist.Node)   { (*Pool)(e).alive(n, EventJoin) }
func (e *eventDelegate) NotifyUpdate(n *memberlist.Node) { (*Pool)(e).alive(n, EventUpdate) }
func (e *eventDelegate) NotifyLeave(n *memberlist.Node)  { (*Pool)(e).departed(n) }

func (p *Pool) alive(n *memberlist.Node, typ EventType) {
	meta, err := DecodeMeta(n.Meta)
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		// A node of an incompatible version, or not one of ours: ignore it.
		p.log.Warn("ignoring member with unreadable meta", logging.KeyPeer, n.Name, logging.KeyAddr, n.Address(), logging.KeyError, err)
		delete(p.members, n.Name)
		return
	}
	old, existed := p.members[n.Name]
	if typ == EventUpdate && (!existed || old.State != StateAlive) {
		typ = EventJoin
	}
	if typ == EventJoin {
		// Back after a leave or a failure: a new life, maybe a new process
		// on a new address with its clock set right. Neither the leave of
		// the former one nor its clock samples are this one's (ClockOffsets
		// drops a departed member's samples only if asked while it is
		// gone).
		delete(p.leaving, n.Name)
		p.clocks.Forget(n.Name)
	}
	m := &Member{Name: n.Name, Addr: n.Address(), Meta: meta, State: StateAlive, LastSeen: now}
	p.members[n.Name] = m
	p.log.Debug("member "+typ.String(), logging.KeyPeer, n.Name, logging.KeyAddr, m.Addr,
		logging.KeyNodeID, meta.NodeID, logging.KeyRole, string(meta.Role), logging.KeyRaftState, meta.HasRaftState)
	p.publishLocked(Event{Type: typ, Member: *m})
}

func (p *Pool) departed(n *memberlist.Node) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.members[n.Name]
	if !ok {
		meta, err := DecodeMeta(n.Meta)
		if err != nil {
			return
		}
		m = &Member{Name: n.Name, Addr: n.Address(), Meta: meta}
		p.members[n.Name] = m
	} else if meta, err := DecodeMeta(n.Meta); err == nil {
		m.Meta = meta
	}
	// memberlist does not say whether the node left or failed (Node.State is
	// not set, hashicorp/memberlist#293): Pool.Leave publishes Leaving first.
	typ := EventFailed
	m.State = StateDead
	if m.Meta.Leaving || p.leaving[n.Name] || (n.Name == p.cfg.NodeName && p.left) {
		typ = EventLeave
		m.State = StateLeft
	}
	delete(p.leaving, n.Name)
	m.LastSeen = now
	p.log.Info("member "+typ.String(), logging.KeyPeer, n.Name, logging.KeyAddr, m.Addr, logging.KeyNodeID, m.Meta.NodeID)
	p.publishLocked(Event{Type: typ, Member: *m})
}

// createMemberlist creates the memberlist of mc. With wrap set, it first
// gives mc the network transport memberlist.Create would make for itself
// (UDP and TCP on BindAddr:BindPort; a port 0 becomes the one bound), wrapped
// by wrap, and shuts that transport down if Create fails.
func createMemberlist(mc *memberlist.Config, wrap func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport) (*memberlist.Memberlist, error) {
	if wrap != nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger, MetricLabels: mc.MetricLabels})
		if err != nil {
			return nil, err
		}
		if mc.BindPort == 0 {
			mc.BindPort = nt.GetAutoBindPort()
			mc.AdvertisePort = mc.BindPort
		}
		mc.Transport = wrap(nt)
	}
	ml, err := memberlist.Create(mc)
	if err != nil && mc.Transport != nil {
		_ = mc.Transport.Shutdown()
	}
	return ml, err
}
