package ledger

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// State is the state of an idempotency entry. An entry that expires is removed,
// so "expired" is not a state an entry is ever seen in.
type State uint8

// Entry states. The numeric values are part of the snapshot format; 1 is
// no state.
const (
	// StateCommitted: admitted; the job exists. Terminal until its TTL.
	StateCommitted State = 2
	// StateRejected: admission refused the job. Terminal until its TTL.
	StateRejected State = 3
	// StateClaimed: a claim (Claim): the key is held for a job that runs in
	// another datacenter, its home (Entry.Home); this datacenter queues no
	// job and runs nothing. Terminal until its TTL.
	StateClaimed State = 4
)

var stateNames = [...]string{
	StateCommitted: api.KeyStateCommitted,
	StateRejected:  api.KeyStateRejected,
	StateClaimed:   api.KeyStateClaimed,
}

// String returns the API name of the state (api.KeyStateCommitted, ...).
func (s State) String() string { return nameOf(stateNames[:], int(s), "state") }

func (s State) valid() bool { return s >= StateCommitted && s <= StateClaimed }

// Request is the part of a submission the ledger stores with its key: what
// the job is made of, what a duplicate is answered with, and what the outbox
// carries to the other datacenters it names.
type Request struct {
	// Type is the job type.
	Type string
	// Payload is the job payload as raw JSON bytes (opaque to the ledger).
	Payload json.RawMessage
	// Datacenters are the datacenters the job targets, as the client named them.
	Datacenters []string
}

// Entry is an idempotency entry, keyed by (Tenant, Key).
//
// Entries are immutable values: a transition replaces the FSM's entry with a new
// one. An Entry handed out by the FSM (a read, a Result, a Change) is a copy of
// the struct whose Request.Payload and Request.Datacenters share memory with the
// FSM; treat them as read-only (they are clipped, so append copies).
type Entry struct {
	Tenant string
	// Key is the raw Idempotency-Key, without sf-string quotes.
	Key string
	// Fingerprint identifies the request body the key was first used with; it
	// is opaque to the ledger and compared byte for byte.
	Fingerprint string
	State       State
	// JobID is decided by the leader before it proposes the Admit. For a
	// committed entry it names the job; for a rejected one it is the ID that
	// was never used.
	JobID string
	// ReservedAt is the Now of the Admit's Reserve (unix nanoseconds).
	ReservedAt int64
	// ResolvedAt is the Now of the Admit's Commit or Reject (unix
	// nanoseconds). For a committed entry it equals the job's CreatedAt.
	ResolvedAt int64
	// ExpiresAt is when the entry stops answering duplicates (unix
	// nanoseconds), stamped by the leader as now + the TTL of the state.
	ExpiresAt int64
	// Request is what was submitted with the key.
	Request Request
	// ResultTTL, when positive, is the COMMITTED or REJECTED lifetime the
	// first admission fixed for this key (Reserve.ResultTTL): the leader
	// stamps ExpiresAt with it instead of the configured default.
	ResultTTL time.Duration

	// Structured is true for keys of the form <client_id>:<sequence>:<nonce>;
	// ClientID, Sequence and Nonce are set only then.
	Structured bool
	ClientID   string
	Sequence   uint64
	Nonce      string

	// Status (422 or 429), Reason (a short code such as "capacity") and Detail
	// are set for rejected entries only.
	Status int
	Reason string
	Detail string

	// Confirmed lists, sorted, the other datacenters named by a
	// multi-datacenter entry's request that hold a final outcome for it
	// (Confirm): the outbox's durable progress (docs/multidc.md).
	Confirmed []string
}

// Home is the datacenter that runs the job of a claimed entry (the one name
// of its Request.Datacenters), "" for any other entry: the job of an entry
// that is not a claim is this datacenter's.
func (e Entry) Home() string {
	if e.State != StateClaimed || len(e.Request.Datacenters) != 1 {
		return ""
	}
	return e.Request.Datacenters[0]
}

