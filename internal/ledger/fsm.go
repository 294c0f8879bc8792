package ledger

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/once-dev/once/pkg/api"
)

// Options configure an FSM.
type Options struct {
	// OnChange, when set, is called after an entry changes: reserved,
	// committed, rejected, removed by expiry, and once with ChangeRestored after
	// Restore. See FSM for when and how.
	OnChange func(Change)
	// OnHalt, when set, is called once when the FSM halts (HaltError: a
	// committed entry it cannot decode), on the goroutine that applies,
	// after the entries before it are applied. It must not block nor call
	// Apply, ApplyBatch or Restore. The manager stops on it.
	OnHalt func(*HaltError)
	// Store tunes the disk-backed state (Open); New ignores it.
	Store StoreOptions
}

// FSM is the idempotency ledger: the raft.FSM (and raft.BatchingFSM) of a
// manager group. It holds the idempotency entries, the job table and the
// structured-key watermarks, and it is the only thing that changes them.
//
// The contract, in hashicorp/raft's words and ours; each sentence is tested
// (fsm_contract_test.go):
//
// Apply is called once a log entry is committed by a majority of the cluster.
// Apply is deterministic: it reads nothing but the log entry (its Data and its
// Index) and the state; no clock, no randomness, no I/O, no map iteration. The
// leader stamps every time (Now, ExpiresAt) and decides every job ID before it
// proposes a command. So every replica that applies the same log computes the
// same state and the same Result, and Persist writes byte-identical snapshots.
//
// Apply returns a Result value for every LogCommand entry, never nil and never
// a pointer; other log types (raft.LogConfiguration, ...) return nil. A
// business outcome (exists, key reused, full, ...) is the Result's Outcome; a
// command that decodes but breaks a rule of its type returns OutcomeInvalid
// with Result.Err and changes nothing but the applied index. An unknown type
// with TypeIgnorable set returns OutcomeIgnored. It never panics on any log
// data.
//
// A committed entry that does not decode (malformed bytes, an unknown type
// without TypeIgnorable, an unknown version of a known type) halts the FSM,
// as Nomad's FSM panics on an unknown type it may not ignore: skipping it
// would mark it applied and let this replica diverge silently from those
// that can read it. The entry is not applied and the applied index stays
// before it; its Result and the Result of every later entry is
// OutcomeInvalid with the *HaltError (its index, type and version, matching
// ErrHalted and the decoding error); Options.OnHalt is called once; Halted
// returns the error; Snapshot refuses. Nothing changes the state until the
// process restarts, and a build that reads the entry applies it on the
// replay (docs/ledger.md, "Formats"). An entry at or below the applied index
// is skipped without being judged (below).
//
// ApplyBatch applies its entries in order exactly as Apply would one by one,
// and returns one response per entry (nil for non-command entries). Applying a
// log one entry at a time or in batches of any size gives identical state.
//
// Log indexes must increase: an entry whose Index is not after the last applied
// one returns OutcomeInvalid (ErrInvalidCommand) and changes nothing. A job's
// Seq is the index of its Admit (for the i-th item of a batch, the index
// plus i, raised past any Seq already given: see AdmitBatch).
//
// Snapshot returns quickly: under the write lock it clones three copy-on-write
// B-trees (O(1) each; in memory) or takes a point-in-time view of the store
// (O(1); on disk), and records the applied index; entries, jobs and
// watermarks are immutable values, shared, never copied. Persist streams that
// view to the sink while Apply goes on; it is safe to call concurrently with
// Apply and with the readers, and what it writes does not change with later
// Applies. On disk, Persist first makes the store durable up to the view, so
// the store is never behind a snapshot Raft may compact its log to. Release
// drops the view. A snapshot never taken to Persist costs nothing. Snapshot
// refuses (ErrReplaying) while Raft is replaying entries the store had
// applied already (a restart that goes on from the store): the state is then
// ahead of the index Raft would name the snapshot by, and a replica restored
// from it, or restarted past it, would hold effects its log says it never
// applied. It refuses a halted FSM too (ErrHalted).
//
// Restore discards all previous state: it decodes the whole snapshot into a
// fresh state (on disk: a new generation of the store, beside the live one),
// without holding any lock, and only then swaps it in under the write lock.
// A malformed snapshot returns an error matching ErrBadSnapshot or
// ErrSnapshotVersion, never panics, and leaves the previous state in place.
// Restore closes the reader.
//
// Readers (Entry, Job, ListJobs, NextExpiry, Stats, Watermark, LedgerTime)
// are safe to call from any goroutine, concurrently with Apply, ApplyBatch,
// Snapshot, Persist and Restore; they take the read lock and return copies.
// They see the state after some whole command (or batch), never a partial one.
// Entries are returned while they are in the table: an entry past its
// ExpiresAt stays until an Expire (or an Admit of its key) removes it, so a
// reader that cares compares ExpiresAt with its clock.
//
// Options.OnChange is called synchronously on the goroutine that applies (raft's
// FSM goroutine), once per change, in log order, after the write lock is
// released and before Apply/ApplyBatch/Restore returns. It may call the
// readers, which then see the state after the whole Apply or ApplyBatch that
// made the change (so possibly later than Change.Entry). It must not block
// (every later Apply waits for it) and must not call Apply, ApplyBatch or
// Restore (they would deadlock).
type FSM struct {
	onChange func(Change)

	// wmu serializes the mutators (Apply, ApplyBatch, Restore) and the
	// delivery of their changes, so changes arrive in log order.
	wmu     sync.Mutex
	changes []Change // scratch, under wmu
	ax      applyCtx // the applying command's (ctx), under wmu

	// mu guards s: readers take RLock; Apply, Restore's swap and Snapshot's
	// clone take Lock.
	mu     sync.RWMutex
	s      *state
	closed bool // the store is closed (Close)
	// disk: the state is on disk (Open), where the strings of a command
	// decoded for Apply share one copy of its bytes (decodeCommand): most
	// of an applied command's strings go into the store's keys and values
	// and are dropped; the few a disk state keeps in memory (a tenant's
	// name in its counters, a running job's tenant, ID and lease ID in the
	// lease orders) keep their command's copy, a few hundred bytes, as long
	// as they are kept.
	disk bool
	// delivered is the index of the last command entry Raft gave Apply or
	// ApplyBatch (the applied index after Open and Restore); below the
	// applied index while Raft replays what the store has (under mu).
	delivered uint64

	// mutations counts the mutators' changes of s (Applies).
	mutations atomic.Uint64

	// halt is set once, by the mutators, when an entry does not decode.
	halt   atomic.Pointer[HaltError]
	onHalt func(*HaltError)
}

