package manager

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
)

// Config is everything a manager is told at start. Settings come from flags and
// MANAGER_* / IDEMPOTENCY_* variables (docs/configuration.md lists them all).
type Config struct {
	NodeID     string // MANAGER_NODE_ID: unique, stable across restarts (the Raft server ID)
	Datacenter string // MANAGER_DATACENTER
	DataDir    string // MANAGER_DATA_DIR: raft/wal, raft/stable.db, raft/snapshots

	RaftAddr      string // MANAGER_RAFT_ADDR: Raft bind address
	RaftAdvertise string // MANAGER_RAFT_ADVERTISE: address peers dial (default: RaftAddr)
	RPCAddr       string // MANAGER_RPC_ADDR: the gates' RPC listener (also /metrics)
	RPCAdvertise  string // MANAGER_RPC_ADVERTISE: address gates dial (default: RPCAddr)

	GossipAddr      string        // MANAGER_GOSSIP_ADDR: memberlist bind address
	GossipAdvertise string        // MANAGER_GOSSIP_ADVERTISE: gossip address the others dial (default: derived from GossipAddr)
	Join            []string      // MANAGER_JOIN: gossip seeds
	GossipKey       string        // MANAGER_GOSSIP_KEY: base64 16/24/32-byte key, empty = no encryption
	GossipProfile   string        // MANAGER_GOSSIP_PROFILE: lan | local
	BootstrapExpect int           // MANAGER_BOOTSTRAP_EXPECT
	DeadServerGrace time.Duration // MANAGER_DEAD_SERVER_GRACE_SECONDS
	// LeaveOnTerminate (MANAGER_LEAVE_ON_TERMINATE): on SIGTERM/SIGINT, leave
	// the Raft configuration for good instead of stopping as a voter.
	LeaveOnTerminate bool

	HeartbeatTimeout   time.Duration // MANAGER_RAFT_HEARTBEAT_TIMEOUT
	ElectionTimeout    time.Duration // MANAGER_RAFT_ELECTION_TIMEOUT
	LeaderLeaseTimeout time.Duration // MANAGER_RAFT_LEADER_LEASE_TIMEOUT
	SnapshotThreshold  int           // MANAGER_RAFT_SNAPSHOT_THRESHOLD
	TrailingLogs       int           // MANAGER_RAFT_TRAILING_LOGS
	MaxAppendEntries   int           // MANAGER_RAFT_MAX_APPEND_ENTRIES

	MaxQueuedJobs       int           // MANAGER_MAX_QUEUED_JOBS: capacity → 429 rejections
	JobRetention        time.Duration // MANAGER_JOB_RETENTION_SECONDS
	AllowedJobTypes     []string      // MANAGER_ALLOWED_JOB_TYPES: empty = any; else others → 422
	LedgerMaxEntries    int           // IDEMPOTENCY_LEDGER_MAX_ENTRIES
	WatermarkTTL        time.Duration // IDEMPOTENCY_WATERMARK_TTL_SECONDS
	WatermarkMaxClients int           // IDEMPOTENCY_WATERMARK_MAX_CLIENTS
	ApplyTimeout        time.Duration // MANAGER_APPLY_TIMEOUT: bound on one Raft round of a submission

	Failpoints bool   // MANAGER_FAILPOINTS: enable /debug/failpoints (tests, chaos)
	Pprof      bool   // MANAGER_PPROF: serve /debug/pprof on the RPC listener
	LogLevel   string // MANAGER_LOG_LEVEL
	LogFormat  string // MANAGER_LOG_FORMAT

	Idempotency config.Idempotency

	// Ledger bounds and orphan resolution (docs/ledger.md).
	//
	// OrphanGrace is MANAGER_ORPHAN_GRACE: the age after which the leader
	// resolves a PENDING entry itself.
	OrphanGrace time.Duration
	// WatermarkMaxClientsPerTenant is IDEMPOTENCY_WATERMARK_MAX_CLIENTS_PER_TENANT.
	WatermarkMaxClientsPerTenant int
	// LedgerMaxBytes is IDEMPOTENCY_LEDGER_MAX_BYTES: the bound on the bytes of
	// entries and retained jobs, payloads included.
	LedgerMaxBytes int64
	// LedgerTenantMaxBytes is IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES: one tenant's share.
	LedgerTenantMaxBytes int64
}

var nodeIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func validHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if port == "" {
		return errors.New("missing port")
	}
	return nil
}

func optionalHostPort(s string) error {
	if s == "" {
		return nil
	}
	return validHostPort(s)
}

func validName(s string) error {
	if !nodeIDRe.MatchString(s) {
		return errors.New("must be 1-63 characters of A-Z a-z 0-9 . _ - starting with a letter or digit")
	}
	return nil
}

