package api

import "time"

// Cluster is the body of GET /v1/cluster (operators only; docs/api.md,
// "Operations"): the answering gate's datacenter as its managers report it,
// the gates it knows, and the federation's datacenters with their leaders'
// status.
type Cluster struct {
	// Datacenter is the answering gate's datacenter, Gate its name.
	Datacenter string `json:"datacenter"`
	Gate       string `json:"gate"`
	// Leader is the datacenter leader's status; nil (null) when none
	// answered within the gate's forward timeout.
	Leader *ManagerStatus `json:"leader"`
	// Managers are the managers the gate resolves, each with its own status
	// or the error of asking it.
	Managers []ClusterManager `json:"managers"`
	// Gates are the gates of the datacenter's gossip pool (the answering
	// gate alone when it does not gossip).
	Gates []ClusterGate `json:"gates"`
	// Datacenters are the federation's datacenters, the gate's own
	// included, by name.
	Datacenters []ClusterDatacenter `json:"datacenters"`
}

// ClusterManager is one manager of Cluster.Managers: Status, or the Error
// of asking it.
type ClusterManager struct {
	Addr   string         `json:"addr"`
	Status *ManagerStatus `json:"status,omitempty"`
	Error  string         `json:"error,omitempty"`
}

// ClusterGate is one gate of Cluster.Gates; State is its gossip state
// (alive, suspect, dead, left).
type ClusterGate struct {
	Name       string `json:"name"`
	Datacenter string `json:"datacenter,omitempty"`
	Addr       string `json:"addr,omitempty"`
	State      string `json:"state,omitempty"`
}

// ClusterDatacenter is one datacenter of Cluster.Datacenters: its managers'
// RPC addresses, and its leader's status or the error of asking for it.
type ClusterDatacenter struct {
	Name     string         `json:"name"`
	Managers []string       `json:"managers"`
	Leader   *ManagerStatus `json:"leader,omitempty"`
	Error    string         `json:"error,omitempty"`
}

// ManagerStatus is a manager's status as GET /v1/cluster shows it: its Raft
// state, its ledger, its clock and, on the leader, the autopilot's view of
// the datacenter's managers. Members may be added.
type ManagerStatus struct {
	NodeID       string `json:"node_id"`
	Datacenter   string `json:"datacenter"`
	RaftState    string `json:"raft_state"`
	IsLeader     bool   `json:"is_leader"`
	LeaderID     string `json:"leader_id,omitempty"`
	LeaderRPC    string `json:"leader_rpc,omitempty"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	LastIndex    uint64 `json:"last_index"`
	// Voters are the server IDs of the Raft configuration's voters, as the
	// manager knows it.
	Voters []string `json:"voters"`
	// LogBatches counts the Raft log writes (one fsync each) since start.
	LogBatches uint64 `json:"log_batches"`
	// LedgerEntries and Jobs count the ledger's live entries and jobs.
	LedgerEntries int `json:"ledger_entries"`
	Jobs          int `json:"jobs"`
	// ClockOffsets are the measured clock offsets of the other voters
	// (their clock minus this manager's, in seconds), by node ID.
	ClockOffsets map[string]float64 `json:"clock_offsets_seconds,omitempty"`
	// ClockGroupOffset is the manager's clock minus its group's (the median
	// of the voters'), in seconds; nil until measured on a majority.
	ClockGroupOffset *float64 `json:"clock_group_offset_seconds,omitempty"`
	// ClockClamped: the manager's clock disagrees with its group's by more
	// than MANAGER_MAX_CLOCK_OFFSET, so it stamps with the group's clock.
	ClockClamped bool `json:"clock_clamped,omitempty"`
	// LedgerTime is the highest time stamped into an applied command
	// (RFC 3339; empty while the ledger is empty).
	LedgerTime string `json:"ledger_time,omitempty"`
	// Autopilot is the leader's raft-autopilot view; nil on followers.
	Autopilot *AutopilotHealth `json:"autopilot,omitempty"`
	// RefusedServers are the gossip pool members whose identity claims the
	// leader refuses to act on (docs/operations.md, "Identity").
	RefusedServers []RefusedServer `json:"refused_servers,omitempty"`
	// ConfigMismatches are the settings that must agree across the
	// federation where another manager's differ from this one's.
	ConfigMismatches []ConfigMismatch `json:"config_mismatches"`
	// Queues counts the datacenter's jobs by lifecycle state, every tenant;
	// nil from managers that predate it.
	Queues *QueueCounts `json:"queues,omitempty"`
	// Budgets are the ledger's bounds and their use; nil from managers that
	// predate them.
	Budgets *Budgets `json:"budgets,omitempty"`
}

// QueueCounts are a datacenter's jobs by lifecycle state.
type QueueCounts struct {
	Queued    int `json:"queued"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Dead      int `json:"dead"`
	Cancelled int `json:"cancelled"`
}

