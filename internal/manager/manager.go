// Package manager is a once manager: a member of its datacenter's Raft group,
// whose FSM (internal/ledger) is the authoritative idempotency ledger, and the
// server of the gates' RPC (internal/rpc).
//
// At the leader a submission is: admission (validation, capacity) → one
// Admit (the key and its Commit or Reject, durable) → answer. Every change
// is a Raft log entry committed on a quorum and applied before the gate hears of
// it. Concurrent submissions share log entries: the batcher (batch.go) puts
// their Admits in one AdmitBatch entry, and raft's BatchApplyCh groups concurrent entries into one
// AppendEntries and one fsync. Time and job IDs are decided
// here, before proposing; the FSM only applies what the command says.
package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/once-dev/once/internal/atomicfile"
	"github.com/once-dev/once/internal/autopilot"
	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/replay"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/walstore"
)

// Deps are a manager's collaborators; zero values take defaults.
type Deps struct {
	Logger *slog.Logger
	// Now is the leader's clock (default time.Now). It is read outside the FSM
	// only: its values travel inside commands.
	Now func() time.Time
	// Registerer receives the manager's metrics (default: none).
	Registerer prometheus.Registerer
	// Transport, when set, is the Raft transport (as raft.NewRaft takes it;
	// tests use raft.NewInmemTransport). cfg.RaftAdvertise must be its
	// LocalAddr. The manager closes it on Close when it has a Close method.
	Transport raft.Transport
	// WrapStreamLayer, when set and Transport is nil, wraps the TCP stream layer
	// the manager listens on before raft's NetworkTransport uses it (fault
	// injection). Closing the returned layer must close the one it wraps.
	WrapStreamLayer func(raft.StreamLayer) raft.StreamLayer
	// Clock measures the other managers' clocks (clock.go). nil: none, the
	// manager trusts its own clock as if it were alone (tests). The daemon's
	// reads its membership pool once it runs, and has measured nobody
	// before.
	Clock ClockSource
	// ClusterTLS, when set, carries Raft over mutual TLS and is how the
	// manager's own RPC calls (the outbox's) dial other managers.
	ClusterTLS *certs.Cluster
	// Dial, when set, opens the manager's own RPC connections to other
	// managers (the outbox's; rpc.ClientConfig.Dial). nil: a plain dial. A
	// test seam: the tests module's fault layer cuts the network between
	// datacenters through it.
	Dial rpc.DialFunc
	// Peers is the directory of the datacenter's managers: their RPC
	// addresses (for "not leader" hints) and protocol versions (what the
	// leader may propose). The daemon's follows its membership pool. nil:
	// the manager knows only itself.
	Peers Peers
	// ClusterSecret is the secret the manager's own RPC calls present (the
	// outbox's, to other datacenters); "" for none.
	ClusterSecret string
	// ConfigMismatches, when set, lists the settings of other managers of
	// the federation and of the datacenter's gates that differ from this
	// manager's, for Status (the daemon's federation view).
	ConfigMismatches func() []rpc.ConfigMismatch
	// ClaimDataDir, when set, is called once New holds the data directory
	// (the Raft log's lock is taken), before it opens the ledger, the
	// stable store or the snapshots or starts Raft: an error refuses the
	// start. The daemon checks there that the directory is this manager's
	// (its identity file); under the lock, so that two processes cannot
	// race on it.
	ClaimDataDir func() error
	// Knobs are for tests only.
	Knobs TestingKnobs
}

