package manager

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/tracing"
	"github.com/once-dev/once/pkg/api"
)

// Config is everything a manager is told at start. Settings come from flags and
// MANAGER_* / IDEMPOTENCY_* variables (docs/configuration.md lists them all):
// DefaultConfig holds every default, Register binds the fields to flags and
// variables (with the help text that says what each means), LoadConfig parses
// and validates. Adding a setting is a field, an Env constant, a default and
// one Register line.
type Config struct {
	NodeID      string // MANAGER_NODE_ID: unique, stable across restarts (the Raft server ID)
	Datacenter  string // MANAGER_DATACENTER
	DataDir     string // MANAGER_DATA_DIR: raft/wal, raft/stable.db, raft/snapshots, ledger/
	LedgerStore string // MANAGER_LEDGER_STORE: disk (DataDir/ledger, docs/ledger.md "State on disk") or memory
	// LedgerCacheBytes is MANAGER_LEDGER_CACHE_BYTES: the disk store's block cache.
	LedgerCacheBytes int64

	RaftAddr      string // MANAGER_RAFT_ADDR: Raft bind address
	RaftAdvertise string // MANAGER_RAFT_ADVERTISE: address peers dial (default: RaftAddr)
	RPCAddr       string // MANAGER_RPC_ADDR: the gates' RPC listener (also /metrics)
	RPCAdvertise  string // MANAGER_RPC_ADVERTISE: address gates dial (default: RPCAddr)

	GossipAddr      string   // MANAGER_GOSSIP_ADDR: memberlist bind address
	GossipAdvertise string   // MANAGER_GOSSIP_ADVERTISE: gossip address the others dial (default: derived from GossipAddr)
	Join            []string // MANAGER_JOIN: gossip seeds
	GossipKey       string   // MANAGER_GOSSIP_KEY: base64 16/24/32-byte key, empty = no encryption
	GossipProfile   string   // MANAGER_GOSSIP_PROFILE: lan | local
	// The federation's WAN pool (docs/multidc.md): empty WANGossipAddr, a
	// single-datacenter manager.
	WANGossipAddr      string        // MANAGER_WAN_GOSSIP_ADDR: WAN memberlist bind address
	WANGossipAdvertise string        // MANAGER_WAN_GOSSIP_ADVERTISE: WAN gossip address the others dial
	WANJoin            []string      // MANAGER_WAN_JOIN: WAN gossip seeds (managers of any datacenter)
	WANGossipKey       string        // MANAGER_WAN_GOSSIP_KEY: base64 16/24/32-byte keys, empty = no encryption
	BootstrapExpect    int           // MANAGER_BOOTSTRAP_EXPECT
	DeadServerGrace    time.Duration // MANAGER_DEAD_SERVER_GRACE_SECONDS
	LeaveOnTerminate   bool          // MANAGER_LEAVE_ON_TERMINATE: on SIGTERM/SIGINT, leave the Raft configuration for good

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

	// The worker lifecycle (jobs.go, docs/ledger.md "Job lifecycle").
	QueueJobs       bool          // MANAGER_JOB_QUEUE: committed jobs are queued for workers
	JobMaxAttempts  int           // MANAGER_JOB_MAX_ATTEMPTS
	JobBackoffMin   time.Duration // MANAGER_JOB_BACKOFF_MIN: the retry delay doubles from min up to max (backoff)
	JobBackoffMax   time.Duration // MANAGER_JOB_BACKOFF_MAX
	JobLeaseDefault time.Duration // MANAGER_JOB_LEASE_DEFAULT: a lease's duration when the worker names none
	JobLeaseMin     time.Duration // MANAGER_JOB_LEASE_MIN: the bounds of one it names
	JobLeaseMax     time.Duration // MANAGER_JOB_LEASE_MAX
	MaxClockOffset  time.Duration // MANAGER_MAX_CLOCK_OFFSET: beyond it from the group's clock, stamp with the group's

	Pprof        bool   // MANAGER_PPROF: serve /debug/pprof on the RPC listener
	OTLPEndpoint string // MANAGER_OTLP_ENDPOINT: where traces go (OTLP over HTTP); empty: no tracing
	// Credentials (docs/security.md).
	ClusterSecretFile  string // MANAGER_CLUSTER_SECRET_FILE: the secret every RPC caller presents; empty: none
	OperatorSecretFile string // MANAGER_OPERATOR_SECRET_FILE: the Operator service's secret ("Operator role")
	// TLSCAFile, TLSCertFile and TLSKeyFile are MANAGER_TLS_*: the cluster CA
	// and this manager's certificate: RPC and Raft over mutual TLS; all
	// three or none.
	TLSCAFile, TLSCertFile, TLSKeyFile string
	// Insecure is MANAGER_INSECURE: start without any credential; without it
	// a manager refuses to start so (CheckSecurity).
	Insecure  bool
	LogLevel  string // MANAGER_LOG_LEVEL
	LogFormat string // MANAGER_LOG_FORMAT

	Idempotency config.Idempotency

	// Ledger bounds (docs/ledger.md).
	BatchMaxItems                int   // MANAGER_BATCH_MAX_ITEMS: one batch entry's commands (batch.go); 0: the default
	BatchMaxBytes                int   // MANAGER_BATCH_MAX_BYTES: one batch entry's bytes; 0: the default
	WatermarkMaxClientsPerTenant int   // IDEMPOTENCY_WATERMARK_MAX_CLIENTS_PER_TENANT
	LedgerMaxBytes               int64 // IDEMPOTENCY_LEDGER_MAX_BYTES: entries and retained jobs, payloads included
	LedgerTenantMaxBytes         int64 // IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES: one tenant's share
	OutboxMaxEntries             int   // MANAGER_OUTBOX_MAX_ENTRIES: submissions the outbox carries before refusing (503 outbox_full)
}

