package ledger

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/google/btree"
	"github.com/once-dev/once/internal/ledger/engine"
)

// btreeDegree is the degree of every index (nodes of 31..63 items).
const btreeDegree = 32

// maxReliefRemovals bounds how many due entries one Admit removes to make
// room when the table is at MaxEntries, so an Admit stays O(log n).
const maxReliefRemovals = 8

// state is the whole replicated state. Every item in it (*Entry, *Job,
// *Watermark) is immutable once inserted: a change inserts a new item and
// deletes the old one. That is what lets Snapshot share items with a clone of
// the trees while Apply goes on.
//
// Indexes (github.com/google/btree, copy-on-write clonable, in memory; key
// ranges of the store on disk), each in its order (orders.go; the runKey
// orders in jobs.go):
//
//	entries      the entries
//	entryExp     expiry order
//	jobs         the job table
//	jobSeq       ListJobs
//	jobType      ListJobs with a type filter
//	jobExp       job retention (legacy and finished jobs)
//	jobQueue     QUEUED jobs: Lease (jobs.go)
//	jobQueueType QUEUED jobs: Lease with types
//	jobRunning   RUNNING jobs: ListJobs by status
//	jobState     QUEUED and finished jobs: ListJobs by status
//	jobLeaseID   RUNNING jobs: a Lease's replay (in memory for both stores)
//	jobDue       RUNNING jobs: Lease's reclaim (in memory for both stores)
//	jobLeaseExp  RUNNING jobs: ExpireLeases (in memory for both stores)
//	wms          watermarks
//	wmAge        watermark TTL and LRU bound (in memory for both stores)
//	multiDC      resolved multi-datacenter entries (outbox)
//	owed         expired entries the outbox still carries (owed.go)
type state struct {
	entries  index[*Entry]
	entryExp index[*Entry]
	jobs     index[*Job]
	jobSeq   index[*Job]
	jobType  index[*Job]
	jobExp   index[*Job]
	// The lifecycle's orders (jobs.go): a job is in them by its state; a
	// legacy job (Commit v1/v2) is in none.
	jobQueue     index[*Job]
	jobQueueType index[*Job]
	jobRunning   index[*Job]
	jobState     index[*Job]
	// jobLeaseID, jobDue and jobLeaseExp hold the runKey of each RUNNING job
	// in their orders: a Lease's replay, a Lease's reclaim, ExpireLeases.
	// They are in memory for the disk-backed state too (bounded by the jobs
	// running, small per job), rebuilt from jobRunning when the store is
	// opened (loadRunning): a lease's expiry, moved by every heartbeat, is
	// never written to pebble.
	jobLeaseID  *btree.BTreeG[runKey]
	jobDue      *btree.BTreeG[runKey]
	jobLeaseExp *btree.BTreeG[runKey]
	wms         index[*Watermark]
	wmAge       index[*Watermark]
	// multiDC holds the resolved entries whose request names several
	// datacenters, by (tenant, key): what the leader's outbox carries to the
	// others (FSM.ResolvedMultiDatacenter), without walking every entry.
	multiDC index[*Entry]
	// multiDCLen counts multiDC (on disk an order without a count).
	multiDCLen int
	// owed holds the entries that expired while multiDC held them (owed.go).
	owed index[*Entry]
	// owedLive counts the owed entries whose job has a live entry in
	// multiDC too (twinned): FSM.OutboxLen counts such a job once.
	owedLive int

	// store is the disk-backed state's store (nil in memory); dirtyTenants
	// are the tenants whose counters the open batch touched, with their
	// values before it: a counter is written only when it differs (a
	// tenant's watermark count changes with its clients, not with every
	// submission).
	store        *engine.Store
	knobs        TestingKnobs // the disk state's (StoreOptions.Knobs)
	dirtyTenants map[string]tenantCounts

	// wmTenant counts watermarks per tenant (looked up, never iterated).
	wmTenant map[string]int
	// bytes is the accounted size of entries and jobs (see entryBytes),
	// tenantBytes the same per tenant (looked up, never iterated).
	bytes       uint64
	tenantBytes map[string]uint64

	// entryStates counts entries by State: every entry.
	entryStates [StateClaimed + 1]int
	// jobStates counts jobs by JobState (JobLegacy included): every job.
	jobStates [JobCancelled + 1]int
	// applied is the raft index of the last command applied.
	applied uint64
	// ledgerTime is the highest Now of any command applied (time.go).
	ledgerTime int64
	// lastSeq is the highest job Seq given (batch.go, nextSeq).
	lastSeq uint64

	// probes for lookups on the apply path (used under the write lock only).
	entryProbe Entry
	jobProbe   Job
	wmProbe    Watermark
}