// TestingKnobs let tests hold the manager at chosen points (CockroachDB's
// pattern): zero values change nothing, and no production path sets them.
type TestingKnobs struct {
	// BeforeAdmit runs in the submission that owns a key's Admit proposal,
	// before it proposes: while it runs, the key is in progress and other
	// submissions of it wait (at most their WaitMillis). It may block,
	// honouring ctx.
	BeforeAdmit func(ctx context.Context, tenant, key string)
	// AfterLook runs in a submission whose look at its key found no live
	// entry, before it asks to propose the key's Admit. It may block,
	// honouring ctx.
	AfterLook func(ctx context.Context, tenant, key string)
	// WaitsOnAdmit runs in a submission that finds its key's Admit in
	// flight, before it waits for it (or, allowed no wait, answers
	// in_progress). It must not block.
	WaitsOnAdmit func(tenant, key string)
	// BeforeBarrier runs as a term of leadership begins, before its first
	// Barrier (leader.go). It may block.
	BeforeBarrier func()
	// RestoreRead runs when raft.Restore has read the whole state a
	// RestoreLedger hands it, before the ledger takes it (on Raft's main
	// goroutine: the leader can neither step down nor append meanwhile).
	// It must not block.
	RestoreRead func()
	// SnapshotWritten runs as a snapshot is written into this manager's
	// snapshot store (the ledger's Persist, on Raft's snapshot goroutine,
	// or a leader's snapshot copied in, on Raft's main goroutine) once its
	// first bytes are written, before the rest: it may block, holding the
	// write midway (snapknobs.go).
	SnapshotWritten func()
	// SnapshotRead runs as a snapshot is read from this manager's snapshot
	// store (by the ledger's Restore of one the leader installed or of the
	// newest on start, on Raft's FSM goroutine; or, at a leader, to send
	// it) when the whole snapshot has been read, before the reader takes
	// it: it may block, holding a Restore midway (a disk ledger's new
	// generation is filled, not yet current).
	SnapshotRead func()
}

// Manager is one manager node.
type Manager struct {
	cfg  Config
	deps Deps // as New was given them, Logger and Now defaulted
	// capacityDetail is the detail of a capacity rejection, which every
	// Commit carries (ledger.Commit.CapacityDetail): made once.
	capacityDetail string
	log            *slog.Logger
	now            func() time.Time

	fsm       *ledger.FSM
	raft      *raft.Raft
	transport raft.Transport
	// votes guards the votes of a manager that started without Raft state
	// (voteguard.go); nil when it started with state.
	votes    *voteGuard
	logStore *countingLogStore
	stable   *raftboltdb.BoltStore
	snaps    raft.SnapshotStore
	// jobsQueued fires when a commit may have queued a job or leadership
	// ends: what a long-polling lease waits for (workers.go).
	jobsQueued broadcast
	// leaseReplays keeps the answers of leases asked with an idempotency
	// key while this node leads (workers.go); restores counts the ledger's
	// Restores, which end that memory (leaseReplayKey).
	leaseReplays *replay.Memory[leaseAnswer]
	restores     atomic.Uint64
	metrics      *metrics
	clock        ledgerClock                         // ledger time and the clock watch (clock.go)
	autopilot    atomic.Pointer[autopilot.Autopilot] // set once membership starts

	// readyTerm is the term in which this node, as leader, has applied every
	// entry of earlier terms (a Barrier): only then does it serve.
	readyTerm atomic.Uint64

	// proposing holds the Admit proposals in flight, by tenant and key.
	// While one is, the key is in progress: other submissions of it wait
	// for it (proposeOrWait) on the key's channel, made by the first of
	// them (nil while none waits) and closed when the proposal ends.
	proposingMu sync.Mutex
	proposing   map[slot]chan struct{}

	// admits batches the submissions' Admits, workers the workers'
	// Leases, Heartbeats, Completes and Fails (batch.go).
	admits, workers *batcher
	queueJobs       atomic.Bool // Config.QueueJobs (jobs.go), which tests switch at run time

	bgWG     sync.WaitGroup
	waitsWG  sync.WaitGroup // callers between a Raft request and its answer (holdRaft)
	closeMu  sync.Mutex
	closed   bool
	shutdown chan struct{}
	// polls ends at EndLongPolls (or Close): the leases waiting for a job
	// answer at once (awaitQueued).
	polls    context.Context
	endPolls context.CancelFunc
	// halted is closed when the ledger halts on an entry it cannot decode
	// (onHalt): the daemon stops on it.
	halted chan struct{}
}