// Job is a row of the job table: created by an Admit's Commit, removed when its
// retention (ExpiresAt) passes, independently of its idempotency entry.
type Job struct {
	ID     string
	Tenant string
	// Key is the idempotency key the job was submitted with.
	Key         string
	Type        string
	Payload     json.RawMessage
	Datacenters []string
	// CreatedAt is the Now of the Admit's Commit (unix nanoseconds).
	CreatedAt int64
	// Seq is the raft log index of the Admit: unique, increasing in
	// commit order, identical on every replica. ListJobs orders and pages by it.
	Seq uint64
	// ExpiresAt is the end of the job's retention (unix nanoseconds). A job
	// in the lifecycle has none (0) until it finishes: then it is
	// Life.FinishedAt + Life.Retention.
	ExpiresAt int64

	// Life is the job's lifecycle (jobs.go, docs/ledger.md "Job
	// lifecycle"); nil for a JobLegacy job, which a Commit without Queue
	// created. Like Payload it is shared with the FSM: read-only. (A pointer,
	// so that a legacy job, and every Result, costs what it did before the
	// lifecycle.)
	Life *JobLife
}

// Gone reports whether the job's retention has ended at now: never for a job
// in the lifecycle that has not finished (ExpiresAt 0).
func (j Job) Gone(now int64) bool { return j.ExpiresAt != 0 && j.ExpiresAt <= now }

// State returns the job's lifecycle state (JobLegacy when Life is nil). Its
// String is the job's status, which the ledger does not store apart from it:
// the name of a lifecycle state, or api.JobStatusCommitted for a JobLegacy job.
func (j Job) State() JobState { return stateOf(&j) }

// JobLife is the lifecycle part of a job. Items are immutable: a transition
// makes a new one.
type JobLife struct {
	State JobState
	// Attempts counts the leases handed out for the job.
	Attempts uint64
	// RunAt is the queue time of a QUEUED job: it is not leased before it,
	// and the queue is ordered by it (then Seq). The Commit's Now when
	// committed, the leader-stamped RetryAt after a failed attempt.
	RunAt int64
	// LeaseID, Holder and LeaseExpiresAt are the current lease of a RUNNING
	// job. After the job leaves RUNNING by its worker's Complete or Fail they
	// stay, naming the lease that did it (what makes a repeated Complete or
	// Fail answer the same job); a lease that expired is cleared.
	LeaseID        string
	Holder         string
	LeaseExpiresAt int64
	// Retention is how long the job stays readable once finished: the
	// Commit's JobExpiresAt - Now.
	Retention int64
	// FinishedAt is the Now of the command that made the job SUCCEEDED,
	// FAILED, DEAD or CANCELLED (0 before).
	FinishedAt int64
	// Result is the worker's result of a SUCCEEDED job (opaque JSON bytes);
	// Error the worker's error of the last failed attempt (or "lease
	// expired").
	Result json.RawMessage
	Error  string
}

// WatermarkWindow is how many sequences at and below a client's highest
// committed sequence the ledger tracks exactly (an anti-replay window, as IPsec
// and DTLS keep one; RFC 4303 §3.4.3, RFC 6347 §4.1.2.6). A sequence inside it
// that never committed is judged afresh; one below it is refused as expired.
// 1024 lets a client pipeline or retry up to a thousand sequences out of order
// for 128 bytes per client.
const WatermarkWindow = 1024

// Watermark records which sequences of a structured-key client (Tenant,
// ClientID, Nonce) committed: Sequence is the highest, and Window the exact
// set inside the window below it (bit i of Window[i/64], counting from the
// least significant bit, is Sequence-i). A watermark is created by the first
// Admit of the client's key, with Sequence 0 and no bit set:
// nothing committed yet.
type Watermark struct {
	Tenant   string
	ClientID string
	Nonce    string
	Sequence uint64
	Window   [WatermarkWindow / 64]uint64
	// UpdatedAt is the Now of the command that last raised or touched the
	// watermark (unix nanoseconds). Watermarks age out by it.
	UpdatedAt int64
}