// Names of the manager's environment variables. Each has a flag derived from
// it (config.FlagName): MANAGER_NODE_ID is -manager-node-id. A flag wins over
// its variable. The seven shared IDEMPOTENCY_* variables are registered by
// config.RegisterIdempotency.
const (
	EnvNodeID                       = "MANAGER_NODE_ID"
	EnvDatacenter                   = "MANAGER_DATACENTER"
	EnvDataDir                      = "MANAGER_DATA_DIR"
	EnvLedgerStore                  = "MANAGER_LEDGER_STORE"
	EnvLedgerCacheBytes             = "MANAGER_LEDGER_CACHE_BYTES"
	EnvRaftAddr                     = "MANAGER_RAFT_ADDR"
	EnvRaftAdvertise                = "MANAGER_RAFT_ADVERTISE"
	EnvRPCAddr                      = "MANAGER_RPC_ADDR"
	EnvRPCAdvertise                 = "MANAGER_RPC_ADVERTISE"
	EnvGossipAddr                   = "MANAGER_GOSSIP_ADDR"
	EnvGossipAdvertise              = "MANAGER_GOSSIP_ADVERTISE"
	EnvJoin                         = "MANAGER_JOIN"
	EnvGossipKey                    = "MANAGER_GOSSIP_KEY"
	EnvGossipProfile                = "MANAGER_GOSSIP_PROFILE"
	EnvWANGossipAddr                = "MANAGER_WAN_GOSSIP_ADDR"
	EnvWANGossipAdvertise           = "MANAGER_WAN_GOSSIP_ADVERTISE"
	EnvWANJoin                      = "MANAGER_WAN_JOIN"
	EnvWANGossipKey                 = "MANAGER_WAN_GOSSIP_KEY"
	EnvBootstrapExpect              = "MANAGER_BOOTSTRAP_EXPECT"
	EnvDeadServerGrace              = "MANAGER_DEAD_SERVER_GRACE_SECONDS"
	EnvLeaveOnTerminate             = "MANAGER_LEAVE_ON_TERMINATE"
	EnvHeartbeatTimeout             = "MANAGER_RAFT_HEARTBEAT_TIMEOUT"
	EnvElectionTimeout              = "MANAGER_RAFT_ELECTION_TIMEOUT"
	EnvLeaderLeaseTimeout           = "MANAGER_RAFT_LEADER_LEASE_TIMEOUT"
	EnvSnapshotThreshold            = "MANAGER_RAFT_SNAPSHOT_THRESHOLD"
	EnvTrailingLogs                 = "MANAGER_RAFT_TRAILING_LOGS"
	EnvMaxAppendEntries             = "MANAGER_RAFT_MAX_APPEND_ENTRIES"
	EnvMaxQueuedJobs                = "MANAGER_MAX_QUEUED_JOBS"
	EnvJobRetention                 = "MANAGER_JOB_RETENTION_SECONDS"
	EnvAllowedJobTypes              = "MANAGER_ALLOWED_JOB_TYPES"
	EnvLedgerMaxEntries             = config.EnvLedgerMaxEntries
	EnvWatermarkTTL                 = config.EnvWatermarkTTL
	EnvWatermarkMaxClients          = config.EnvWatermarkMaxClients
	EnvApplyTimeout                 = "MANAGER_APPLY_TIMEOUT"
	EnvQueueJobs                    = "MANAGER_JOB_QUEUE"
	EnvJobMaxAttempts               = "MANAGER_JOB_MAX_ATTEMPTS"
	EnvJobBackoffMin                = "MANAGER_JOB_BACKOFF_MIN"
	EnvJobBackoffMax                = "MANAGER_JOB_BACKOFF_MAX"
	EnvJobLeaseDefault              = "MANAGER_JOB_LEASE_DEFAULT"
	EnvJobLeaseMin                  = "MANAGER_JOB_LEASE_MIN"
	EnvJobLeaseMax                  = "MANAGER_JOB_LEASE_MAX"
	EnvMaxClockOffset               = "MANAGER_MAX_CLOCK_OFFSET"
	EnvLedgerMaxBytes               = config.EnvLedgerMaxBytes
	EnvLedgerTenantMaxBytes         = config.EnvLedgerTenantMaxBytes
	EnvWatermarkMaxClientsPerTenant = config.EnvWatermarkMaxClientsPerTenant
	EnvBatchMaxItems                = "MANAGER_BATCH_MAX_ITEMS"
	EnvOutboxMaxEntries             = "MANAGER_OUTBOX_MAX_ENTRIES"
	EnvBatchMaxBytes                = "MANAGER_BATCH_MAX_BYTES"
	EnvPprof                        = "MANAGER_PPROF"
	EnvClusterSecretFile            = "MANAGER_CLUSTER_SECRET_FILE"
	EnvOperatorSecretFile           = "MANAGER_OPERATOR_SECRET_FILE"
	EnvOTLPEndpoint                 = "MANAGER_OTLP_ENDPOINT"
	EnvTLSCAFile                    = "MANAGER_TLS_CA_FILE"
	EnvTLSCertFile                  = "MANAGER_TLS_CERT_FILE"
	EnvTLSKeyFile                   = "MANAGER_TLS_KEY_FILE"
	EnvInsecure                     = "MANAGER_INSECURE"
	EnvLogLevel                     = "MANAGER_LOG_LEVEL"
	EnvLogFormat                    = "MANAGER_LOG_FORMAT"
)

