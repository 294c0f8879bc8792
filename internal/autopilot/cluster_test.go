package autopilot

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
)

const waitTimeout = 30 * time.Second

// counter is the FSM: it counts applied entries.
type counter struct {
	mu sync.Mutex
	n  uint64
}

func (c *counter) Apply(*raft.Log) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

func (c *counter) value() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *counter) Snapshot() (raft.FSMSnapshot, error) { return counterSnap(c.value()), nil }

func (c *counter) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var b [8]byte
	if _, err := io.ReadFull(rc, b[:]); err != nil {
		return err
	}
	c.mu.Lock()
	c.n = binary.BigEndian.Uint64(b[:])
	c.mu.Unlock()
	return nil
}

type counterSnap uint64

func (s counterSnap) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(binary.BigEndian.AppendUint64(nil, uint64(s))); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}
func (s counterSnap) Release() {}

// node is one manager: a raft (TCP transport on loopback, in-memory stores
// that survive restarts) + a membership pool + an autopilot.
type node struct {
	t      testing.TB
	id     string
	log    *slog.Logger
	expect int
	grace  time.Duration
	// version is the protocol version the node advertises (0: 1).
	version int

	store *raft.InmemStore // log and stable store, kept across restarts
	snaps *raft.InmemSnapshotStore

	mu         sync.Mutex
	gossipPort int    // reserved by reservePort, so seeds can be given before start
	raftAddr   string // fixed after the first start
	fsm        *counter
	trans      *raft.NetworkTransport
	raft       *raft.Raft
	pool       *membership.Pool
	ap         *Autopilot
	cancel     context.CancelFunc
	runDone    chan struct{}
	running    bool
}

func newNode(t testing.TB, id string, expect int, grace time.Duration) *node {
	n := &node{t: t, id: id, log: testutil.Logger(t).With(logging.KeyNode, id), expect: expect, grace: grace,
		store: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore(), gossipPort: testutil.FreePort(t)}
	t.Cleanup(n.kill)
	return n
}

func (n *node) gossipAddr() string { return fmt.Sprintf("127.0.0.1:%d", n.gossipPort) }

// start starts (or restarts) the node. newRaftAddr moves it to a fresh port.
func (n *node) start(seeds []string, newRaftAddr bool) {
	t := n.t
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running {
		t.Fatalf("%s already running", n.id)
	}
	bind := n.raftAddr
	if bind == "" || newRaftAddr {
		bind = "127.0.0.1:0"
	}
	hl := logging.HCLog(n.log, "raft")
	// MaxRPCsInFlight 1 turns off pipeline replication: with it, a leader
	// that steps down (as in a leadership transfer) can park a replication
	// goroutine for good, and raft.Shutdown then never returns (the
	// pipelineReplicate/decodeResponses deadlock of hashicorp/raft#612).
	trans, err := raft.NewTCPTransportWithConfig(bind, nil, &raft.NetworkTransportConfig{
		MaxPool: 3, Timeout: 2 * time.Second, MaxRPCsInFlight: 1, Logger: hl.Named("net"),
	})
	if err != nil {
		t.Fatalf("%s: raft transport on %s: %v", n.id, bind, err)
	}
	n.raftAddr = string(trans.LocalAddr())

	has, err := raft.HasExistingState(n.store, n.store, n.snaps)
	if err != nil {
		t.Fatal(err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.id)
	// Short, but long enough that a loaded CI machine (-race, two shared
	// cores) pausing the process for a few hundred milliseconds does not
	// cost the leader its lease.
	rc.HeartbeatTimeout = time.Second
	rc.ElectionTimeout = time.Second
	rc.LeaderLeaseTimeout = time.Second
	rc.CommitTimeout = 20 * time.Millisecond
	rc.SnapshotThreshold = 1 << 20
	rc.SnapshotInterval = time.Hour
	rc.Logger = hl
	n.fsm = &counter{}
	r, err := raft.NewRaft(rc, n.fsm, n.store, n.store, n.snaps, trans)
	if err != nil {
		t.Fatalf("%s: raft: %v", n.id, err)
	}
	pool, err := membership.Start(context.Background(), membership.Config{
		NodeName: n.id,
		BindAddr: "127.0.0.1",
		BindPort: n.gossipPort,
		Seeds:    seeds,
		Profile:  membership.ProfileTest,
		Logger:   n.log,
		Meta: membership.Meta{
			Role: membership.RoleManager, Datacenter: "dc1", NodeID: n.id,
			RPCAddr: "127.0.0.1:1", RaftAddr: n.raftAddr, HasRaftState: has, Version: max(n.version, 1),
		},
	})
	if err != nil {
		_ = r.Shutdown().Error()
		t.Fatalf("%s: pool: %v", n.id, err)
	}
	ap := New(Config{
		DC: "dc1", NodeID: n.id, BootstrapExpect: n.expect, HasExistingState: has,
		DeadServerGrace: n.grace, ReconcileInterval: 200 * time.Millisecond, ChangeTimeout: 5 * time.Second,
		UpdateInterval: 100 * time.Millisecond, ServerStabilizationTime: 300 * time.Millisecond,
		Logger: n.log,
	}, r, pool)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ap.Run(ctx); err != nil {
			n.log.Error("autopilot stopped", logging.KeyError, err)
		}
	}()
	n.trans, n.raft, n.pool, n.ap, n.cancel, n.runDone, n.running = trans, r, pool, ap, cancel, done, true
}

