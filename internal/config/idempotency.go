package config

import "time"

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

// Names of the IDEMPOTENCY_* variables.
const (
	EnvPendingTTL         = "IDEMPOTENCY_PENDING_TTL_SECONDS"
	EnvCommittedTTL       = "IDEMPOTENCY_COMMITTED_TTL_SECONDS"
	EnvRejectedTTL        = "IDEMPOTENCY_REJECTED_TTL_SECONDS"
	EnvMaxEntries         = "IDEMPOTENCY_MAX_ENTRIES"
	EnvCleanupInterval    = "IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS"
	EnvWaitForPending     = "IDEMPOTENCY_WAIT_FOR_PENDING"
	EnvPendingWaitTimeout = "IDEMPOTENCY_PENDING_WAIT_TIMEOUT"
)

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
// (which starts at the defaults). Durations are decimal seconds (60, 60.0, 0.5).
func RegisterIdempotency(l *Loader, c *Idempotency) {
	d := DefaultIdempotency()
	l.SecondsRange(&c.PendingTTL, EnvPendingTTL, d.PendingTTL, MinTTL, maxSeconds*time.Second,
		"how long a PENDING entry lives before it expires")
	l.SecondsRange(&c.CommittedTTL, EnvCommittedTTL, d.CommittedTTL, MinTTL, maxSeconds*time.Second,
		"how long a COMMITTED entry answers duplicates")
	l.SecondsRange(&c.RejectedTTL, EnvRejectedTTL, d.RejectedTTL, MinTTL, maxSeconds*time.Second,
		"how long a REJECTED entry answers duplicates (and the Retry-After of capacity rejections)")
	l.Int(&c.MaxEntries, EnvMaxEntries, d.MaxEntries, 1, 100_000_000,
		"the bound on entries in each gate's idempotency cache")
	l.Seconds(&c.CleanupInterval, EnvCleanupInterval, int(d.CleanupInterval/time.Second), 1, 3600,
		"how often expired entries are swept (gate cache) and expired (ledger)")
	l.Bool(&c.WaitForPending, EnvWaitForPending, d.WaitForPending,
		"whether a duplicate of a PENDING submission waits for its outcome (else 409 request_in_progress)")
	l.SecondsRange(&c.PendingWaitTimeout, EnvPendingWaitTimeout, d.PendingWaitTimeout, MinTTL, time.Hour,
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