// HaltError is why an FSM halted: the committed entry at Index, of command
// type Type and version Version, does not decode (Err: ErrMalformed,
// ErrUnknownCommand or ErrUnsupportedVersion). It matches ErrHalted and Err.
type HaltError struct {
	Index   uint64
	Type    CommandType
	Version uint8
	Err     error
}

func (e *HaltError) Error() string {
	return fmt.Sprintf("ledger: halted at log index %d (command %s, version %d): %v; "+
		"no later entry is applied: run a build that reads this log (docs/operations.md)",
		e.Index, e.Type, e.Version, e.Err)
}

// Unwrap returns the decoding error and ErrHalted.
func (e *HaltError) Unwrap() []error { return []error{ErrHalted, e.Err} }

func newHaltError(l *raft.Log, err error) *HaltError {
	h := &HaltError{Index: l.Index, Err: err}
	if len(l.Data) > 0 {
		h.Type = CommandType(l.Data[0])
	}
	if len(l.Data) > 1 {
		h.Version = l.Data[1]
	}
	return h
}

// Halted returns the error that halted the FSM, nil while it applies.
func (f *FSM) Halted() *HaltError { return f.halt.Load() }

// haltsAt reports whether an entry whose decoding returned err halts the FSM
// (not yet halted): it does not decode, and it is after the applied index
// (an entry at or below it was applied before and is skipped). Under wmu.
func (f *FSM) haltsAt(l *raft.Log, err error) *HaltError {
	if err == nil || l.Index <= f.s.applied || f.halt.Load() != nil {
		return nil
	}
	h := newHaltError(l, err)
	f.halt.Store(h)
	return h
}