// kill stops the node without a leave: memberlist Shutdown, raft Shutdown.
func (n *node) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.running {
		return
	}
	n.cancel()
	<-n.runDone
	if err := n.pool.Shutdown(); err != nil {
		n.t.Errorf("%s: pool shutdown: %v", n.id, err)
	}
	if err := n.raft.Shutdown().Error(); err != nil {
		n.t.Errorf("%s: raft shutdown: %v", n.id, err)
	}
	// Shutdown closes the listener, not the pooled outbound connections,
	// whose reader goroutines on the peers would otherwise outlive the test.
	n.trans.CloseStreams()
	// raft closes its transport only through the Shutdown future that did the
	// shutting down; one raft started itself (ShutdownOnRemove) is not joined.
	if err := n.trans.Close(); err != nil {
		n.t.Errorf("%s: transport close: %v", n.id, err)
	}
	n.running = false
}

// leave stops the node the way a manager does on SIGTERM.
func (n *node) leave() {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.ap.Leave(ctx, 5*time.Second); err != nil {
		n.t.Fatalf("%s: leave: %v", n.id, err)
	}
	n.kill()
}

func (n *node) isRunning() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.running
}

// configString renders a configuration sorted by ID: "a(Voter) b(Voter)".
func configString(c raft.Configuration, withAddr bool) string {
	s := slices.Clone(c.Servers)
	slices.SortFunc(s, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
	parts := make([]string, len(s))
	for i, srv := range s {
		parts[i] = fmt.Sprintf("%s(%s)", srv.ID, srv.Suffrage)
		if withAddr {
			parts[i] = fmt.Sprintf("%s@%s(%s)", srv.ID, srv.Address, srv.Suffrage)
		}
	}
	return strings.Join(parts, " ")
}

func (n *node) config() string {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return "error: " + err.Error()
	}
	return configString(f.Configuration(), false)
}

func running(nodes []*node) []*node {
	var out []*node
	for _, n := range nodes {
		if n.isRunning() {
			out = append(out, n)
		}
	}
	return out
}

func voters(ids ...string) string {
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id + "(Voter)"
	}
	return strings.Join(parts, " ")
}

// converged is a waitFor condition: every running node has the configuration
// want, exactly one is leader, and every one publishes HasRaftState.
func converged(nodes []*node, want string) func() (bool, string) {
	return func() (bool, string) {
		leaders := 0
		for _, n := range running(nodes) {
			if got := n.config(); got != want {
				return false, fmt.Sprintf("%s configuration %q to be %q", n.id, got, want)
			}
			if n.raft.State() == raft.Leader {
				leaders++
			}
			if !n.pool.LocalNode().Meta.HasRaftState {
				return false, n.id + " to publish HasRaftState"
			}
		}
		return leaders == 1, fmt.Sprintf("one leader, have %d", leaders)
	}
}

func leader(t testing.TB, nodes []*node) *node {
	t.Helper()
	var l *node
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		l = nil
		for _, n := range running(nodes) {
			if n.raft.State() == raft.Leader {
				l = n
			}
		}
		return l != nil, "a leader"
	})
	return l
}

func bootstrappers(nodes []*node) []string {
	var ids []string
	for _, n := range nodes {
		n.mu.Lock()
		ap := n.ap
		n.mu.Unlock()
		if ap != nil && ap.Status().Bootstrapped {
			ids = append(ids, n.id)
		}
	}
	return ids
}

// startAll starts nodes at once (a barrier releases them together), each with
// its one seed.
func startAll(t testing.TB, nodes []*node, seeds func(i int) []string) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			n.start(seeds(i), false)
		}()
	}
	close(release)
	wg.Wait()
}