// errShuttingDown answers a call that needs Raft once Close has begun.
var errShuttingDown = rpc.Errorf(rpc.CodeUnavailable, "manager shutting down")

// endedBeforeApplied answers a caller whose ctx ended while its command was
// in flight: the entry may still commit; the ledger makes the retry safe.
func endedBeforeApplied(ctx context.Context) error {
	return rpc.Errorf(rpc.CodeUnavailable, "request ended before the Raft entry was applied: %v", ctx.Err())
}

// New opens the stores in cfg.DataDir and starts the Raft node. It does not
// bootstrap a cluster: see Bootstrap and the autopilot.
func New(cfg Config, deps Deps) (*Manager, error) {
	if deps.Logger == nil {
		deps.Logger = logging.Discard()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	m := &Manager{
		cfg:            cfg,
		deps:           deps,
		capacityDetail: fmt.Sprintf("datacenter %s holds its maximum of %d queued jobs", cfg.Datacenter, cfg.MaxQueuedJobs),
		log:            deps.Logger.With(logging.KeyNode, cfg.NodeID),
		now:            deps.Now,
		proposing:      map[slot]chan struct{}{},
		shutdown:       make(chan struct{}),
		halted:         make(chan struct{}),
		metrics:        newMetrics(deps.Registerer),
	}
	m.polls, m.endPolls = context.WithCancel(context.Background())
	m.leaseReplays = replay.New(replay.Options[leaseAnswer]{MaxAnswers: leaseReplayMax, MaxBytes: leaseReplayBytes,
		TTL: leaseReplayTTL, Now: m.now, Size: leaseAnswer.size})
	m.queueJobs.Store(cfg.QueueJobs)
	if deps.Registerer != nil {
		deps.Registerer.MustRegister(clockCollector{m})
	}
	m.clock.src = deps.Clock

	raftDir := filepath.Join(cfg.DataDir, "raft")
	if err := atomicfile.MkdirAll(raftDir, 0o755); err != nil {
		return nil, fmt.Errorf("manager: data dir: %w", err)
	}
	var err error
	ok := false
	defer func() {
		if !ok {
			m.closeStores()
		}
	}()
	// The Raft log first: its lock refuses a second process on this data
	// directory (walstore.ErrLocked) before the ledger's store is opened,
	// whose opening clears the ledger's other generations.
	ws, err := walstore.Open(filepath.Join(raftDir, "wal"), walstore.Options{Logger: m.log.With(logging.KeyComponent, "walstore")})
	if err != nil {
		return nil, fmt.Errorf("manager: open raft log: %w", err)
	}
	m.logStore = &countingLogStore{Store: ws}
	if deps.ClaimDataDir != nil {
		if err := deps.ClaimDataDir(); err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
	}
	if m.fsm, err = openLedger(cfg, m.onChange, m.onHalt, m.log); err != nil {
		return nil, err
	}
	if m.stable, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, "stable.db")}); err != nil {
		return nil, fmt.Errorf("manager: open stable store: %w", err)
	}
	hcl := logging.HCLog(m.log, "raft")
	if err := m.removePartialSnapshots(filepath.Join(raftDir, "snapshots")); err != nil {
		return nil, err
	}
	if m.snaps, err = raft.NewFileSnapshotStoreWithLogger(raftDir, 2, hcl.Named("snapshots")); err != nil {
		return nil, fmt.Errorf("manager: open snapshot store: %w", err)
	}
	m.snaps = knobbedSnapshots(m.snaps, deps.Knobs)
	// bbolt and the snapshot store create stable.db and snapshots/ without
	// fsyncing raftDir: a crash could lose the node's vote with the file.
	if err := atomicfile.SyncDir(raftDir); err != nil {
		return nil, fmt.Errorf("manager: data dir: %w", err)
	}
	hasState, err := m.HasState()
	if err != nil {
		return nil, fmt.Errorf("manager: read raft state: %w", err)
	}
	if m.transport, err = newTransport(cfg, deps, hcl); err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	why, err := guardOnStart(m.stable, hasState)
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	if why != "" {
		m.transport, m.votes = newVoteGuard(m.transport, raft.ServerID(cfg.NodeID), why, m.stable, m.log.With(logging.KeyComponent, "voteguard"))
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hcl
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotThreshold = uint64(cfg.SnapshotThreshold)
	rc.TrailingLogs = uint64(cfg.TrailingLogs)
	rc.MaxAppendEntries = cfg.MaxAppendEntries
	rc.BatchApplyCh = true
	// A removed manager stays up as a follower outside the configuration (the
	// autopilot re-adds it if it is alive), rather than a process whose Raft
	// has stopped behind its back.
	rc.ShutdownOnRemove = false
	rc.NoLegacyTelemetry = true
	restore, err := m.ledgerRestoreOnStart()
	if err != nil {
		return nil, err
	}
	rc.NoSnapshotRestoreOnStart = !restore
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("manager: raft config: %w", err)
	}
	if m.raft, err = raft.NewRaft(rc, m.fsm, m.logStore, m.stable, m.snaps, m.transport); err != nil {
		return nil, fmt.Errorf("manager: start raft: %w", err)
	}
	if m.votes != nil {
		m.votes.setLastIndex(m.raft.LastIndex)
	}
	ok = true
	m.bgWG.Go(m.leaderLoop)
	m.admits = newBatcher(m, ledger.TypeAdmitBatch)
	m.workers = newBatcher(m, ledger.TypeWorkerBatch)
	m.bgWG.Go(m.admits.run)
	m.bgWG.Go(m.workers.run)
	m.bgWG.Go(func() { every(m.shutdown, clockCheckInterval, m.checkClock) })
	return m, nil
}