// DefaultConfig returns the defaults of every setting, with the derived ones
// (DataDir, RaftAdvertise, RPCAdvertise, the ledger's byte budgets) filled as
// withDefaults does.
func DefaultConfig() Config { return defaults().withDefaults() }

// defaults returns the defaults with the derived settings empty: LoadConfig
// derives them from what was given.
func defaults() Config {
	host, _ := os.Hostname()
	if config.Name(host) != nil {
		host = "manager1"
	}
	return Config{
		NodeID:                       host,
		Datacenter:                   "dc1",
		RaftAddr:                     "127.0.0.1:7000",
		RPCAddr:                      "127.0.0.1:7100",
		GossipAddr:                   "127.0.0.1:7200",
		GossipProfile:                membership.ProfileLAN,
		BootstrapExpect:              3,
		DeadServerGrace:              30 * time.Second,
		HeartbeatTimeout:             500 * time.Millisecond,
		ElectionTimeout:              time.Second,
		LeaderLeaseTimeout:           500 * time.Millisecond,
		SnapshotThreshold:            16384,
		LedgerStore:                  "disk",
		LedgerCacheBytes:             256 << 20,
		TrailingLogs:                 10240,
		MaxAppendEntries:             512,
		MaxQueuedJobs:                1_000_000,
		JobRetention:                 86400 * time.Second,
		LedgerMaxEntries:             1_000_000,
		WatermarkTTL:                 86400 * time.Second,
		WatermarkMaxClients:          100_000,
		ApplyTimeout:                 5 * time.Second,
		QueueJobs:                    true,
		JobMaxAttempts:               10,
		JobBackoffMin:                time.Second,
		JobBackoffMax:                5 * time.Minute,
		JobLeaseDefault:              30 * time.Second,
		JobLeaseMin:                  time.Second,
		JobLeaseMax:                  time.Hour,
		MaxClockOffset:               500 * time.Millisecond,
		WatermarkMaxClientsPerTenant: 25_000,
		BatchMaxItems:                DefaultBatchMaxItems,
		OutboxMaxEntries:             DefaultOutboxMaxEntries,
		BatchMaxBytes:                DefaultBatchMaxBytes,
		LogLevel:                     "info",
		LogFormat:                    logging.FormatText,
		Idempotency:                  config.DefaultIdempotency(),
	}
}