// Committed reports whether seq is known to have committed: inside the window
// with its bit set. Below the window the answer is unknown (false).
func (w *Watermark) Committed(seq uint64) bool {
	if seq > w.Sequence || w.Sequence-seq >= WatermarkWindow {
		return false
	}
	i := w.Sequence - seq
	return w.Window[i/64]&(1<<(i%64)) != 0
}

// Refuses reports whether an Admit of seq is refused (KeyExpired): known
// committed, or too old for the window to tell.
func (w *Watermark) Refuses(seq uint64) bool { return w.Committed(seq) || w.BelowWindow(seq) }

// BelowWindow reports whether seq is too old for the window to tell.
func (w *Watermark) BelowWindow(seq uint64) bool {
	return seq <= w.Sequence && w.Sequence-seq >= WatermarkWindow
}

// record marks seq committed, sliding the window up when seq is the new
// highest. A sequence below the window changes nothing.
func (w *Watermark) record(seq uint64) {
	if seq > w.Sequence {
		w.shift(seq - w.Sequence)
		w.Sequence = seq
	}
	if i := w.Sequence - seq; i < WatermarkWindow {
		w.Window[i/64] |= 1 << (i % 64)
	}
}

// shift moves every bit d places towards older sequences (higher indexes).
func (w *Watermark) shift(d uint64) {
	if d >= WatermarkWindow {
		w.Window = [WatermarkWindow / 64]uint64{}
		return
	}
	words, bits := int(d/64), d%64
	n := len(w.Window)
	for i := n - 1; i >= 0; i-- {
		var v uint64
		if j := i - words; j >= 0 {
			v = w.Window[j] << bits
			if bits != 0 && j > 0 {
				v |= w.Window[j-1] >> (64 - bits)
			}
		}
		w.Window[i] = v
	}
}

// Outcome says what a command did. It is the business answer, not an error:
// every outcome except OutcomeInvalid is a normal result.
type Outcome uint8