// Budgets are a manager's ledger bounds (its settings) and their use.
type Budgets struct {
	// Entries and MaxEntries: live idempotency entries, and
	// IDEMPOTENCY_LEDGER_MAX_ENTRIES.
	Entries    int `json:"entries"`
	MaxEntries int `json:"max_entries"`
	// Bytes and MaxBytes: the accounted bytes of entries and jobs, and
	// IDEMPOTENCY_LEDGER_MAX_BYTES (0: unbounded).
	Bytes    uint64 `json:"bytes"`
	MaxBytes int64  `json:"max_bytes"`
	// TenantMaxBytes is IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES (0: unbounded).
	TenantMaxBytes int64 `json:"tenant_max_bytes"`
	// Queued and MaxQueued: queued jobs, and MANAGER_MAX_QUEUED_JOBS.
	Queued    int `json:"queued"`
	MaxQueued int `json:"max_queued"`
	// Outbox and OutboxMax: multi-datacenter submissions not yet confirmed
	// by every datacenter they name, and MANAGER_OUTBOX_MAX_ENTRIES.
	Outbox    int `json:"outbox"`
	OutboxMax int `json:"outbox_max"`
}

// ConfigMismatch is one setting of another manager that differs from the
// reporting manager's.
type ConfigMismatch struct {
	Datacenter string `json:"datacenter"`
	Node       string `json:"node"`
	// Setting is the variable (IDEMPOTENCY_COMMITTED_TTL_SECONDS).
	Setting string `json:"setting"`
	Local   string `json:"local"`
	Remote  string `json:"remote"`
}

// AutopilotHealth is the leader's raft-autopilot state.
type AutopilotHealth struct {
	// Healthy: every server of the Raft configuration is healthy.
	Healthy bool `json:"healthy"`
	// FailureTolerance: how many voters may fail without losing quorum.
	FailureTolerance int            `json:"failure_tolerance"`
	Servers          []ServerHealth `json:"servers"`
}

// ServerHealth is one Raft server in AutopilotHealth.
type ServerHealth struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	// Status in the gossip pool: alive, failed, left.
	Status string `json:"status"`
	// RaftState: leader, voter, non-voter, staging.
	RaftState   string    `json:"raft_state"`
	Healthy     bool      `json:"healthy"`
	StableSince time.Time `json:"stable_since"`
}

// RefusedServer is a gossip pool member's identity claim the leader
// refuses.
type RefusedServer struct {
	// Reason: duplicate_id, old_address_alive, address_in_use, old_protocol.
	Reason string `json:"reason"`
	// Node is the member's gossip name; ID, RaftAddr and Version what it
	// claims.
	Node     string `json:"node"`
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr,omitempty"`
	Version  int    `json:"version"`
	// Holder is who keeps the identity.
	Holder string    `json:"holder,omitempty"`
	Since  time.Time `json:"since"`
}
