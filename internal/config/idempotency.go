package config

import (
	"strconv"
	"strings"
	"time"
)

// Idempotency holds the seven IDEMPOTENCY_* settings that gates and managers
// share; their names and defaults are part of the contract (docs/api.md,
// docs/configuration.md).
type Idempotency struct {
	PendingTTL         time.Duration // IDEMPOTENCY_PENDING_TTL_SECONDS=60
	CommittedTTL       time.Duration // IDEMPOTENCY_COMMITTED_TTL_SECONDS=300
	RejectedTTL        time.Duration // IDEMPOTENCY_REJECTED_TTL_SECONDS=60
	MaxEntries         int           // IDEMPOTENCY_MAX_ENTRIES=100000
	CleanupInterval    time.Duration // IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS=10
	WaitForPending     bool          // IDEMPOTENCY_WAIT_FOR_PENDING=true
	PendingWaitTimeout time.Duration // IDEMPOTENCY_PENDING_WAIT_TIMEOUT=30
}

// Names of the IDEMPOTENCY_* variables both daemons read.
const (
	EnvPendingTTL         = "IDEMPOTENCY_PENDING_TTL_SECONDS"
	EnvCommittedTTL       = "IDEMPOTENCY_COMMITTED_TTL_SECONDS"
	EnvRejectedTTL        = "IDEMPOTENCY_REJECTED_TTL_SECONDS"
	EnvMaxEntries         = "IDEMPOTENCY_MAX_ENTRIES"
	EnvCleanupInterval    = "IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS"
	EnvWaitForPending     = "IDEMPOTENCY_WAIT_FOR_PENDING"
	EnvPendingWaitTimeout = "IDEMPOTENCY_PENDING_WAIT_TIMEOUT"
)

// Names of the IDEMPOTENCY_* variables one daemon reads. They are named here
// with the shared ones, and the gate and the manager register them under
// these names, so that each daemon knows the other's IDEMPOTENCY_* variables
// and warns only about names neither reads (Loader.Unknown): one
// environment often serves both.
const (
	// The gate's.
	EnvMaxTTL        = "IDEMPOTENCY_MAX_TTL_SECONDS"
	EnvCacheMaxBytes = "IDEMPOTENCY_MAX_BYTES"
	// The manager's.
	EnvLedgerMaxEntries             = "IDEMPOTENCY_LEDGER_MAX_ENTRIES"
	EnvLedgerMaxBytes               = "IDEMPOTENCY_LEDGER_MAX_BYTES"
	EnvLedgerTenantMaxBytes         = "IDEMPOTENCY_LEDGER_TENANT_MAX_BYTES"
	EnvWatermarkTTL                 = "IDEMPOTENCY_WATERMARK_TTL_SECONDS"
	EnvWatermarkMaxClients          = "IDEMPOTENCY_WATERMARK_MAX_CLIENTS"
	EnvWatermarkMaxClientsPerTenant = "IDEMPOTENCY_WATERMARK_MAX_CLIENTS_PER_TENANT"
)

// IdempotencyVariables is every IDEMPOTENCY_* variable either daemon reads.
var IdempotencyVariables = []string{
	EnvPendingTTL, EnvCommittedTTL, EnvRejectedTTL, EnvMaxEntries, EnvCleanupInterval, EnvWaitForPending,
	EnvPendingWaitTimeout, EnvMaxTTL, EnvCacheMaxBytes, EnvLedgerMaxEntries, EnvLedgerMaxBytes,
	EnvLedgerTenantMaxBytes, EnvWatermarkTTL, EnvWatermarkMaxClients, EnvWatermarkMaxClientsPerTenant,
}

// DefaultIdempotency returns the defaults of the IDEMPOTENCY_* settings.
func DefaultIdempotency() Idempotency {
	return Idempotency{
		PendingTTL:         60 * time.Second,
		CommittedTTL:       300 * time.Second,
		RejectedTTL:        60 * time.Second,
		MaxEntries:         100000,
		CleanupInterval:    10 * time.Second,
		WaitForPending:     true,
		PendingWaitTimeout: 30 * time.Second,
	}
}

// MinTTL is the lower bound of the IDEMPOTENCY_*_TTL_SECONDS settings and of
// IDEMPOTENCY_PENDING_WAIT_TIMEOUT: 0.1 seconds.
const MinTTL = 100 * time.Millisecond