// register puts every manager setting on l, storing into c.
func register(l *config.Loader, c *Config) {
	host, _ := os.Hostname()
	if validName(host) != nil {
		host = "manager1"
	}
	l.String(&c.NodeID, "MANAGER_NODE_ID", host, "1-63 characters of A-Z a-z 0-9 . _ -", validName,
		"this manager's unique, stable ID (its Raft server ID)")
	l.String(&c.Datacenter, "MANAGER_DATACENTER", "dc1", "1-63 characters of A-Z a-z 0-9 . _ -", validName,
		"the datacenter this manager's Raft group serves")
	l.String(&c.DataDir, "MANAGER_DATA_DIR", "", "a directory path", nil,
		"where the Raft log, stable store and snapshots live (default ./data/<node-id>)")
	l.String(&c.RaftAddr, "MANAGER_RAFT_ADDR", "127.0.0.1:7000", "host:port", validHostPort, "Raft bind address")
	l.String(&c.RaftAdvertise, "MANAGER_RAFT_ADVERTISE", "", "host:port", optionalHostPort, "Raft address peers dial (default MANAGER_RAFT_ADDR)")
	l.String(&c.RPCAddr, "MANAGER_RPC_ADDR", "127.0.0.1:7100", "host:port", validHostPort, "RPC listener for gates (also serves /metrics)")
	l.String(&c.RPCAdvertise, "MANAGER_RPC_ADVERTISE", "", "host:port", optionalHostPort, "RPC address gates dial (default MANAGER_RPC_ADDR)")
	l.String(&c.GossipAddr, "MANAGER_GOSSIP_ADDR", "127.0.0.1:7200", "host:port", validHostPort, "memberlist bind address (TCP and UDP)")
	l.String(&c.GossipAdvertise, "MANAGER_GOSSIP_ADVERTISE", "", "host:port", optionalHostPort, "gossip address the others dial, resolved at start (default: MANAGER_GOSSIP_ADDR, or a private IP when that is 0.0.0.0)")
	l.List(&c.Join, "MANAGER_JOIN", "", "comma-separated host:port gossip seeds", validHostPort, "gossip addresses of nodes to join")
	l.String(&c.GossipKey, "MANAGER_GOSSIP_KEY", "", "base64 of a 16, 24 or 32-byte key", nil, "gossip encryption key; empty: plaintext")
	l.String(&c.GossipProfile, "MANAGER_GOSSIP_PROFILE", "lan", "lan or local", func(s string) error {
		if s != "lan" && s != "local" {
			return errors.New("unknown profile")
		}
		return nil
	}, "memberlist timing profile")
	l.Int(&c.BootstrapExpect, "MANAGER_BOOTSTRAP_EXPECT", 3, 1, 9, "how many managers must see each other before the Raft group is bootstrapped")
	l.Seconds(&c.DeadServerGrace, "MANAGER_DEAD_SERVER_GRACE_SECONDS", 30, 1, 86400, "how long a failed manager stays a voter before the leader removes it")
	l.Bool(&c.LeaveOnTerminate, "MANAGER_LEAVE_ON_TERMINATE", false, "on SIGTERM/SIGINT leave the Raft configuration for good (default: stop as a voter that will come back)")
	l.Duration(&c.HeartbeatTimeout, "MANAGER_RAFT_HEARTBEAT_TIMEOUT", 500*time.Millisecond, 50*time.Millisecond, time.Minute, "Raft heartbeat timeout")
	l.Duration(&c.ElectionTimeout, "MANAGER_RAFT_ELECTION_TIMEOUT", time.Second, 50*time.Millisecond, time.Minute, "Raft election timeout")
	l.Duration(&c.LeaderLeaseTimeout, "MANAGER_RAFT_LEADER_LEASE_TIMEOUT", 500*time.Millisecond, 25*time.Millisecond, time.Minute, "Raft leader lease timeout")
	l.Int(&c.SnapshotThreshold, "MANAGER_RAFT_SNAPSHOT_THRESHOLD", 16384, 16, 1<<30, "log entries between snapshots")
	l.Int(&c.TrailingLogs, "MANAGER_RAFT_TRAILING_LOGS", 10240, 0, 1<<30, "log entries kept after a snapshot")
	l.Int(&c.MaxAppendEntries, "MANAGER_RAFT_MAX_APPEND_ENTRIES", 512, 1, 1024, "log entries per AppendEntries RPC and per apply batch")
	l.Int(&c.MaxQueuedJobs, "MANAGER_MAX_QUEUED_JOBS", 1_000_000, 1, 1<<31-1, "jobs the datacenter holds before admission rejects with 429 (capacity)")
	l.Seconds(&c.JobRetention, "MANAGER_JOB_RETENTION_SECONDS", 86400, 1, 365*86400, "how long a job stays readable (at least IDEMPOTENCY_COMMITTED_TTL_SECONDS)")
	l.List(&c.AllowedJobTypes, "MANAGER_ALLOWED_JOB_TYPES", "", "comma-separated job types", nil, "if set, admission rejects other job types with 422")
	l.Int(&c.LedgerMaxEntries, "IDEMPOTENCY_LEDGER_MAX_ENTRIES", 1_000_000, 1, 1<<31-1, "live entries the ledger holds before it refuses new reservations")
	l.Seconds(&c.WatermarkTTL, "IDEMPOTENCY_WATERMARK_TTL_SECONDS", 86400, 1, 365*86400, "how long a client's sequence watermark is kept after its last update")
	l.Int(&c.WatermarkMaxClients, "IDEMPOTENCY_WATERMARK_MAX_CLIENTS", 100_000, 1, 1<<31-1,
		"the bound on per-client watermarks; when full, keys of new clients are refused (503), no watermark is evicted")
	l.Int(&c.WatermarkMaxClientsPerTenant, "IDEMPOTENCY_WATERMARK_MAX_CLIENTS_PER_TENANT", 25_000, 1, 1<<31-1,
		"the bound on one tenant's client watermarks; beyond it that tenant's new clients are refused (429)")
	l.Int64(&c.LedgerMaxBytes, "IDEMPOTENCY_LEDGER_MAX_BYTES", 1<<30, 1<<20, 1<<40,
		"bytes of entries and retained jobs (payloads included) the ledger holds before it refuses new reservations (503)")
	l.Int64(&c.LedgerTenantMaxBytes, "IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES", 256<<20, 1<<20, 1<<40,
		"one tenant's share of IDEMPOTENCY_LEDGER_MAX_BYTES; beyond it that tenant's new keys are refused (429)")
	l.Duration(&c.ApplyTimeout, "MANAGER_APPLY_TIMEOUT", 5*time.Second, 100*time.Millisecond, time.Minute, "bound on one Raft round of a submission")
	l.Duration(&c.OrphanGrace, "MANAGER_ORPHAN_GRACE", 5*time.Second, 100*time.Millisecond, time.Hour,
		"age after which the leader resolves a PENDING entry itself (its submitter timed out or failed); under IDEMPOTENCY_PENDING_TTL_SECONDS")
	l.Bool(&c.Failpoints, "MANAGER_FAILPOINTS", false, "enable the /debug/failpoints fault-injection endpoints (tests only)")
	l.Bool(&c.Pprof, "MANAGER_PPROF", false, "serve Go's /debug/pprof profiles on the RPC listener")
	l.String(&c.LogLevel, "MANAGER_LOG_LEVEL", "info", "debug, info, warn or error", func(s string) error { _, err := logging.ParseLevel(s); return err }, "log level")
	l.String(&c.LogFormat, "MANAGER_LOG_FORMAT", "text", "text or json", logging.ValidateFormat, "log format")
	config.RegisterIdempotency(l, &c.Idempotency)
}