// Register binds c's fields to flags and environment variables on l, with their
// accepted ranges. The values c holds are the defaults; Register does not
// change them. LoadConfig registers on the defaults with the derived settings
// (MANAGER_DATA_DIR, the *_ADVERTISE addresses, the ledger's byte budgets)
// empty, and derives them after parsing (withDefaults).
func Register(l *config.Loader, c *Config) {
	l.String(&c.NodeID, EnvNodeID, config.WantName, config.Name,
		"this manager's unique, stable ID (its Raft server ID)")
	l.String(&c.Datacenter, EnvDatacenter, config.WantName, config.Name,
		"the datacenter this manager's Raft group serves")
	l.String(&c.DataDir, EnvDataDir, "a directory path", nil,
		"where the Raft log, stable store, snapshots and ledger live (default ./data/<node-id>)")
	l.String(&c.LedgerStore, EnvLedgerStore, "disk or memory", config.OneOf("disk", "memory"),
		"where the ledger keeps its tables: disk (DATA_DIR/ledger, memory for caches only; a restart goes on from it) or memory (rebuilt from the newest snapshot at every start)")
	l.Int64(&c.LedgerCacheBytes, EnvLedgerCacheBytes, 1<<20, 1<<40,
		"bytes of the disk ledger's block cache")
	l.String(&c.RaftAddr, EnvRaftAddr, config.WantListenAddr, config.ListenAddr, "Raft bind address")
	l.String(&c.RaftAdvertise, EnvRaftAdvertise, config.WantAdvertise, config.Advertise, "Raft address peers dial (default MANAGER_RAFT_ADDR)")
	l.String(&c.RPCAddr, EnvRPCAddr, config.WantListenAddr, config.ListenAddr, "RPC listener for gates (also serves /metrics)")
	l.String(&c.RPCAdvertise, EnvRPCAdvertise, config.WantAdvertise, config.Advertise, "RPC address gates dial (default MANAGER_RPC_ADDR)")
	l.String(&c.GossipAddr, EnvGossipAddr, config.WantListenAddr, config.ListenAddr, "memberlist bind address (TCP and UDP)")
	l.String(&c.GossipAdvertise, EnvGossipAdvertise, config.WantAdvertise, config.Advertise, "gossip address the others dial, resolved at start (default: MANAGER_GOSSIP_ADDR, or a private IP when that is 0.0.0.0)")
	l.List(&c.Join, EnvJoin, "comma-separated host:port gossip seeds", config.HostPort, "gossip addresses of nodes to join")
	l.Secret(&c.GossipKey, EnvGossipKey, "base64 of a 16, 24 or 32-byte key", membership.CheckSecretKeys, "gossip encryption key; unset: derived from the cluster secret")
	l.String(&c.GossipProfile, EnvGossipProfile, "lan or local", config.OneOf(membership.ProfileLAN, membership.ProfileLocal), "memberlist timing profile")
	l.String(&c.WANGossipAddr, EnvWANGossipAddr, config.WantListenAddr, func(v string) error {
		if v == "" {
			return nil
		}
		return config.ListenAddr(v)
	}, "WAN memberlist bind address, joining the federation of datacenters (default: none, a single-datacenter manager)")
	l.String(&c.WANGossipAdvertise, EnvWANGossipAdvertise, config.WantAdvertise, config.Advertise, "WAN gossip address the others dial, resolved at start (default: MANAGER_WAN_GOSSIP_ADDR)")
	l.List(&c.WANJoin, EnvWANJoin, "comma-separated host:port gossip seeds", config.HostPort, "WAN gossip addresses of managers (of any datacenter) to join")
	l.Secret(&c.WANGossipKey, EnvWANGossipKey, "base64 of 16, 24 or 32-byte keys, comma-separated", membership.CheckSecretKeys, "WAN gossip encryption keys (the first encrypts); unset: derived from the cluster secret")
	l.Int(&c.BootstrapExpect, EnvBootstrapExpect, 1, 9, "how many managers must see each other before the Raft group is bootstrapped")
	l.Seconds(&c.DeadServerGrace, EnvDeadServerGrace, time.Second, 86400*time.Second, "how long a failed manager stays a voter before the leader removes it")
	l.Bool(&c.LeaveOnTerminate, EnvLeaveOnTerminate, "on SIGTERM/SIGINT leave the Raft configuration for good (default: stop as a voter that will come back)")
	l.Duration(&c.HeartbeatTimeout, EnvHeartbeatTimeout, 50*time.Millisecond, time.Minute, "Raft heartbeat timeout")
	l.Duration(&c.ElectionTimeout, EnvElectionTimeout, 50*time.Millisecond, time.Minute, "Raft election timeout")
	l.Duration(&c.LeaderLeaseTimeout, EnvLeaderLeaseTimeout, 25*time.Millisecond, time.Minute, "Raft leader lease timeout")
	l.Int(&c.SnapshotThreshold, EnvSnapshotThreshold, 16, 1<<30, "log entries between snapshots")
	l.Int(&c.TrailingLogs, EnvTrailingLogs, 0, 1<<30, "log entries kept after a snapshot")
	l.Int(&c.MaxAppendEntries, EnvMaxAppendEntries, 1, 1024, "log entries per AppendEntries RPC and per apply batch")
	l.Int(&c.MaxQueuedJobs, EnvMaxQueuedJobs, 1, 1<<31-1, "jobs the datacenter holds before admission rejects with 429 (capacity)")
	l.Seconds(&c.JobRetention, EnvJobRetention, time.Second, 365*86400*time.Second, "how long a job stays readable (at least IDEMPOTENCY_COMMITTED_TTL_SECONDS)")
	l.List(&c.AllowedJobTypes, EnvAllowedJobTypes, wantJobTypes, jobType, "if set, admission rejects other job types with 422")
	l.Int(&c.LedgerMaxEntries, EnvLedgerMaxEntries, 1, 1<<31-1, "live entries the ledger holds before it refuses new reservations")
	l.Seconds(&c.WatermarkTTL, EnvWatermarkTTL, time.Second, 365*86400*time.Second, "how long a client's sequence watermark is kept after its last update")
	l.Int(&c.WatermarkMaxClients, EnvWatermarkMaxClients, 1, 1<<31-1, "the bound on per-client watermarks; when full, keys of new clients are refused (503), no watermark is evicted")
	l.Duration(&c.ApplyTimeout, EnvApplyTimeout, 100*time.Millisecond, time.Minute, "bound on one Raft round of a submission")
	l.Bool(&c.QueueJobs, EnvQueueJobs, "queue committed jobs for workers (POST /v1/leases); false keeps them outside the lifecycle, expiring after MANAGER_JOB_RETENTION_SECONDS")
	l.Int(&c.JobMaxAttempts, EnvJobMaxAttempts, 1, 1000, "leases a job gets: a failed attempt or an expired lease after the last makes it dead")
	l.Duration(&c.JobBackoffMin, EnvJobBackoffMin, 0, 24*time.Hour, "the retry delay after a job's first failed attempt (then doubled per attempt up to MANAGER_JOB_BACKOFF_MAX, with jitter)")
	l.Duration(&c.JobBackoffMax, EnvJobBackoffMax, 0, 7*24*time.Hour, "the longest retry delay after a failed attempt (at least MANAGER_JOB_BACKOFF_MIN)")
	l.Duration(&c.JobLeaseDefault, EnvJobLeaseDefault, 100*time.Millisecond, 24*time.Hour, "a job lease's duration when the worker names none (within MANAGER_JOB_LEASE_MIN..MAX)")
	l.Duration(&c.JobLeaseMin, EnvJobLeaseMin, 100*time.Millisecond, 24*time.Hour, "the shortest lease (or heartbeat extension) a worker may ask for")
	l.Duration(&c.JobLeaseMax, EnvJobLeaseMax, 100*time.Millisecond, 24*time.Hour, "the longest lease (or heartbeat extension) a worker may ask for")
	l.Bool(&c.Pprof, EnvPprof, "serve Go's /debug/pprof profiles on the RPC listener")
	l.String(&c.TLSCAFile, EnvTLSCAFile, "a path to a PEM certificate", nil,
		"the cluster CA: serve RPC and Raft over mutual TLS, accepting only callers whose certificate it signed (with MANAGER_TLS_CERT_FILE and _KEY_FILE); reloaded when the file changes")
	l.String(&c.TLSCertFile, EnvTLSCertFile, "a path to a PEM certificate (chain)", nil,
		"this manager's certificate, signed by the cluster CA for the name manager.once, for server and client use")
	l.String(&c.TLSKeyFile, EnvTLSKeyFile, "a path to a PEM private key", nil,
		"the private key of MANAGER_TLS_CERT_FILE")
	l.Bool(&c.Insecure, EnvInsecure,
		"start without a cluster credential: RPC, Raft and gossip unauthenticated and unencrypted (development only); refused together with a credential or a gossip key")
	l.String(&c.OTLPEndpoint, EnvOTLPEndpoint, "an http:// or https:// URL", tracing.CheckEndpoint,
		"send OpenTelemetry traces of submissions there (OTLP over HTTP, e.g. http://otel-collector:4318); empty: no tracing")
	l.String(&c.ClusterSecretFile, EnvClusterSecretFile, "a path to a file holding the cluster secret", nil,
		"the cluster secret: RPC and Raft over mutual TLS with a CA derived from it (unless MANAGER_TLS_* is set), the gossip keys derived from it (unless set), and presented by every caller of the RPC listener (gates, other datacenters' managers, oncectl)")
	l.String(&c.OperatorSecretFile, EnvOperatorSecretFile, "a path to a file holding the operator secret", nil,
		"the secret oncectl presents (gRPC metadata once-operator-secret) for the Operator service: snapshot save and restore, Raft peers, leadership transfer, gossip keyring, pool members; empty: only a client certificate with the URI SAN spiffe://once/role/operator from MANAGER_TLS_* opens it (never one of the CA derived from the cluster secret)")
	l.String(&c.LogLevel, EnvLogLevel, config.WantLogLevel, config.LogLevel, "the lowest level logged")
	l.String(&c.LogFormat, EnvLogFormat, config.WantLogFormat, config.LogFormat, "the log line format")
	l.Duration(&c.MaxClockOffset, EnvMaxClockOffset, 10*time.Millisecond, time.Hour, "how far this manager's clock may disagree with its group's (the median of the voters') before it stamps ledger time with the group's clock and, as leader, hands leadership over")
	l.Int(&c.WatermarkMaxClientsPerTenant, EnvWatermarkMaxClientsPerTenant, 1, 1<<31-1,
		"the bound on one tenant's client watermarks; beyond it that tenant's new clients are refused (429)")
	l.Int64(&c.LedgerMaxBytes, EnvLedgerMaxBytes, 1<<20, 1<<40,
		"bytes of entries and retained jobs (payloads included) the ledger holds before it refuses new reservations (503); unset: 256 GiB with MANAGER_LEDGER_STORE=disk, 1 GiB with memory")
	l.Int64(&c.LedgerTenantMaxBytes, EnvLedgerTenantMaxBytes, 1<<20, 1<<40,
		"one tenant's share of IDEMPOTENCY_LEDGER_MAX_BYTES; beyond it that tenant's new keys are refused (429); unset: 64 GiB with MANAGER_LEDGER_STORE=disk, 256 MiB with memory")
	l.Int(&c.OutboxMaxEntries, EnvOutboxMaxEntries, 1, 1<<31-1,
		"multi-datacenter submissions the outbox carries (not yet confirmed by every datacenter they name, live or expired) before new ones are refused (503 outbox_full)")
	l.Int(&c.BatchMaxItems, EnvBatchMaxItems, 1, 4096,
		"submissions (Admits) one Raft log entry carries at most; 1 proposes every command alone")
	l.Int(&c.BatchMaxBytes, EnvBatchMaxBytes, 4<<10, 64<<20,
		"bytes of commands one batch entry carries at most (a larger command goes alone)")
	config.RegisterIdempotency(l, &c.Idempotency)
}