func newState() *state {
	return &state{
		entries:  btree.NewG(btreeDegree, entryOrder.less),
		entryExp: btree.NewG(btreeDegree, entryExpOrder.less),
		jobs:     btree.NewG(btreeDegree, jobOrder.less),
		jobSeq:   btree.NewG(btreeDegree, jobSeqOrder.less),
		jobType:  btree.NewG(btreeDegree, jobTypeOrder.less),
		jobExp:   btree.NewG(btreeDegree, jobExpOrder.less),

		jobQueue:     btree.NewG(btreeDegree, jobQueueOrder.less),
		jobQueueType: btree.NewG(btreeDegree, jobQueueTypeOrder.less),
		jobRunning:   btree.NewG(btreeDegree, jobRunningOrder.less),
		jobState:     btree.NewG(btreeDegree, jobStateOrder.less),
		jobLeaseID:   btree.NewG(btreeDegree, lessLeaseKey),
		jobDue:       btree.NewG(btreeDegree, lessDueKey),
		jobLeaseExp:  btree.NewG(btreeDegree, lessLeaseExp),

		wms:      btree.NewG(btreeDegree, watermarkOrder.less),
		wmAge:    btree.NewG(btreeDegree, watermarkAgeOrder.less),
		multiDC:  btree.NewG(btreeDegree, multiDCOrder.less),
		owed:     btree.NewG(btreeDegree, owedOrder.less),
		wmTenant: map[string]int{},

		tenantBytes: map[string]uint64{},
	}
}

// Byte accounting (docs/ledger.md): cheap and deterministic, from lengths in
// the commands. An entry costs EntryOverhead plus its payload; a job
// JobOverhead plus its payload. An Admit checks the bound against both,
// whatever its verdict.
const (
	// EntryOverhead is the accounted fixed size of an entry (struct, index
	// nodes, key, fingerprint and IDs, in memory and in snapshots).
	EntryOverhead = 512
	// JobOverhead is the accounted fixed size of a job.
	JobOverhead = 384
)

func jobBytes(payload int) uint64 { return JobOverhead + uint64(payload) }

// entryBytes is what an entry accounts for.
func entryBytes(payload int) uint64 { return EntryOverhead + uint64(payload) }

func (s *state) charge(tenant string, n uint64) {
	s.dirty(tenant)
	s.bytes += n
	if _, ok := s.tenantBytes[tenant]; !ok {
		tenant = strings.Clone(tenant) // kept as the map's key (decoder's share)
	}
	s.tenantBytes[tenant] += n
}

func (s *state) release(tenant string, n uint64) {
	s.dirty(tenant)
	s.bytes -= n
	if s.tenantBytes[tenant] -= n; s.tenantBytes[tenant] == 0 {
		delete(s.tenantBytes, tenant)
	}
}

// tenantCounts are a tenant's counters (accounted bytes, watermarks), and
// whether it had each.
type tenantCounts struct {
	bytes           uint64
	wms             int
	hasBytes, hasWM bool
}

func (s *state) tenantCounts(tenant string) tenantCounts {
	var c tenantCounts
	c.bytes, c.hasBytes = s.tenantBytes[tenant]
	c.wms, c.hasWM = s.wmTenant[tenant]
	return c
}

// dirty notes, before they change, a tenant's counters as the open batch
// found them (disk-backed state only; commit writes those that differ).
func (s *state) dirty(tenant string) {
	if s.dirtyTenants == nil {
		return
	}
	if _, ok := s.dirtyTenants[tenant]; !ok {
		s.dirtyTenants[tenant] = s.tenantCounts(tenant)
	}
}

// applyCtx carries what one command needs besides its body.
type applyCtx struct {
	index uint64
	// item is the position of the command in its batch (0 for a single): an
	// Admit's job takes its Seq as if at index+item (nextSeq).
	item    uint64
	changes *[]Change // nil: nobody listens
}

func (ax *applyCtx) emit(kind ChangeKind, e *Entry) {
	if ax.changes != nil {
		*ax.changes = append(*ax.changes, Change{Index: ax.index, Kind: kind, Entry: *e})
	}
}