// countingLogStore counts the Raft log's write batches: each StoreLogs is one
// wal batch and one fsync, so the count is the fsyncs the log did.
type countingLogStore struct {
	*walstore.Store
	batches atomic.Uint64
}

func (c *countingLogStore) StoreLog(l *raft.Log) error {
	c.batches.Add(1)
	return c.Store.StoreLog(l)
}

func (c *countingLogStore) StoreLogs(logs []*raft.Log) error {
	c.batches.Add(1)
	return c.Store.StoreLogs(logs)
}

// HasState reports whether this node has Raft state (it was bootstrapped or
// joined a cluster before). A node with state never bootstraps.
func (m *Manager) HasState() (bool, error) {
	return raft.HasExistingState(m.logStore, m.stable, m.snaps)
}

// Bootstrap bootstraps the Raft group with the given voters; a no-op when this
// node already has state.
func (m *Manager) Bootstrap(servers []raft.Server) error {
	err := m.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	if err == nil && m.votes != nil {
		// Its log is the bootstrap configuration: nothing was forgotten.
		m.votes.markProven("bootstrapped the group")
	}
	return err
}

// Raft exposes the Raft node (to the autopilot and to tests).
func (m *Manager) Raft() *raft.Raft { return m.raft }

// Halted is closed when the ledger has halted: a committed entry this build
// cannot decode (an unknown command type or version, or malformed bytes) is
// not applied, nor is any entry after it (ledger.HaltError, from
// FSM().Halted()). The daemon stops on it (exit 1) rather than serve a
// ledger that would diverge from the other replicas; docs/operations.md says
// what to do.
func (m *Manager) Halted() <-chan struct{} { return m.halted }

// onHalt is the ledger's OnHalt: called once, on Raft's FSM goroutine; it
// must not block.
func (m *Manager) onHalt(h *ledger.HaltError) {
	m.log.Error("the ledger halted: a committed entry cannot be applied by this build; the manager stops",
		logging.KeyIndex, h.Index, logging.KeyOp, h.Type.String(), logging.KeyVersion, h.Version, logging.KeyError, h)
	close(m.halted)
}