// LoadConfig parses args (flags) and then the environment (lookup, for every
// flag not given) into a validated Config. -h prints the settings to usage
// and returns config.ErrHelp. Errors are *config.Error values naming the
// variable and its flag; they match config.ErrInvalid.
func LoadConfig(args []string, lookup func(string) (string, bool), usage io.Writer) (Config, error) {
	c := defaults()
	l := config.NewLoader("manager", usage)
	Register(l, &c)
	if err := l.Parse(args, lookup); err != nil {
		return c, err
	}
	c = c.withDefaults()
	return c, c.Validate()
}

// UnknownVariables returns the MANAGER_* and IDEMPOTENCY_* variables of
// environ that neither daemon reads (config.Loader.Unknown): the daemon logs
// a warning for each, with the setting it probably misspells.
func UnknownVariables(environ []string) []config.Unknown {
	c := defaults()
	l := config.NewLoader("manager", io.Discard)
	Register(l, &c)
	return l.Unknown(environ, []string{"MANAGER_", "IDEMPOTENCY_"}, config.IdempotencyVariables)
}

// withDefaults fills the settings derived from others when they were not
// given: DataDir from NodeID, the advertised addresses from the bind ones,
// the ledger's byte budgets from its store.
func (c Config) withDefaults() Config {
	c.DataDir = cmp.Or(c.DataDir, "data/"+c.NodeID)
	c.RaftAdvertise = cmp.Or(c.RaftAdvertise, c.RaftAddr)
	c.RPCAdvertise = cmp.Or(c.RPCAdvertise, c.RPCAddr)
	total, tenant := DefaultLedgerBudgets(c.LedgerStore)
	if c.LedgerMaxBytes <= 0 {
		c.LedgerMaxBytes = total
	}
	if c.LedgerTenantMaxBytes <= 0 {
		c.LedgerTenantMaxBytes = tenant
	}
	return c
}