// apply applies one decoded command. decodeErr is DecodeCommand's error.
func (s *state) apply(ax *applyCtx, cmd Command, decodeErr error) Result {
	if ax.index <= s.applied {
		return invalidf("log index %d is not after the applied index %d", ax.index, s.applied)
	}
	s.applied = ax.index
	if decodeErr != nil {
		return invalid(decodeErr)
	}
	return cmd.apply(s, ax)
}

func invalid(err error) Result { return Result{Outcome: OutcomeInvalid, Err: err} }

func invalidf(format string, args ...any) Result {
	return invalid(invalidErr(format, args...))
}

// invalidErr is the error of an invalid command: it matches ErrInvalidCommand.
func invalidErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidCommand}, args...)...)
}

func (s *state) getEntry(tenant, key string) (*Entry, bool) {
	s.entryProbe.Tenant, s.entryProbe.Key = tenant, key
	e, ok := s.entries.Get(&s.entryProbe)
	s.entryProbe = Entry{}
	return e, ok
}

func (s *state) getJob(tenant, id string) (*Job, bool) {
	s.jobProbe.Tenant, s.jobProbe.ID = tenant, id
	j, ok := s.jobs.Get(&s.jobProbe)
	s.jobProbe = Job{}
	return j, ok
}

func (s *state) getWatermark(tenant, clientID, nonce string) (*Watermark, bool) {
	s.wmProbe.Tenant, s.wmProbe.ClientID, s.wmProbe.Nonce = tenant, clientID, nonce
	w, ok := s.wms.Get(&s.wmProbe)
	s.wmProbe = Watermark{}
	return w, ok
}

// jobOf returns the job of a committed entry, if it is still in the table.
func (s *state) jobOf(e *Entry) Job {
	if e.State != StateCommitted {
		return Job{}
	}
	if j, ok := s.getJob(e.Tenant, e.JobID); ok {
		return *j
	}
	return Job{}
}

// carried reports whether an entry belongs in the multiDC order: naming
// another datacenter that has not confirmed it (a request names its own
// datacenter, which never confirms itself).
func carried(e *Entry) bool {
	return len(e.Confirmed) < len(e.Request.Datacenters)-1
}

func (s *state) insertEntry(e *Entry) {
	insert(s.entries, e)
	insert(s.entryExp, e)
	if carried(e) {
		insert(s.multiDC, e)
		s.multiDCLen++
		s.owedLive += b2i(s.hasOwed(e))
	}
	s.entryStates[e.State]++
	s.charge(e.Tenant, entryBytes(len(e.Request.Payload)))
}

// replaceEntry swaps old for e (same tenant and key).
func (s *state) replaceEntry(old, e *Entry) {
	s.entries.ReplaceOrInsert(e)
	reorder(s.entryExp, entryExpOrder.less, old, e, true, true)
	reorder(s.multiDC, multiDCOrder.less, old, e, carried(old), carried(e))
	s.multiDCLen += b2i(carried(e)) - b2i(carried(old))
	if carried(e) != carried(old) && s.hasOwed(e) { // old and e: the same job
		s.owedLive += b2i(carried(e)) - b2i(carried(old))
	}
	s.entryStates[old.State]--
	s.entryStates[e.State]++
	s.release(old.Tenant, entryBytes(len(old.Request.Payload)))
	s.charge(e.Tenant, entryBytes(len(e.Request.Payload)))
}