// FSM exposes the ledger (to tests).
func (m *Manager) FSM() *ledger.FSM { return m.fsm }

// Config returns the manager's configuration.
func (m *Manager) Config() Config { return m.cfg }

// EndLongPolls ends the leases waiting for a job at this manager, now and
// from now on: each answers what it has (no job), as at the end of its
// wait, and the worker asks again. The daemon calls it when it begins to
// stop, before it waits for the calls in flight, so that a long poll
// (up to a minute) neither holds the shutdown, nor keeps this manager
// leader without serving, nor is cut with no answer. Close calls it too.
func (m *Manager) EndLongPolls() { m.endPolls() }

// Close stops the manager: the goroutines waiting on Raft finish, a leader
// hands leadership to another voter (so the datacenter does not wait out an
// election timeout), then Raft shuts down and the stores are closed. Stop the
// autopilot first (it asks Raft for futures too). Close is idempotent.
func (m *Manager) Close() error {
	m.closeMu.Lock()
	if m.closed {
		m.closeMu.Unlock()
		return nil
	}
	m.closed = true
	close(m.shutdown)
	m.closeMu.Unlock()
	m.endPolls()

	// Raft answers a future only while it runs: one still queued in raft's
	// buffered apply, verify or transfer channel, or committed but not yet
	// applied, when Shutdown comes is never answered, and a Barrier or Apply
	// asked for during the shutdown may be queued all the same. So everything
	// that waits on a future (the leader loop's Barrier and proposals, the
	// clock watch's handoff, apply, reads' VerifyLeader) finishes first, while
	// Raft still answers, and nothing asks once m.closed is set.
	m.bgWG.Wait()
	m.waitsWG.Wait()
	if m.raft.State() == raft.Leader {
		if voters, _ := m.voterIDs(); len(voters) > 1 {
			if err := m.raft.LeadershipTransfer().Error(); err != nil {
				m.log.Warn("leadership transfer before shutdown failed", logging.KeyError, err)
			}
		}
	}
	// Start the shutdown, then close the transport before waiting for it: a
	// replication goroutine blocked on an unanswered peer RPC would otherwise
	// hold Shutdown until the RPC's own timeout (Consul shuts down the same way).
	f := m.raft.Shutdown()
	terr := closeTransport(m.transport)
	err := f.Error()
	if cerr := m.closeStores(); err == nil {
		err = cerr
	}
	if err == nil {
		err = terr
	}
	return err
}

// holdRaft registers a caller about to ask Raft for a future and wait on it
// outside the background goroutines: Close waits for release before it shuts
// Raft down. It fails (errShuttingDown) once Close has begun.
func (m *Manager) holdRaft() (release func(), err error) {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.closed {
		return nil, errShuttingDown
	}
	m.waitsWG.Add(1)
	return m.waitsWG.Done, nil
}

// voterIDs lists the voters of the Raft configuration.
func (m *Manager) voterIDs() ([]string, error) {
	f := m.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	return ids, nil
}

// RaftServer is the Raft configuration's server with ID id; false when the
// configuration does not hold it or cannot be read.
func (m *Manager) RaftServer(id string) (raft.Server, bool) {
	if f := m.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == id {
				return s, true
			}
		}
	}
	return raft.Server{}, false
}

func (m *Manager) closeStores() error {
	var errs []error
	if m.transport != nil {
		errs = append(errs, closeTransport(m.transport)) // idempotent
	}
	if m.logStore != nil {
		errs = append(errs, m.logStore.Close())
	}
	if m.stable != nil {
		errs = append(errs, m.stable.Close())
	}
	if m.fsm != nil {
		errs = append(errs, m.fsm.Close()) // after Raft: nothing applies any more
	}
	return errors.Join(errs...)
}