// DefaultLedgerBudgets are the defaults of IDEMPOTENCY_LEDGER_MAX_BYTES and
// IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES for a ledger store
// (MANAGER_LEDGER_STORE; docs/configuration.md). On disk they hold a day
// (MANAGER_JOB_RETENTION_SECONDS' default) of 1,000 jobs/s of one tenant:
// 86.4 million jobs in 64 GiB, ~795 bytes each, the job's 384 bytes of
// overhead and ~400 bytes of payload and result; four such tenants fill the
// whole. In memory the ledger shares the manager's RAM and the snapshot is
// rebuilt from it: the small budgets of a 2-4 GiB manager.
func DefaultLedgerBudgets(store string) (total, tenant int64) {
	if store == "memory" {
		return 1 << 30, 256 << 20
	}
	return 256 << 30, 64 << 30
}

// DefaultOutboxMaxEntries is MANAGER_OUTBOX_MAX_ENTRIES' default: 100 s of
// 1,000 multi-datacenter submissions/s while another datacenter is
// unreachable (or 28 h of 1/s); the expired ones among them are held in
// every manager's memory (docs/multidc.md, "The outbox").
const DefaultOutboxMaxEntries = 100_000

// The defaults of MANAGER_BATCH_MAX_ITEMS and MANAGER_BATCH_MAX_BYTES.
const (
	DefaultBatchMaxItems = 256
	DefaultBatchMaxBytes = 1 << 20
)