func (f *FSM) halted(h *HaltError) {
	if h != nil && f.onHalt != nil {
		f.onHalt(h)
	}
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
	_ raft.FSMSnapshot = (*Snapshot)(nil)
)

// New returns an empty FSM whose state is in memory (tests, benchmarks, and
// managers with MANAGER_LEDGER_STORE=memory); Open keeps it on disk.
func New(opts Options) *FSM {
	return &FSM{onChange: opts.OnChange, onHalt: opts.OnHalt, s: newState()}
}

// Apply applies one committed log entry; see FSM for the contract. For a
// raft.LogCommand it returns a Result value, otherwise nil.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	cmd, err := decodeCommand(l.Data, f.disk)
	if h := f.haltsAt(l, err); h != nil {
		f.halted(h)
		return invalid(h)
	}
	if h := f.halt.Load(); h != nil {
		return invalid(h)
	}
	ax := f.ctx(l.Index)
	f.mu.Lock()
	f.delivered = l.Index
	f.s.begin()
	res := f.s.applyTimed(ax, cmd, err)
	f.s.commit()
	f.mutations.Add(1)
	f.mu.Unlock()
	f.notify()
	return res
}

// ApplyBatch applies committed log entries in order under one acquisition of
// the write lock; see FSM. The i-th response is a Result for a LogCommand
// entry and nil for any other. An entry that halts the FSM ends the batch:
// the entries before it are applied, it and those after it are not.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	type decoded struct {
		cmd Command
		err error
	}
	cmds := make([]decoded, len(logs))
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			cmds[i].cmd, cmds[i].err = decodeCommand(l.Data, f.disk)
		}
	}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.mu.Lock()
	f.s.begin()
	var halt *HaltError
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if h := f.haltsAt(l, cmds[i].err); h != nil {
			halt = h
		}
		if h := f.halt.Load(); h != nil {
			out[i] = invalid(h)
			continue
		}
		f.delivered = l.Index
		out[i] = f.s.applyTimed(f.ctx(l.Index), cmds[i].cmd, cmds[i].err)
	}
	f.s.commit()
	f.mutations.Add(1)
	f.mu.Unlock()
	f.notify()
	f.halted(halt)
	return out
}

// ctx returns the context of the command at index: f's own, so that
// handing it to the commands (Command.apply) allocates nothing. Under wmu.
func (f *FSM) ctx(index uint64) *applyCtx {
	f.ax = applyCtx{index: index}
	if f.onChange != nil {
		f.ax.changes = &f.changes
	}
	return &f.ax
}

// notify delivers the collected changes; called under wmu, not under mu.
func (f *FSM) notify() {
	if len(f.changes) == 0 {
		return
	}
	for i := range f.changes {
		f.onChange(f.changes[i])
		f.changes[i] = Change{} // drop references
	}
	f.changes = f.changes[:0]
}

// Applies counts the changes of the state so far: each Apply, ApplyBatch
// and Restore adds one, under the write lock, once its changes are in
// place. Two equal readings mean that a read between them saw the state
// a read after them sees (the manager's submit looks at a key's entry
// again only when the count moved). O(1), without a lock.
func (f *FSM) Applies() uint64 { return f.mutations.Load() }

// Entry returns the entry of (tenant, key), if it is in the table. O(log n).
func (f *FSM) Entry(tenant, key string) (Entry, bool) {
	return lookup(f, func(s *state) index[*Entry] { return s.entries }, &Entry{Tenant: tenant, Key: key})
}

// Job returns the tenant's job with that ID, if it is in the job table.
// O(log n).
func (f *FSM) Job(tenant, id string) (Job, bool) {
	return lookup(f, func(s *state) index[*Job] { return s.jobs }, &Job{Tenant: tenant, ID: id})
}