// RegisterIdempotency registers the IDEMPOTENCY_* settings on l, storing into c
// (which holds the defaults, DefaultIdempotency). Durations are decimal
// seconds (60, 60.0, 0.5).
func RegisterIdempotency(l *Loader, c *Idempotency) {
	l.Seconds(&c.PendingTTL, EnvPendingTTL, MinTTL, maxSeconds*time.Second,
		"how long a PENDING entry lives before it expires")
	l.Seconds(&c.CommittedTTL, EnvCommittedTTL, MinTTL, maxSeconds*time.Second,
		"how long a COMMITTED entry answers duplicates")
	l.Seconds(&c.RejectedTTL, EnvRejectedTTL, MinTTL, maxSeconds*time.Second,
		"how long a REJECTED entry answers duplicates (and the Retry-After of capacity rejections)")
	l.Int(&c.MaxEntries, EnvMaxEntries, 1, 100_000_000,
		"the bound on entries in each gate's idempotency cache")
	l.Seconds(&c.CleanupInterval, EnvCleanupInterval, time.Second, time.Hour,
		"how often expired entries are swept (gate cache) and expired (ledger)")
	l.Bool(&c.WaitForPending, EnvWaitForPending,
		"whether a duplicate of a PENDING submission waits for its outcome (else 409 request_in_progress)")
	l.Seconds(&c.PendingWaitTimeout, EnvPendingWaitTimeout, MinTTL, time.Hour,
		"how long a duplicate waits on a PENDING submission before 409 request_in_progress")
}

// TTL returns the TTL of a state name ("pending", "committed", "rejected").
func (c Idempotency) TTL(state string) time.Duration {
	switch state {
	case "pending":
		return c.PendingTTL
	case "committed":
		return c.CommittedTTL
	case "rejected":
		return c.RejectedTTL
	}
	return 0
}

// The settings that must agree across the datacenters of a federation (the
// per-state lifetimes and the waiting rule: a submission behaves alike
// wherever it lands), in the order Canonical writes them, each with its
// variable.
var canonicalSettings = []struct {
	name, env string
	value     func(Idempotency) string
}{
	{"pending_ttl", EnvPendingTTL, func(c Idempotency) string { return FormatSeconds(c.PendingTTL) }},
	{"committed_ttl", EnvCommittedTTL, func(c Idempotency) string { return FormatSeconds(c.CommittedTTL) }},
	{"rejected_ttl", EnvRejectedTTL, func(c Idempotency) string { return FormatSeconds(c.RejectedTTL) }},
	{"wait_for_pending", EnvWaitForPending, func(c Idempotency) string { return strconv.FormatBool(c.WaitForPending) }},
	{"pending_wait_timeout", EnvPendingWaitTimeout, func(c Idempotency) string { return FormatSeconds(c.PendingWaitTimeout) }},
}

// Canonical is the compact form of the settings that must agree across a
// federation ("pending_ttl=60 committed_ttl=300 ..."; seconds), which
// gates and managers publish in their gossip metadata and managers compare
// with DiffCanonical. A gate uses every one of them (its cache's lifetimes
// and the waiting rule), so it is compared on all.
func (c Idempotency) Canonical() string {
	fields := make([]string, len(canonicalSettings))
	for i, s := range canonicalSettings {
		fields[i] = s.name + "=" + s.value(c)
	}
	return strings.Join(fields, " ")
}

// SettingDiff is one setting whose value differs between two nodes.
type SettingDiff struct {
	// Setting is the variable's name (IDEMPOTENCY_PENDING_TTL_SECONDS).
	Setting       string
	Local, Remote string
}

// DiffCanonical compares two Canonical forms and returns the settings whose
// values differ, in Canonical's order. A setting one side does not publish
// (an older or newer build) is not compared, nor the pending wait timeout
// when neither side waits (wait_for_pending=false): it is not used then, and
// a difference would only raise an alert.
func DiffCanonical(local, remote string) []SettingDiff {
	l, r := pairs(strings.Fields(local)), pairs(strings.Fields(remote))
	noWait := l["wait_for_pending"] == "false" && r["wait_for_pending"] == "false"
	var out []SettingDiff
	for _, s := range canonicalSettings {
		lv, lok := l[s.name]
		rv, rok := r[s.name]
		if s.env == EnvPendingWaitTimeout && noWait {
			continue
		}
		if lok && rok && lv != rv {
			out = append(out, SettingDiff{Setting: s.env, Local: lv, Remote: rv})
		}
	}
	return out
}