// tlsFiles is the MANAGER_TLS_* trio.
func (c *Config) tlsFiles() config.TLSFiles {
	return config.TLSFiles{EnvCA: EnvTLSCAFile, CA: c.TLSCAFile, EnvCert: EnvTLSCertFile, Cert: c.TLSCertFile,
		EnvKey: EnvTLSKeyFile, Key: c.TLSKeyFile}
}

// LoadClusterTLS loads MANAGER_TLS_* (nil when unset); an error is a
// *config.Error naming MANAGER_TLS_CA_FILE.
func LoadClusterTLS(cfg Config, log *slog.Logger) (*certs.Cluster, error) {
	return certs.LoadCluster(cfg.tlsFiles(), log)
}

// CheckSecurity applies config.CheckSecurity to the manager's settings: a
// manager starts with MANAGER_TLS_* or MANAGER_CLUSTER_SECRET_FILE, or with
// MANAGER_INSECURE=true alone.
func (c *Config) CheckSecurity() (config.Mode, error) {
	gossip := []config.GossipPool{{EnvKey: EnvGossipKey, Key: c.GossipKey}}
	if c.WANGossipAddr != "" {
		gossip = append(gossip, config.GossipPool{EnvKey: EnvWANGossipKey, Key: c.WANGossipKey})
	}
	return config.CheckSecurity(config.Security{EnvInsecure: EnvInsecure, Insecure: c.Insecure, TLS: c.tlsFiles(),
		EnvSecret: EnvClusterSecretFile, SecretFile: c.ClusterSecretFile,
		EnvOperatorSecret: EnvOperatorSecretFile, OperatorSecretFile: c.OperatorSecretFile, Gossip: gossip})
}