// Outcomes. The zero value is never returned.
const (
	_ Outcome = iota
	// OutcomeExists: an Admit or Claim found a live entry with the same
	// fingerprint; Result.Entry is it, Result.Job its job when committed.
	// Nothing changed.
	OutcomeExists
	// OutcomeKeyReused: an Admit or Claim found a live entry with another fingerprint;
	// Result.Entry is it. Nothing changed.
	OutcomeKeyReused
	// OutcomeKeyExpired: a structured key has no live entry and its sequence
	// committed, or is below the client's watermark window; Result.Watermark is the highest committed. Nothing
	// reserved.
	OutcomeKeyExpired
	// OutcomeFull: the ledger holds MaxEntries live entries. Nothing reserved.
	OutcomeFull
	// OutcomeCommitted: an Admit inserted a COMMITTED entry and created its
	// job (Result.Entry, Result.Job).
	OutcomeCommitted
	// OutcomeRejected: an Admit inserted a REJECTED entry (Result.Entry).
	OutcomeRejected
	// OutcomeUnchanged: Confirm, Release, Cancel or Retry found the entry or
	// job already as the command would leave it, or not the one it names;
	// Result.Entry is the entry as it is. Nothing changed.
	OutcomeUnchanged
	// OutcomeNotFound: the command found no entry or job for what it names (it
	// expired, or never existed). Nothing changed.
	OutcomeNotFound
	// OutcomeExpired: Expire ran; Result.Removed counts what it removed and
	// Result.More says whether more was due than MaxRemovals allowed.
	OutcomeExpired
	// OutcomeIgnored: an unknown command type with the ignorable bit set.
	OutcomeIgnored
	// OutcomeInvalid: the command broke a rule of its type, or did not
	// decode (which halts the FSM: Result.Err is then a *HaltError);
	// Result.Err says why. Nothing changed.
	OutcomeInvalid
	// OutcomeWatermarksFull: a structured key of a client without a watermark,
	// and the table holds MaxWatermarks. Nothing reserved; no watermark is ever
	// evicted to make room (they age out by their TTL).
	OutcomeWatermarksFull
	// OutcomeTenantWatermarksFull: as OutcomeWatermarksFull, but the tenant
	// holds its share, MaxTenantWatermarks.
	OutcomeTenantWatermarksFull
	// OutcomeBytesFull: the entries and jobs account for MaxBytes (payloads
	// included; see EntryOverhead) and the reservation would pass it. Nothing
	// reserved; nothing live dropped.
	OutcomeBytesFull
	// OutcomeTenantBytesFull: as OutcomeBytesFull, for the tenant's share,
	// MaxTenantBytes.
	OutcomeTenantBytesFull
	// OutcomeBatch: a batch command applied; Result.Items has one Result per
	// item, in order.
	OutcomeBatch
	// OutcomeConfirmed: Confirm applied; Result.Items has one Result per item.
	// An item's OutcomeConfirmed: the datacenter was added to the entry's
	// Confirmed (the item's Entry is the entry after).
	OutcomeConfirmed

	// OutcomeLeased: Lease applied; Result.Jobs holds the jobs handed out
	// (possibly none), Result.Leases what its reclaim of expired leases did.
	OutcomeLeased
	// OutcomeExtended: Heartbeat extended the job's current lease
	// (Result.Job is the job after).
	OutcomeExtended
	// OutcomeLeaseLost: Heartbeat, Complete or Fail named a lease that is not
	// the job's current one (expired at Now, taken over, finished, or a job
	// outside the lifecycle); Result.Job is the job as it is. Nothing changed.
	OutcomeLeaseLost
	// OutcomeCompleted: Complete moved the job RUNNING → SUCCEEDED.
	OutcomeCompleted
	// OutcomeFailed: Fail ended the attempt; Result.Job.State says how:
	// QUEUED again (a retry at RunAt), FAILED or DEAD.
	OutcomeFailed
	// OutcomeLeasesExpired: ExpireLeases ran; Result.Leases counts what it
	// did, Result.More says whether more was due than Max allowed.
	OutcomeLeasesExpired
	// OutcomeClaimed: Claim inserted a CLAIMED entry (Result.Entry).
	OutcomeClaimed
	// OutcomeReleased: Release removed the claim (Result.Entry as it was).
	OutcomeReleased
	// OutcomeCancelled: Cancel moved the job QUEUED → CANCELLED and recorded
	// the key (Result.Job, Result.Entry).
	OutcomeCancelled
	// OutcomeRetried: Retry moved the job FAILED or DEAD → QUEUED and
	// recorded the key (Result.Job, Result.Entry).
	OutcomeRetried
	// OutcomeConflict: Cancel or Retry found the job in a state the action
	// does not apply to (Result.Job); nothing changed.
	OutcomeConflict
)

var outcomeNames = [...]string{
	OutcomeExists:     "exists",
	OutcomeKeyReused:  "key_reused",
	OutcomeKeyExpired: "key_expired",
	OutcomeFull:       "full",

	OutcomeCommitted: "committed",
	OutcomeRejected:  "rejected",
	OutcomeUnchanged: "unchanged",
	OutcomeNotFound:  "not_found",
	OutcomeExpired:   "expired",
	OutcomeIgnored:   "ignored",
	OutcomeInvalid:   "invalid",

	OutcomeWatermarksFull:       "watermarks_full",
	OutcomeTenantWatermarksFull: "tenant_watermarks_full",
	OutcomeBytesFull:            "bytes_full",
	OutcomeTenantBytesFull:      "tenant_bytes_full",
	OutcomeBatch:                "batch",
	OutcomeConfirmed:            "confirmed",

	OutcomeLeased:        "leased",
	OutcomeExtended:      "extended",
	OutcomeLeaseLost:     "lease_lost",
	OutcomeCompleted:     "completed",
	OutcomeFailed:        "failed",
	OutcomeLeasesExpired: "leases_expired",
	OutcomeClaimed:       "claimed",
	OutcomeReleased:      "released",
	OutcomeCancelled:     "cancelled",
	OutcomeRetried:       "retried",
	OutcomeConflict:      "conflict",
}