// LoadConfig parses args and the environment into a validated Config.
func LoadConfig(args []string, lookup func(string) (string, bool), usage io.Writer) (Config, error) {
	var c Config
	l := config.NewLoader("manager", usage)
	register(l, &c)
	if err := l.Parse(args, lookup); err != nil {
		return c, err
	}
	c.setDefaults()
	return c, c.Validate()
}

// DefaultConfig returns the defaults (as with no flags and no environment).
func DefaultConfig() Config {
	c, err := LoadConfig(nil, nil, io.Discard)
	if err != nil {
		panic(err) // the defaults are valid by construction
	}
	return c
}

func (c *Config) setDefaults() {
	if c.DataDir == "" {
		c.DataDir = "data/" + c.NodeID
	}
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftAddr
	}
	if c.RPCAdvertise == "" {
		c.RPCAdvertise = c.RPCAddr
	}
}

// Validate checks cross-setting rules; errors name the variables.
func (c *Config) Validate() error {
	if c.JobRetention < c.Idempotency.CommittedTTL {
		return &config.Error{Env: "MANAGER_JOB_RETENTION_SECONDS", Flag: config.FlagName("MANAGER_JOB_RETENTION_SECONDS"),
			Value: fmt.Sprint(int(c.JobRetention / time.Second)),
			Want:  fmt.Sprintf("at least IDEMPOTENCY_COMMITTED_TTL_SECONDS (%d)", int(c.Idempotency.CommittedTTL/time.Second))}
	}
	if c.OrphanGrace >= c.Idempotency.PendingTTL {
		return &config.Error{Env: "MANAGER_ORPHAN_GRACE", Flag: config.FlagName("MANAGER_ORPHAN_GRACE"),
			Value: c.OrphanGrace.String(),
			Want:  fmt.Sprintf("less than IDEMPOTENCY_PENDING_TTL_SECONDS (%d)", int(c.Idempotency.PendingTTL/time.Second))}
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return &config.Error{Env: "MANAGER_RAFT_LEADER_LEASE_TIMEOUT", Flag: config.FlagName("MANAGER_RAFT_LEADER_LEASE_TIMEOUT"),
			Value: c.LeaderLeaseTimeout.String(), Want: "at most MANAGER_RAFT_HEARTBEAT_TIMEOUT (" + c.HeartbeatTimeout.String() + ")"}
	}
	for _, a := range []struct{ env, v string }{{"MANAGER_RAFT_ADVERTISE", c.RaftAdvertise}, {"MANAGER_RPC_ADVERTISE", c.RPCAdvertise}, {"MANAGER_GOSSIP_ADVERTISE", c.GossipAdvertise}} {
		host, _, _ := net.SplitHostPort(a.v)
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return &config.Error{Env: a.env, Flag: config.FlagName(a.env), Value: a.v, Want: "a routable address (not 0.0.0.0); set it when binding to all interfaces"}
		}
	}
	return nil
}