// Validate checks c as LoadConfig does: every setting against the range or
// form Register declares for it, then the rules that involve more than one
// setting. Errors are *config.Error values naming the variable and its flag;
// they match config.ErrInvalid and the cause.
func (c *Config) Validate() error {
	l := config.NewLoader("manager", io.Discard)
	Register(l, c)
	if err := l.Check(); err != nil {
		return err
	}
	if err := c.tlsFiles().Check(); err != nil {
		return err
	}
	if c.JobRetention < c.Idempotency.CommittedTTL {
		return atLeast(EnvJobRetention, config.FormatSeconds(c.JobRetention),
			config.EnvCommittedTTL, config.FormatSeconds(c.Idempotency.CommittedTTL))
	}
	if c.JobBackoffMax < c.JobBackoffMin {
		return atLeast(EnvJobBackoffMax, c.JobBackoffMax.String(), EnvJobBackoffMin, c.JobBackoffMin.String())
	}
	if c.JobLeaseMax < c.JobLeaseMin {
		return atLeast(EnvJobLeaseMax, c.JobLeaseMax.String(), EnvJobLeaseMin, c.JobLeaseMin.String())
	}
	if c.JobLeaseDefault < c.JobLeaseMin || c.JobLeaseDefault > c.JobLeaseMax {
		return config.Invalid(EnvJobLeaseDefault, c.JobLeaseDefault.String(),
			"within MANAGER_JOB_LEASE_MIN..MAX ("+c.JobLeaseMin.String()+".."+c.JobLeaseMax.String()+")", config.ErrOutOfRange)
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return config.Invalid(EnvLeaderLeaseTimeout, c.LeaderLeaseTimeout.String(),
			"at most MANAGER_RAFT_HEARTBEAT_TIMEOUT ("+c.HeartbeatTimeout.String()+")", config.ErrOutOfRange)
	}
	// Raft's own rule (raft.ValidateConfig), checked here so that the
	// refusal names the variable and exits 2 rather than failing New.
	if c.ElectionTimeout < c.HeartbeatTimeout {
		return atLeast(EnvElectionTimeout, c.ElectionTimeout.String(), EnvHeartbeatTimeout, c.HeartbeatTimeout.String())
	}
	if err := c.checkPorts(); err != nil {
		return err
	}
	if c.WANGossipAddr == "" && (len(c.WANJoin) > 0 || c.WANGossipAdvertise != "" || c.WANGossipKey != "") {
		return config.Invalid(EnvWANGossipAddr, "", "a listen address host:port whenever "+EnvWANJoin+", "+EnvWANGossipAdvertise+" or "+EnvWANGossipKey+" is set", config.ErrOutOfRange)
	}
	return nil
}

// checkPorts refuses two of the manager's listeners on one port
// (config.SamePort): the second would fail to bind at start with "address
// already in use", as if another process held it.
func (c *Config) checkPorts() error {
	addrs := [][2]string{{EnvRaftAddr, c.RaftAddr}, {EnvRPCAddr, c.RPCAddr}, {EnvGossipAddr, c.GossipAddr}, {EnvWANGossipAddr, c.WANGossipAddr}}
	for i, b := range addrs {
		for _, a := range addrs[:i] {
			if config.SamePort(a[1], b[1]) {
				return config.Invalid(b[0], b[1], "a port other than "+a[0]+"'s ("+a[1]+")", config.ErrOutOfRange)
			}
		}
	}
	return nil
}

// wantJobTypes is MANAGER_ALLOWED_JOB_TYPES' form: job types as a
// submission's "type" has them (docs/api.md).
var wantJobTypes = fmt.Sprintf("comma-separated job types, each 1 to %d characters of A-Z a-z 0-9 . _ -", api.MaxTypeLen)

// jobType accepts a job type a submission may have: an allowed type no job
// can have would leave every job of the type meant refused 422.
func jobType(s string) error {
	if !api.ValidName(s, api.MaxTypeLen) {
		return fmt.Errorf("%w: %q is not a job type", config.ErrSyntax, s)
	}
	return nil
}

// atLeast is the error of env's value, which must be at least minEnv's
// (minValue).
func atLeast(env, value, minEnv, minValue string) error {
	return config.Invalid(env, value, "at least "+minEnv+" ("+minValue+")", config.ErrOutOfRange)
}