func (o Outcome) String() string { return nameOf(outcomeNames[:], int(o), "outcome") }

// nameOf is names[v], or kind(v) for a value without a name.
func nameOf(names []string, v int, kind string) string {
	if v < len(names) && names[v] != "" {
		return names[v]
	}
	return kind + "(" + strconv.Itoa(v) + ")"
}

// Removed counts what a command removed by expiry.
type Removed struct {
	// Committed, Rejected and Claimed count removed entries by their state.
	Committed, Rejected, Claimed int
	// Jobs counts jobs removed because their retention passed.
	Jobs int
	// Watermarks counts watermarks removed by age or by the bound.
	Watermarks int
}

// Total is the number of things removed.
func (r Removed) Total() int {
	return r.Committed + r.Rejected + r.Claimed + r.Jobs + r.Watermarks
}

// Result is what Apply returns for a LogCommand (as an interface{} holding a
// Result value, never a pointer): the manager reads it from
// raft.ApplyFuture.Response() with
//
//	res, ok := fut.Response().(ledger.Result)
//
// It is deterministic: every replica computes the same Result for the same log
// entry.
type Result struct {
	Outcome Outcome
	// Entry is the key's entry after the command, for OutcomeExists,
	// OutcomeKeyReused, OutcomeCommitted, OutcomeRejected and
	// OutcomeUnchanged.
	Entry Entry
	// Job is set (Job.ID != "") when Entry is COMMITTED and its job is still in
	// the job table.
	Job Job
	// Watermark is the client's highest committed sequence, for
	// OutcomeKeyExpired.
	Watermark uint64
	// Removed counts removals: by Expire, and by an Admit, which removes due
	// entries itself (its own key's, and the earliest when the ledger is full).
	Removed Removed
	// More is set by Expire when MaxRemovals stopped it with more still due.
	More bool
	// Err is set for OutcomeInvalid; it matches ErrInvalidCommand, or
	// ErrHalted (a *HaltError, matching ErrMalformed, ErrUnknownCommand or
	// ErrUnsupportedVersion too) for an entry that does not decode and every
	// entry after it.
	Err error
	// Items is set for OutcomeBatch: the Result of each item of the batch, in
	// order (an item's Items is nil).
	Items []Result
	// Lease is set for OutcomeLeased and OutcomeLeasesExpired (a pointer: a
	// Result is copied into every Apply's answer, and the submission path
	// should not pay for it).
	Lease *LeaseResult
}

// LeaseResult is what Lease and ExpireLeases did.
type LeaseResult struct {
	// Jobs: the jobs Lease handed out, in order (reclaimed expired leases
	// first, then the queue's oldest).
	Jobs []Job
	// Requeued: jobs put back to QUEUED (ExpireLeases).
	Requeued int
	// Reclaimed: jobs leased again at once by Lease.
	Reclaimed int
	// Dead: jobs that had used MaxAttempts, made DEAD.
	Dead int
	// Replayed: a Lease with Replay found its lease IDs held; Jobs are the
	// jobs that hold them, and nothing was leased.
	Replayed bool
}

// ChangeKind says how an entry changed.
type ChangeKind uint8

// Change kinds.
const (
	_ ChangeKind = iota
	// ChangeCommitted: a new COMMITTED entry (an Admit).
	ChangeCommitted
	// ChangeRejected: a new REJECTED entry (an Admit).
	ChangeRejected
	// ChangeRemoved: the entry expired and was removed; Change.Entry is the
	// entry as it was.
	ChangeRemoved
	// ChangeRestored: Restore replaced the whole state; every entry may have
	// changed. Change.Entry is zero.
	ChangeRestored
	// ChangeClaimed: a new CLAIMED entry (Claim).
	ChangeClaimed
)