// Watermark returns the watermark of a structured-key client, if any.
// O(log n).
func (f *FSM) Watermark(tenant, clientID, nonce string) (Watermark, bool) {
	return lookup(f, func(s *state) index[*Watermark] { return s.wms },
		&Watermark{Tenant: tenant, ClientID: clientID, Nonce: nonce})
}

// lookup returns a copy of the item equal to probe in the table of f's
// state that table picks (the state is replaced by Restore, so it is read
// under the lock), if there is one.
func lookup[T any](f *FSM, table func(*state) index[*T], probe *T) (T, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if item, ok := table(f.s).Get(probe); ok {
		return *item, true
	}
	var zero T
	return zero, false
}

// ListJobs returns a page of the tenant's jobs in Seq order (oldest first,
// newest last; with opts.Desc newest first), keeping those that match
// opts.Type and opts.Status and have Seq > opts.After (with opts.Desc, Seq <
// opts.After, or any Seq when opts.After is 0), at most the normalized opts.Limit of them (and, with
// opts.MaxBytes, at most that many bytes by ListJobBytes, but at least one
// job). next is the Seq
// of the last job returned (0 when none); more is true when at least one more
// matching job follows it, and then next is the cursor (opts.After) of the
// following page. Encoding next into an opaque cursor is the caller's business.
//
// A walk that skips jobs (a type filter within a state, the lifecycle's
// jobs for "committed", or the jobs Gone at opts.Now) ends after
// MaxListSkips of them: the page may then
// be short or empty, with more true and next the Seq of the last job
// skipped, so that a rare match behind a million others costs pages, never
// one call that holds the read lock (and Apply) for seconds.
//
// Cost: O(log n + limit) for n jobs in all tenants, with or without a type
// filter and without a status: it seeks in the (tenant, seq) index, or the
// (tenant, type, seq) index when opts.Type is set, and reads only matching
// jobs. With the status of a lifecycle state it seeks in the (tenant, state,
// seq) order, or for "running" the (tenant, seq) order of RUNNING jobs: O(log n + limit) without a type, plus the jobs of other types
// it skips with one. With api.JobStatusCommitted it walks as without a
// status and skips the lifecycle's jobs (O(log n + limit) while no job is in
// the lifecycle). Any other Status matches nothing and costs O(1). With
// opts.Now it also walks past the jobs Gone at it, few while the leader's
// Expire removes them as their time comes.
func (f *FSM) ListJobs(tenant string, opts ListOptions) (jobs []Job, next uint64, more bool) {
	limit := opts.Limit
	if limit <= 0 {
		limit = api.DefaultListLimit
	}
	limit = min(limit, api.MaxListLimit)
	state, byState := ParseJobState(opts.Status)
	if opts.Status != "" && !byState {
		return nil, 0, false
	}
	if (!opts.Desc && opts.After == math.MaxUint64) || (opts.Desc && opts.After == 1) {
		return nil, 0, false // no Seq follows (precedes) it
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	size, skipped := 0, 0
	skip := func(j *Job) bool {
		if skipped++; skipped == MaxListSkips {
			next, more = j.Seq, true
			return false
		}
		return true
	}
	visit := func(j *Job) bool {
		if j.Tenant != tenant {
			return false
		}
		if byState && state != JobLegacy && stateOf(j) != state {
			return false // the end of the (tenant, state) range
		}
		if opts.Type != "" && j.Type != opts.Type {
			// Skipped in the state order; the end of the type range.
			return byState && state != JobLegacy && skip(j)
		}
		if byState && stateOf(j) != state {
			return skip(j) // a lifecycle job, skipped for "committed"
		}
		if opts.Now > 0 && j.Gone(opts.Now) {
			return skip(j) // past its retention, not yet swept
		}
		n := ListJobBytes(j)
		if len(jobs) == limit || (opts.MaxBytes > 0 && len(jobs) > 0 && size+n > opts.MaxBytes) {
			next, more = jobs[len(jobs)-1].Seq, true
			return false
		}
		size += n
		jobs = append(jobs, *j)
		return true
	}
	// Seq 0 (no job has it) on the first page: the walk starts at its
	// group's least possible key, which lets the store keep the group's
	// floor (diskIndex.group). Newest first, the first page starts at the
	// greatest possible Seq.
	pivot := &Job{Tenant: tenant, Type: opts.Type, Seq: opts.After + 1}
	switch {
	case opts.Desc && opts.After == 0:
		pivot.Seq = math.MaxUint64
	case opts.Desc:
		pivot.Seq = opts.After - 1
	case opts.After == 0:
		pivot.Seq = 0
	}
	var idx index[*Job]
	switch {
	case state == JobRunning:
		idx = f.s.jobRunning
	case byState && state != JobLegacy:
		pivot.Life = &JobLife{State: state}
		idx = f.s.jobState
	case opts.Type == "":
		idx = f.s.jobSeq
	default:
		idx = f.s.jobType
	}
	if opts.Desc {
		idx.DescendLessOrEqual(pivot, visit)
	} else {
		idx.AscendGreaterOrEqual(pivot, visit)
	}
	if !more && len(jobs) > 0 {
		next = jobs[len(jobs)-1].Seq
	}
	return jobs, next, more
}

// MaxListSkips bounds the jobs one ListJobs call walks past without
// returning them (about 50 ms on disk, ~11 µs a job).
const MaxListSkips = 4096

// NextExpiry returns the earliest ExpiresAt (unix nanoseconds) of any entry or
// job, and false when there is none: the leader proposes Expire when its clock
// reaches it. Watermarks are not counted here: their expiry depends on the
// WatermarkTTL stamped in Expire (see OldestWatermark). O(log n).
func (f *FSM) NextExpiry() (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e, eok := minOf(f.s.entryExp, func(e *Entry) int64 { return e.ExpiresAt })
	j, jok := minOf(f.s.jobExp, func(j *Job) int64 { return j.ExpiresAt })
	if !eok || (jok && j < e) {
		return j, jok
	}
	return e, true
}

// minOf returns at of x's least item, false when x is empty.
func minOf[T any](x interface{ Min() (T, bool) }, at func(T) int64) (int64, bool) {
	if item, ok := x.Min(); ok {
		return at(item), true
	}
	return 0, false
}

// OldestWatermark returns the least UpdatedAt (unix nanoseconds) of any
// watermark, and false when there is none. An Expire removes the watermarks
// with UpdatedAt <= Now - WatermarkTTL whether or not an entry or a job is
// due, so the leader proposes one when the oldest is that old, as it does
// when NextExpiry is reached. O(log n).
func (f *FSM) OldestWatermark() (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return minOf(f.s.wmAge, func(w *Watermark) int64 { return w.UpdatedAt })
}

// HeldLeases returns the tenant's RUNNING jobs whose current lease ID
// starts with prefix and has not expired at now (unix nanoseconds), in
// lease-ID order: the leader answers a worker's retried lease with them
// (the manager makes the lease IDs of one request share a prefix). O(log n +
// found); n is the RUNNING jobs, whose lease IDs are in memory.
func (f *FSM) HeldLeases(tenant, prefix string, now int64) []Job {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.leaseHolders(nil, tenant, prefix, func(id string) bool { return strings.HasPrefix(id, prefix) }, now)
}

// Stats returns the counts of the state. O(1).
func (f *FSM) Stats() Stats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.s
	return Stats{
		Entries:      s.entries.Len(),
		Committed:    s.entryStates[StateCommitted],
		Rejected:     s.entryStates[StateRejected],
		Claimed:      s.entryStates[StateClaimed],
		Jobs:         s.jobs.Len(),
		Queued:       s.jobStates[JobQueued],
		Running:      s.jobStates[JobRunning],
		Succeeded:    s.jobStates[JobSucceeded],
		Failed:       s.jobStates[JobFailed],
		Dead:         s.jobStates[JobDead],
		Cancelled:    s.jobStates[JobCancelled],
		Watermarks:   s.wms.Len(),
		Bytes:        s.bytes,
		AppliedIndex: s.applied,
	}
}