// reorder moves an item from old to item in one order of the state, where
// old is (inOld) and item is to be (inNew). When both have the same key in
// it, the write replaces old: on disk a delete is a tombstone that is
// written, flushed and compacted only to be shadowed by the next write (and
// an order on disk that holds primary keys writes nothing then:
// diskIndex.ReplaceOrInsert).
func reorder[T any](x index[T], less func(a, b T) bool, old, item T, inOld, inNew bool) {
	same := inOld && inNew && !less(old, item) && !less(item, old)
	if inOld && !same {
		x.Delete(old)
	}
	switch {
	case inNew && !same:
		insert(x, item) // not in x: never was, or just deleted under another key
	case inNew:
		x.ReplaceOrInsert(item)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// removeEntry removes an entry by expiry, with its effects: a COMMITTED
// structured entry raises its client's watermark, and one the outbox still
// carries stays owed (owed.go).
func (s *state) removeEntry(ax *applyCtx, e *Entry, now int64, rm *Removed) {
	s.entries.Delete(e)
	s.entryExp.Delete(e)
	s.entryStates[e.State]--
	s.release(e.Tenant, entryBytes(len(e.Request.Payload)))
	if carried(e) {
		s.multiDC.Delete(e)
		s.multiDCLen--
		s.owedLive -= b2i(s.hasOwed(e))
		s.owe(e)
	}
	switch e.State {
	case StateCommitted:
		rm.Committed++
		if e.Structured {
			s.raiseWatermark(e.Tenant, e.ClientID, e.Nonce, e.Sequence, now)
		}
	case StateRejected:
		rm.Rejected++
	case StateClaimed:
		rm.Claimed++
	}
	ax.emit(ChangeRemoved, e)
}

// raiseWatermark records seq as committed in the client's watermark, creating
// the watermark if needed (one aged out while its entry lived: the bound may
// be passed by those, as docs/ledger.md says).
func (s *state) raiseWatermark(tenant, clientID, nonce string, seq uint64, now int64) {
	w := &Watermark{Tenant: tenant, ClientID: clientID, Nonce: nonce, UpdatedAt: now}
	old, ok := s.wms.Get(w)
	if ok {
		*w = *old
		w.UpdatedAt = max(old.UpdatedAt, now)
	}
	w.record(seq)
	if ok {
		s.replaceWatermark(old, w)
	} else {
		s.insertWatermark(w)
	}
}

// touchWatermark creates the client's watermark (nothing committed) or
// refreshes its UpdatedAt.
func (s *state) touchWatermark(tenant, clientID, nonce string, now int64) {
	w := &Watermark{Tenant: tenant, ClientID: clientID, Nonce: nonce, UpdatedAt: now}
	old, ok := s.wms.Get(w)
	switch {
	case !ok:
		s.insertWatermark(w)
	case old.UpdatedAt < now:
		*w = *old
		w.UpdatedAt = now
		s.replaceWatermark(old, w)
	}
}

// replaceWatermark swaps old for w (same tenant, client and nonce); the
// tenant's count of watermarks does not change.
func (s *state) replaceWatermark(old, w *Watermark) {
	s.wms.ReplaceOrInsert(w)
	reorder(s.wmAge, watermarkAgeOrder.less, old, w, true, true)
}

func (s *state) insertWatermark(w *Watermark) {
	// Kept in memory (the mirror) while the client lasts: its own strings,
	// not parts of the command they were decoded from (decoder's share). A
	// replaced watermark keeps the strings of the one it replaces.
	w.Tenant, w.ClientID, w.Nonce = strings.Clone(w.Tenant), strings.Clone(w.ClientID), strings.Clone(w.Nonce)
	s.wms.ReplaceOrInsert(w)
	s.wmAge.ReplaceOrInsert(w)
	s.dirty(w.Tenant)
	s.wmTenant[w.Tenant]++
}

func (s *state) removeWatermark(w *Watermark) {
	s.wms.Delete(w)
	s.wmAge.Delete(w)
	s.dirty(w.Tenant)
	if s.wmTenant[w.Tenant]--; s.wmTenant[w.Tenant] <= 0 {
		delete(s.wmTenant, w.Tenant)
	}
}

func (s *state) insertJob(j *Job) {
	insert(s.jobs, j)
	insert(s.jobSeq, j)
	insert(s.jobType, j)
	s.reindexJob(nil, j)
	s.jobStates[stateOf(j)]++
	s.charge(j.Tenant, jobSize(j))
}

func (s *state) removeJob(j *Job) {
	s.jobs.Delete(j)
	s.jobSeq.Delete(j)
	s.jobType.Delete(j)
	s.reindexJob(j, nil)
	s.jobStates[stateOf(j)]--
	s.release(j.Tenant, jobSize(j))
}

// clip returns p with its capacity cut to its length, so an append by a reader
// never writes into memory the FSM shares.
func clip[T any](p []T) []T { return p[:len(p):len(p)] }

// answerLive answers a command that would take (tenant, key) from the
// entry the ledger holds for it while that entry lives: OutcomeExists with
// its job for the same fingerprint, OutcomeKeyReused for another. An expired
// entry is removed first (into res.Removed). It reports whether res holds
// the answer; false means the key is free.
func (s *state) answerLive(ax *applyCtx, tenant, key, fingerprint string, now int64, res *Result) bool {
	e, ok := s.getEntry(tenant, key)
	if !ok {
		return false
	}
	if e.ExpiresAt <= now {
		s.removeEntry(ax, e, now, &res.Removed)
		return false
	}
	res.Entry = *e
	if e.Fingerprint != fingerprint {
		res.Outcome = OutcomeKeyReused
		return true
	}
	res.Outcome = OutcomeExists
	res.Job = s.jobOf(e)
	return true
}

// check is Reserve's validation: an Admit with an invalid Reserve changes
// nothing.
func (c Reserve) check() error {
	switch {
	case c.Tenant == "" || c.Key == "" || c.JobID == "":
		return invalidErr("reserve: empty tenant, key or job ID")
	case c.MaxEntries == 0:
		return invalidErr("reserve: max_entries is 0")
	}
	return nil
}

// admissible runs an Admit's checks of its key (Reserve's semantics, 1-4)
// and reports whether the key is free for its entry; when it is not, res is
// the Admit's answer. Either way res.Removed counts what it removed.
func (s *state) admissible(ax *applyCtx, c Reserve) (res Result, free bool) {
	if s.answerLive(ax, c.Tenant, c.Key, c.Fingerprint, c.Now, &res) {
		return res, false
	}
	hasWatermark := false
	if c.Structured {
		w, ok := s.getWatermark(c.Tenant, c.ClientID, c.Nonce)
		hasWatermark = ok
		if ok && w.Refuses(c.Sequence) {
			res.Outcome = OutcomeKeyExpired
			res.Watermark = w.Sequence
			return res, false
		}
	}
	r := room{tenant: c.Tenant, cost: entryBytes(len(c.Request.Payload)) + jobBytes(len(c.Request.Payload)),
		maxEntries: c.MaxEntries, maxBytes: c.MaxBytes, maxTenantBytes: c.MaxTenantBytes}
	if res.Outcome = s.makeRoom(ax, r, c.Now, &res.Removed); res.Outcome != 0 {
		return res, false
	}
	if c.Structured && !hasWatermark {
		switch {
		case c.MaxWatermarks > 0 && uint64(s.wms.Len()) >= c.MaxWatermarks:
			res.Outcome = OutcomeWatermarksFull
			return res, false
		case c.MaxTenantWatermarks > 0 && uint64(s.wmTenant[c.Tenant]) >= c.MaxTenantWatermarks:
			res.Outcome = OutcomeTenantWatermarksFull
			return res, false
		}
	}
	return res, true
}

// room is what a new entry asks of the ledger's bounds: its cost in
// bytes, its tenant's, under a command's MaxEntries, MaxBytes and
// MaxTenantBytes (a zero byte bound is no bound). keepJob names a job of the
// tenant that relief must not remove (a Cancel's or Retry's own). replaces
// is a live entry of the tenant that the new one takes the place of (a
// Claim's over a claim that gives way): it is counted as gone, and the
// command removes it only once room is made, so a refusal leaves it.
type room struct {
	tenant                               string
	cost                                 uint64
	maxEntries, maxBytes, maxTenantBytes uint64
	keepJob                              string
	replaces                             *Entry
}

// makeRoom makes room for the entry r describes. Relief first: it removes
// due entries (and, while bytes are short, due jobs), earliest first, at
// most maxReliefRemovals, so a command stays O(log n), counting them in rm.
// Then it answers the refusal that still stands, the table's before the
// tenant's share, the tenant's before the ledger's bytes (the tenant's is
// its own, 429), or 0 when the entry fits.
func (s *state) makeRoom(ax *applyCtx, r room, now int64, rm *Removed) Outcome {
	var freed uint64 // the entry and the bytes of the one replaced
	if r.replaces != nil {
		freed = entryBytes(len(r.replaces.Request.Payload))
	}
	tenantOver := func() bool { return r.maxTenantBytes > 0 && s.tenantBytes[r.tenant]+r.cost > r.maxTenantBytes+freed }
	bytesOver := func() bool { return r.maxBytes > 0 && s.bytes+r.cost > r.maxBytes+freed }
	full := func() bool { return uint64(s.entries.Len()-b2i(r.replaces != nil)) >= r.maxEntries }
	for i := 0; i < maxReliefRemovals && (full() || tenantOver() || bytesOver()); i++ {
		if e, ok := s.entryExp.Min(); ok && e.ExpiresAt <= now {
			s.removeEntry(ax, e, now, rm)
			continue
		}
		if j, ok := s.jobExp.Min(); ok && j.ExpiresAt <= now && (tenantOver() || bytesOver()) &&
			(j.Tenant != r.tenant || j.ID != r.keepJob) {
			s.removeJob(j)
			rm.Jobs++
			continue
		}
		break
	}
	switch {
	case full():
		return OutcomeFull
	case tenantOver():
		return OutcomeTenantBytesFull
	case bytesOver():
		return OutcomeBytesFull
	}
	return 0
}

// newEntry is the entry an admissible Reserve makes, before its verdict is
// in it (not inserted). The Admit creates or touches a structured key's
// watermark once the verdict is applied (applyAdmit).
//
// An owed copy of the same job (owed.go: the key sent again after its entry
// expired, the same job ID) gives the entry its Confirmed, of the datacenters
// the request names: a confirmation is of the job, not of one copy, and an
// entry that started with none would be carried at once to a datacenter that
// confirmed the job already (TestReadmittedEntryKeepsTheOwedConfirmations).
// Whatever the verdict: a REJECTED entry is carried as well.
func (s *state) newEntry(c Reserve) *Entry {
	e := &Entry{
		Tenant:      c.Tenant,
		Key:         c.Key,
		Fingerprint: c.Fingerprint,
		JobID:       c.JobID,
		ReservedAt:  c.Now,
		Request: Request{
			Type:        c.Request.Type,
			Payload:     clip(c.Request.Payload),
			Datacenters: clip(c.Request.Datacenters),
		},
	}
	if c.ResultTTL > 0 {
		e.ResultTTL = c.ResultTTL
	}
	if c.Structured {
		e.Structured, e.ClientID, e.Sequence, e.Nonce = true, c.ClientID, c.Sequence, c.Nonce
	}
	if o, ok := s.owed.Get(&Entry{Tenant: c.Tenant, Key: c.Key, JobID: c.JobID}); ok {
		e.Confirmed = unionConfirmed(e.Request.Datacenters, o.Confirmed)
	}
	return e
}

// check is Commit's validation: an invalid Commit changes nothing.
func (c Commit) check() error {
	switch {
	case c.Tenant == "" || c.Key == "" || c.JobID == "":
		return invalidErr("commit: empty tenant, key or job ID")
	case c.ExpiresAt <= c.Now || c.JobExpiresAt <= c.Now:
		return invalidErr("commit: expires_at %d or job_expires_at %d not after now %d",
			c.ExpiresAt, c.JobExpiresAt, c.Now)
	case c.MaxJobs > 0 && c.RejectedExpiresAt <= c.Now:
		return invalidErr("commit: rejected_expires_at %d not after now %d", c.RejectedExpiresAt, c.Now)
	case c.Queue && c.JobExpiresAt-c.Now < 0:
		// After Now, so only an overflow wraps it: a negative retention
		// would make a job record that no decoder reads back.
		return invalidErr("commit: the retention from now %d to job_expires_at %d overflows", c.Now, c.JobExpiresAt)
	}
	return nil
}

// commitEntry inserts e (not yet in the state) COMMITTED by c with its job,
// or REJECTED when its job ID is in use or the jobs are at c.MaxJobs.
func (s *state) commitEntry(ax *applyCtx, e *Entry, c Commit) Result {
	var removed Removed
	old, taken := s.getJob(c.Tenant, c.JobID)
	if taken && old.Gone(c.Now) {
		// Its retention has ended (a read answers 404): removed first, as
		// Expire would, so that the answer does not depend on when the
		// last Expire ran.
		s.removeJob(old)
		removed.Jobs++
		taken = false
	}
	if taken {
		expires := c.RejectedExpiresAt
		if expires <= c.Now {
			expires = c.ExpiresAt
		}
		return s.rejectEntry(ax, e, Reject{Tenant: c.Tenant, Key: c.Key, JobID: c.JobID, Now: c.Now,
			ExpiresAt: expires, Status: 422, Reason: ReasonJobIDInUse, Detail: JobIDInUseDetail(c.JobID)})
	}
	if c.MaxJobs > 0 {
		for i := 0; i < maxReliefRemovals && uint64(s.unfinishedJobs()) >= c.MaxJobs; i++ {
			j, ok := s.jobExp.Min()
			if !ok || j.ExpiresAt > c.Now {
				break
			}
			s.removeJob(j)
			removed.Jobs++
		}
		if uint64(s.unfinishedJobs()) >= c.MaxJobs {
			res := s.rejectEntry(ax, e, Reject{Tenant: c.Tenant, Key: c.Key, JobID: c.JobID, Now: c.Now,
				ExpiresAt: c.RejectedExpiresAt, Status: 429, Reason: ReasonCapacity, Detail: c.CapacityDetail})
			res.Removed = removed
			return res
		}
	}
	e.State = StateCommitted
	e.ResolvedAt = c.Now
	e.ExpiresAt = c.ExpiresAt
	s.insertEntry(e)
	j := &Job{
		ID:          e.JobID,
		Tenant:      e.Tenant,
		Key:         e.Key,
		Type:        e.Request.Type,
		Payload:     e.Request.Payload,
		Datacenters: e.Request.Datacenters,
		CreatedAt:   c.Now,
		Seq:         s.nextSeq(ax.index + ax.item),
		ExpiresAt:   c.JobExpiresAt,
	}
	if c.Queue { // the lifecycle
		j.ExpiresAt = 0
		j.Life = &JobLife{State: JobQueued, RunAt: c.Now, Retention: c.JobExpiresAt - c.Now}
	}
	s.insertJob(j)
	if e.Structured {
		// The sequence is recorded at commit, so the window knows it
		// whether or not the entry is still live.
		s.raiseWatermark(e.Tenant, e.ClientID, e.Nonce, e.Sequence, c.Now)
	}
	ax.emit(ChangeCommitted, e)
	return Result{Outcome: OutcomeCommitted, Entry: *e, Job: *j, Removed: removed}
}

// check is Reject's validation: an invalid Reject changes nothing.
func (c Reject) check() error {
	switch {
	case c.Tenant == "" || c.Key == "" || c.JobID == "":
		return invalidErr("reject: empty tenant, key or job ID")
	case c.ExpiresAt <= c.Now:
		return invalidErr("reject: expires_at %d not after now %d", c.ExpiresAt, c.Now)
	case c.Status < 400 || c.Status > 599:
		return invalidErr("reject: status %d outside 400-599", c.Status)
	}
	return nil
}

// rejectEntry inserts e (not yet in the state) REJECTED by c.
func (s *state) rejectEntry(ax *applyCtx, e *Entry, c Reject) Result {
	e.State = StateRejected
	e.ResolvedAt = c.Now
	e.ExpiresAt = c.ExpiresAt
	e.Status, e.Reason, e.Detail = c.Status, c.Reason, c.Detail
	s.insertEntry(e)
	ax.emit(ChangeRejected, e)
	return Result{Outcome: OutcomeRejected, Entry: *e}
}

func (c Expire) apply(s *state, ax *applyCtx) Result {
	res := Result{Outcome: OutcomeExpired}
	budget, limited := c.MaxRemovals, c.MaxRemovals != 0
	// take spends one removal of the budget; false (and More) when it is spent.
	take := func() bool {
		if !limited {
			return true
		}
		if budget == 0 {
			res.More = true
			return false
		}
		budget--
		return true
	}
	if removeDue(s.entryExp, func(e *Entry) bool { return e.ExpiresAt <= c.Now }, take,
		func(e *Entry) { s.removeEntry(ax, e, c.Now, &res.Removed) }) {
		removeDue(s.jobExp, func(j *Job) bool { return j.ExpiresAt <= c.Now }, take,
			func(j *Job) { s.removeJob(j); res.Removed.Jobs++ })
	}
	if c.WatermarkTTL > 0 {
		cutoff := satSub(c.Now, int64(c.WatermarkTTL))
		removeDue(s.wmAge, func(w *Watermark) bool { return w.UpdatedAt <= cutoff }, take,
			func(w *Watermark) { s.removeWatermark(w); res.Removed.Watermarks++ })
	}
	return res
}

// dueChunk is how many due items removeDue reads in one walk of an order.
const dueChunk = 256

// removeDue removes the due items at the front of order, earliest first, as
// long as take allows; it reports whether it reached the first item not due
// (false: take refused). It reads the order in walks of dueChunk items and
// removes them after each walk (an order is not changed while walked): on
// disk one iterator per walk, where taking the least item each time would
// open one per item.
func removeDue[T any](order index[T], due func(T) bool, take func() bool, remove func(T)) bool {
	chunk := make([]T, 0, dueChunk)
	for {
		chunk = chunk[:0]
		order.Ascend(func(item T) bool {
			if !due(item) {
				return false
			}
			chunk = append(chunk, item)
			return len(chunk) < dueChunk
		})
		for i, item := range chunk {
			if !take() {
				removedFront(order, chunk[:i])
				return false
			}
			remove(item)
		}
		removedFront(order, chunk)
		if len(chunk) < dueChunk {
			return true
		}
	}
}

func (c Confirm) apply(s *state, _ *applyCtx) Result {
	res := Result{Outcome: OutcomeConfirmed, Items: make([]Result, len(c.Items))}
	for i, it := range c.Items {
		res.Items[i] = s.confirm(it)
	}
	return res
}

func (s *state) confirm(it Confirmation) Result {
	if it.Tenant == "" || it.Key == "" || it.JobID == "" || it.Datacenter == "" {
		return invalidf("confirm: empty tenant, key, job ID or datacenter")
	}
	old, ok := s.getEntry(it.Tenant, it.Key)
	live := ok && old.JobID == it.JobID
	if live {
		if owed, ok := s.owed.Get(&Entry{Tenant: it.Tenant, Key: it.Key, JobID: it.JobID}); ok {
			return s.confirmBoth(old, owed, it)
		}
	}
	// An owed entry of the job (owed.go), with no live entry of the job.
	if res, owed := s.confirmOwed(it); owed {
		return res
	}
	if !ok {
		return Result{Outcome: OutcomeNotFound}
	}
	if !live {
		return Result{Outcome: OutcomeUnchanged, Entry: *old}
	}
	e, res := confirmed(old, it)
	if e != nil {
		s.replaceEntry(old, e)
	}
	return res
}

// confirmBoth is Confirm's item for a job with a live entry and an owed one
// (the same request sent again after its entry expired: the same job ID). A
// confirmation is of the job, not of one copy: both copies get the union of
// their Confirmed and it.Datacenter. The live entry was admitted with the
// owed copy's Confirmed (newEntry), so both lists are the same one and stay
// so: the outbox, which carries the live entry instead of the owed copy only
// for the datacenters the live entry is carried to, never carries the owed
// copy beside it, and the Confirm that clears one clears the other. Confirming
// the live entry alone would let the owed copy lag: carried to a datacenter
// that confirmed the live entry, and carried alone once the live entry is
// clear. The union repairs a pair whose lists differ (kept in a state
// written before the Admit copied them), so that clearing the owed copy never
// leaves the live one carried to a datacenter only the owed copy recorded.
// The item's answer is the live entry's: OutcomeConfirmed when its Confirmed
// grew.
func (s *state) confirmBoth(old, owed *Entry, it Confirmation) Result {
	if !slices.Contains(old.Request.Datacenters, it.Datacenter) {
		return invalidf("confirm: %s/%s does not name datacenter %q", it.Tenant, it.Key, it.Datacenter)
	}
	all := unionConfirmed(old.Request.Datacenters, old.Confirmed, owed.Confirmed, []string{it.Datacenter})
	if of := unionConfirmed(owed.Request.Datacenters, all, owed.Confirmed); !slices.Equal(of, owed.Confirmed) {
		o := *owed
		o.Confirmed = of
		if carried(&o) {
			s.insertOwed(&o) // same key: the write replaces owed
		} else {
			s.deleteOwed(owed)
		}
	}
	if slices.Equal(all, old.Confirmed) {
		return Result{Outcome: OutcomeUnchanged, Entry: *old}
	}
	e := *old
	e.Confirmed = clip(slices.Clone(all))
	s.replaceEntry(old, &e)
	return Result{Outcome: OutcomeConfirmed, Entry: e}
}

// unionConfirmed is the sorted set of the datacenters in lists that named
// names (an entry's Request.Datacenters): a Confirmed (confirmedValid) for
// an entry of that request.
func unionConfirmed(named []string, lists ...[]string) []string {
	var all []string
	for _, l := range lists {
		for _, dc := range l {
			if slices.Contains(named, dc) {
				all = append(all, dc)
			}
		}
	}
	slices.Sort(all)
	return clip(slices.Compact(all))
}

// confirmed is old with it.Datacenter added to its Confirmed (a new entry,
// and the item's OutcomeConfirmed), or nil and the item's answer when that
// is not to be: invalid for a datacenter the request does not name,
// OutcomeUnchanged for one confirmed already. A live entry and an owed one
// (owed.go) are confirmed alike.
func confirmed(old *Entry, it Confirmation) (*Entry, Result) {
	if !slices.Contains(old.Request.Datacenters, it.Datacenter) {
		return nil, invalidf("confirm: %s/%s does not name datacenter %q", it.Tenant, it.Key, it.Datacenter)
	}
	at, found := slices.BinarySearch(old.Confirmed, it.Datacenter)
	if found {
		return nil, Result{Outcome: OutcomeUnchanged, Entry: *old}
	}
	e := *old
	e.Confirmed = clip(slices.Insert(slices.Clone(old.Confirmed), at, it.Datacenter))
	return &e, Result{Outcome: OutcomeConfirmed, Entry: e}
}

// satSub returns a-b (b > 0), saturating at math.MinInt64.
func satSub(a, b int64) int64 {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}