var changeNames = [...]string{
	ChangeCommitted: "committed",
	ChangeRejected:  "rejected",
	ChangeRemoved:   "removed",
	ChangeRestored:  "restored",
	ChangeClaimed:   "claimed",
}

func (k ChangeKind) String() string { return nameOf(changeNames[:], int(k), "change") }

// Change is passed to Options.OnChange after an entry changes.
type Change struct {
	// Index is the raft log index of the command that made the change (0 for
	// ChangeRestored).
	Index uint64
	Kind  ChangeKind
	// Entry is the entry after the change (before it, for ChangeRemoved).
	Entry Entry
}

// Stats are counts of the FSM's state.
type Stats struct {
	// Entries = Committed + Rejected + Claimed: entries in the table (live,
	// or due but not yet removed by an Expire).
	Entries   int
	Committed int
	Rejected  int
	Claimed   int
	// Jobs in the job table: those outside the lifecycle (committed by
	// a Commit without Queue) and those in each lifecycle state.
	Jobs      int
	Queued    int
	Running   int
	Succeeded int
	Failed    int
	Dead      int
	Cancelled int
	// Watermarks held.
	Watermarks int
	// Bytes is the accounted size of the entries and jobs (payloads included;
	// see EntryOverhead), what Reserve.MaxBytes bounds.
	Bytes uint64
	// AppliedIndex is the raft index of the last command applied (or of the
	// snapshot restored).
	AppliedIndex uint64
}

// ListOptions select a page of a tenant's jobs for ListJobs.
type ListOptions struct {
	// Type, when not empty, keeps jobs of that type only.
	Type string
	// Status, when not empty, keeps jobs with that status only:
	// api.JobStatusCommitted (the jobs outside the lifecycle), or the name of
	// a lifecycle state (JobState.String: queued, running, succeeded,
	// failed, dead, cancelled), read through the (tenant, state, seq) order. Any other
	// value yields an empty page.
	Status string
	// After is a cursor: only jobs with Seq > After (with Desc, Seq <
	// After). 0 starts at the beginning (with Desc, at the newest job).
	After uint64
	// Desc lists newest first: in descending Seq order, from After down.
	// The walk, filters and bounds are the same as oldest first.
	Desc bool
	// Limit is the page size: <= 0 means api.DefaultListLimit; it is capped at
	// api.MaxListLimit.
	Limit int
	// MaxBytes, when positive, also ends the page before the job that would
	// bring the sum of ListJobBytes over it; a page holds at least one job.
	MaxBytes int
	// Now (unix nanoseconds), when positive, leaves out the jobs Gone at
	// it: past their retention, not yet removed by an Expire, which a read
	// at the same instant does not find either. They are skipped like the
	// jobs a filter skips (counted against MaxListSkips, not Limit: a page
	// still holds Limit jobs when that many follow). The reader's time,
	// never Apply's.
	Now int64
}

// ListJobOverhead is what ListJobBytes adds to a job's payload: a bound on the
// rest of a job's JSON (IDs, key, type, times, datacenters, lease) in a list
// or lease answer.
const ListJobOverhead = 1024

// ListJobBytes bounds the size of a job in a list or lease answer, for
// ListOptions.MaxBytes and Lease.MaxBytes: its payload and result (JSON,
// written as stored), its error (a JSON string: 6 bytes a byte at worst,
// \u00XX), key and type (also strings), datacenters and ListJobOverhead.
func ListJobBytes(j *Job) int {
	n := ListJobOverhead + len(j.Payload) + 6*(len(j.Key)+len(j.Type))
	for _, dc := range j.Datacenters {
		n += 6*len(dc) + 4
	}
	if j.Life != nil {
		n += len(j.Life.Result) + 6*len(j.Life.Error)
	}
	return n
}
