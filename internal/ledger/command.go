package ledger

import (
	"fmt"
	"time"
)

// CommandType is the first byte of every command: what the command is.
type CommandType uint8

// Command types. The values are part of the raft log format and never change.
// 0x01-0x03 and 0x06 are no command: they are refused in the log as any
// type this build does not know (they were a Reserve, a Commit, a Reject and
// a batch of Commits and Rejects of their own entries before 1.0; Reserve,
// Commit and Reject are an Admit's parts now, admit.go).
const (
	TypeExpire CommandType = 0x04
	// TypeConfirm is ignorable: an older replica may skip it (it records the
	// outbox's progress, which only saves replays).
	TypeConfirm CommandType = 0x07 | TypeIgnorable
	// The job lifecycle (jobs.go). Not ignorable: they change the state.
	TypeLease        CommandType = 0x08
	TypeHeartbeat    CommandType = 0x09
	TypeComplete     CommandType = 0x0A
	TypeFail         CommandType = 0x0B
	TypeExpireLeases CommandType = 0x0C
	// Claims of an omitted datacenters list in a federation (claim.go). Not
	// ignorable: they change the state.
	TypeClaim   CommandType = 0x0F
	TypeRelease CommandType = 0x10
	// A tenant's actions on its jobs (actions.go). Not ignorable: they
	// change the state.
	TypeCancel CommandType = 0x11
	TypeRetry  CommandType = 0x12

	// TypeIgnorable is a flag bit of the type byte. A replica that does not know
	// a type with this bit set ignores the command (OutcomeIgnored) instead of
	// failing it, so a later version can add commands that older replicas may
	// safely skip during a rolling upgrade (Nomad's IgnoreUnknownTypeFlag).
	TypeIgnorable CommandType = 0x80
)

// FormatVersion is the version of the ledger's one format (1.0): the second
// byte of every command, the byte after the snapshot's magic, and the store's
// format (docs/ledger.md, "Formats"). Encode writes it; DecodeCommand reads
// no other, so an entry of another version halts the replica (HaltError)
// rather than being skipped or misread.
const FormatVersion uint8 = 1

func (t CommandType) String() string {
	if k, ok := commandKinds[t]; ok {
		return k.name
	}
	return fmt.Sprintf("type(0x%02x)", uint8(t))
}

// Command is one of Admit, Expire, AdmitBatch, WorkerBatch, Confirm, Lease,
// Heartbeat, Complete, Fail, ExpireLeases, Claim, Release, Cancel, Retry (and
// Unknown, which DecodeCommand returns for an ignorable type it does not
// know). Encode turns a Command into the bytes to pass to raft.Apply.
type Command interface {
	// CommandType is the type byte.
	CommandType() CommandType
	appendBody(b []byte) []byte
	sizeHint() int
	// apply applies the command (a single command, or an item of a batch)
	// once state.apply has checked its index.
	apply(s *state, ax *applyCtx) Result
}

// Reserve is an Admit's first part: the key's admission checks, and the
// entry's request. It is not a command of its own (admit.go).
//
// Semantics, in this order:
//  1. An entry of the key that is due (ExpiresAt <= Now) is removed first, with
//     exactly Expire's effects, so the answer never depends on when the last
//     Expire ran.
//  2. A live entry with the same Fingerprint: OutcomeExists; another
//     fingerprint: OutcomeKeyReused. Both return the entry; nothing changes.
//  3. A structured key whose Sequence is known committed (inside its client's
//     watermark window with its bit set) or below the window:
//     OutcomeKeyExpired; nothing changes.
//  4. When the table holds MaxEntries entries or more, due entries are removed
//     earliest first (at most a few per Admit); if it is still at the bound:
//     OutcomeFull, and nothing else changes (the byte bounds likewise: room).
//     A live entry is never dropped.
//  5. A structured key's client without a watermark gets one, unless the
//     table holds MaxWatermarks (OutcomeWatermarksFull) or the tenant
//     MaxTenantWatermarks (OutcomeTenantWatermarksFull); nothing is evicted
//     for it.
//  6. Otherwise the key is free: the Admit's verdict makes its entry.
type Reserve struct {
	Tenant      string
	Key         string
	Fingerprint string
	// JobID is decided by the leader; it must be unique per reservation.
	JobID string
	// Now is the leader's clock (unix nanoseconds).
	Now int64
	// MaxEntries is the bound on entries (IDEMPOTENCY_LEDGER_MAX_ENTRIES); at least 1.
	MaxEntries uint64
	Request    Request
	// Structured marks a <client_id>:<sequence>:<nonce> key. When it is false,
	// ClientID, Sequence and Nonce are not encoded.
	Structured bool
	ClientID   string
	Sequence   uint64
	Nonce      string

	// Every bound is 0 for "no bound". MaxWatermarks bounds the watermark table (IDEMPOTENCY_WATERMARK_MAX_CLIENTS),
	// MaxTenantWatermarks one tenant's watermarks.
	MaxWatermarks       uint64
	MaxTenantWatermarks uint64
	// MaxBytes bounds the bytes of entries and jobs, payloads included
	// (IDEMPOTENCY_LEDGER_MAX_BYTES), MaxTenantBytes one tenant's bytes.
	MaxBytes       uint64
	MaxTenantBytes uint64
	// ResultTTL, when positive, is the COMMITTED or REJECTED lifetime of the
	// key, fixed at its first admission and stored in the entry.
	ResultTTL time.Duration
}

// Commit is an Admit's verdict that admits the job: the entry becomes
// COMMITTED and the job is created (Seq = the command's raft index, CreatedAt =
// Now, retained until JobExpiresAt).
//
// Capacity is decided here, atomically: when MaxJobs is not 0 and
// the job table holds MaxJobs unfinished jobs or more (after removing up to a
// few due jobs), the entry becomes REJECTED with status 429, reason
// "capacity", CapacityDetail and ExpiresAt = RejectedExpiresAt:
// OutcomeRejected, no job. Unfinished: every job but the SUCCEEDED, FAILED,
// DEAD and CANCELLED ones.
//
// With Queue the job is created QUEUED (State JobQueued, RunAt = Now,
// Retention = JobExpiresAt - Now): it is leased by workers and stays until it
// finishes, then for its retention. Without, it is a JobLegacy job, retained
// until JobExpiresAt, in none of the lifecycle's orders.
type Commit struct {
	Tenant string
	Key    string
	JobID  string
	// Now is the commit time; ExpiresAt = Now + the committed TTL; JobExpiresAt
	// = Now + the job retention. Both must be after Now, and with Queue the
	// retention (JobExpiresAt - Now) must fit in an int64.
	Now          int64
	ExpiresAt    int64
	JobExpiresAt int64
	// MaxJobs is the bound on the job table (MANAGER_MAX_QUEUED_JOBS); 0: none.
	MaxJobs uint64
	// RejectedExpiresAt (Now + the rejected TTL) and CapacityDetail make the
	// capacity rejection; RejectedExpiresAt must be after Now when MaxJobs > 0.
	RejectedExpiresAt int64
	CapacityDetail    string
	// Queue creates the job in the worker lifecycle. See QueueCommit.
	Queue bool
}

// QueueCommit returns c with Queue set: its job is QUEUED for the workers
// instead of committed outside the lifecycle (MANAGER_JOB_QUEUE).
func QueueCommit(c Commit) Commit {
	c.Queue = true
	return c
}

// ReasonCapacity is the Reason of a capacity rejection (status 429).
const ReasonCapacity = "capacity"

// Reject is an Admit's verdict that refuses the job: the entry becomes
// REJECTED, storing Status, Reason and Detail.
type Reject struct {
	Tenant string
	Key    string
	JobID  string
	// Now is the rejection time; ExpiresAt = Now + the rejected TTL; it must be
	// after Now.
	Now       int64
	ExpiresAt int64
	// Status is the HTTP status of the rejection: 422 (validation) or 429
	// (capacity); the ledger accepts 400–599.
	Status int
	// Reason is a short code ("capacity", "invalid_payload"); Detail is text.
	Reason string
	Detail string
}

// Expire removes, in this order and at most MaxRemovals things in all (0: no
// limit):
//   - entries with ExpiresAt <= Now, earliest first (ties by tenant, key). A
//     COMMITTED structured entry records its Sequence in its client's watermark;
//   - jobs with ExpiresAt <= Now, earliest first (ties by Seq);
//   - watermarks not updated for WatermarkTTL (UpdatedAt <= Now-WatermarkTTL),
//     least recently updated first; WatermarkTTL <= 0 disables this.
//
// A live watermark is never evicted; a full table refuses at an Admit.
//
// Result.Removed counts each kind; Result.More is set when MaxRemovals stopped
// it while something was still due.
type Expire struct {
	Now          int64
	MaxRemovals  uint64
	WatermarkTTL time.Duration
}

// Unknown is a command of an ignorable type (TypeIgnorable set) that this
// build does not know. Apply ignores it. Encode writes it back as it was read.
type Unknown struct {
	Type    CommandType
	Version uint8
	Body    []byte
}

func (Expire) CommandType() CommandType    { return TypeExpire }
func (u Unknown) CommandType() CommandType { return u.Type }

func (c Expire) stamp() int64 { return c.Now }

// Encode returns the bytes of c (type byte, version byte, body), ready for
// raft.Apply. It never fails: every value of a command type has an encoding.
func Encode(c Command) []byte {
	return AppendCommand(make([]byte, 0, 2+c.sizeHint()), c)
}

// AppendCommand appends the encoding of c to b.
func AppendCommand(b []byte, c Command) []byte {
	v := FormatVersion
	if u, ok := c.(Unknown); ok {
		v = u.Version
	}
	b = append(b, byte(c.CommandType()), v)
	return c.appendBody(b)
}

const varintSize = 10

func (r Reserve) sizeHint() int {
	return len(r.Tenant) + len(r.Key) + len(r.Fingerprint) + len(r.JobID) +
		len(r.Request.Type) + len(r.Request.Payload) + sizeStrings(r.Request.Datacenters) +
		len(r.ClientID) + len(r.Nonce) + 16*varintSize + 16
}

// Reserve body:
//
//	tenant string, key string, fingerprint string, job_id string,
//	now int64, max_entries uvarint,
//	type string, payload bytes, datacenters strings,
//	structured bool, [client_id string, sequence uvarint, nonce string],
//	max_watermarks uvarint, max_tenant_watermarks uvarint,
//	max_bytes uvarint, max_tenant_bytes uvarint, result_ttl int64 (nanoseconds)
func (r Reserve) appendBody(b []byte) []byte {
	b = appendString(b, r.Tenant)
	b = appendString(b, r.Key)
	b = appendString(b, r.Fingerprint)
	b = appendString(b, r.JobID)
	b = appendInt64(b, r.Now)
	b = appendUvarint(b, r.MaxEntries)
	b = appendString(b, r.Request.Type)
	b = appendBytes(b, r.Request.Payload)
	b = appendStrings(b, r.Request.Datacenters)
	b = appendBool(b, r.Structured)
	if r.Structured {
		b = appendString(b, r.ClientID)
		b = appendUvarint(b, r.Sequence)
		b = appendString(b, r.Nonce)
	}
	b = appendUvarint(b, r.MaxWatermarks)
	b = appendUvarint(b, r.MaxTenantWatermarks)
	b = appendUvarint(b, r.MaxBytes)
	b = appendUvarint(b, r.MaxTenantBytes)
	return appendInt64(b, int64(r.ResultTTL))
}

func decodeReserve(d *decoder) Reserve {
	r := Reserve{Tenant: d.string(), Key: d.string(), Fingerprint: d.string(), JobID: d.string(), Now: d.int64(),
		MaxEntries: d.uvarint(), Request: Request{Type: d.string(), Payload: d.bytes(), Datacenters: d.strings()},
		Structured: d.bool()}
	if r.Structured {
		r.ClientID, r.Sequence, r.Nonce = d.string(), d.uvarint(), d.string()
	}
	r.MaxWatermarks, r.MaxTenantWatermarks = d.uvarint(), d.uvarint()
	r.MaxBytes, r.MaxTenantBytes = d.uvarint(), d.uvarint()
	r.ResultTTL = time.Duration(d.int64())
	return r
}

func (c Commit) sizeHint() int {
	return len(c.Tenant) + len(c.Key) + len(c.JobID) + len(c.CapacityDetail) + 5*varintSize + 33
}

// Commit body:
//
//	tenant string, key string, job_id string,
//	now int64, expires_at int64, job_expires_at int64,
//	max_jobs uvarint, rejected_expires_at int64, capacity_detail string,
//	queue bool
func (c Commit) appendBody(b []byte) []byte {
	b = appendString(b, c.Tenant)
	b = appendString(b, c.Key)
	b = appendString(b, c.JobID)
	b = appendInt64(b, c.Now)
	b = appendInt64(b, c.ExpiresAt)
	b = appendInt64(b, c.JobExpiresAt)
	b = appendUvarint(b, c.MaxJobs)
	b = appendInt64(b, c.RejectedExpiresAt)
	b = appendString(b, c.CapacityDetail)
	return appendBool(b, c.Queue)
}

func decodeCommit(d *decoder) Commit {
	return Commit{Tenant: d.string(), Key: d.string(), JobID: d.string(), Now: d.int64(), ExpiresAt: d.int64(),
		JobExpiresAt: d.int64(), MaxJobs: d.uvarint(), RejectedExpiresAt: d.int64(), CapacityDetail: d.string(), Queue: d.bool()}
}

func (r Reject) sizeHint() int {
	return len(r.Tenant) + len(r.Key) + len(r.JobID) + len(r.Reason) + len(r.Detail) +
		6*varintSize + 16
}

// Reject body:
//
//	tenant string, key string, job_id string, now int64, expires_at int64,
//	status uvarint, reason string, detail string
//
// A Status outside 0–65535 is encoded as 0 (and then refused by Apply).
func (r Reject) appendBody(b []byte) []byte {
	b = appendString(b, r.Tenant)
	b = appendString(b, r.Key)
	b = appendString(b, r.JobID)
	b = appendInt64(b, r.Now)
	b = appendInt64(b, r.ExpiresAt)
	st := uint64(0)
	if r.Status > 0 && r.Status <= 0xFFFF {
		st = uint64(r.Status)
	}
	b = appendUvarint(b, st)
	b = appendString(b, r.Reason)
	return appendString(b, r.Detail)
}

func decodeReject(d *decoder) Reject {
	return Reject{Tenant: d.string(), Key: d.string(), JobID: d.string(), Now: d.int64(), ExpiresAt: d.int64(),
		Status: d.status(), Reason: d.string(), Detail: d.string()}
}

func (Expire) sizeHint() int { return 2*varintSize + 16 }

// Expire body:
//
//	now int64, max_removals uvarint, watermark_ttl int64 (nanoseconds)
func (e Expire) appendBody(b []byte) []byte {
	b = appendInt64(b, e.Now)
	b = appendUvarint(b, e.MaxRemovals)
	return appendInt64(b, int64(e.WatermarkTTL))
}

func decodeExpire(d *decoder) Expire {
	return Expire{Now: d.int64(), MaxRemovals: d.uvarint(), WatermarkTTL: time.Duration(d.int64())}
}

// Confirm records, for resolved multi-datacenter entries, that another named
// datacenter holds a final outcome for the same request: the outbox's
// progress, so a new leader does not carry those again (docs/multidc.md). It
// carries no time and changes nothing but Entry.Confirmed. The command's
// outcome is OutcomeConfirmed; per item, in order (Result.Items):
// OutcomeConfirmed; OutcomeUnchanged when the datacenter
// was confirmed already, or the entry is not resolved with that JobID;
// OutcomeNotFound without an entry; OutcomeInvalid (the item only) for an
// empty field or a datacenter the request does not name.
type Confirm struct {
	Items []Confirmation
}

// Confirmation is one item of Confirm.
type Confirmation struct {
	Tenant, Key, JobID, Datacenter string
}

func (Confirm) CommandType() CommandType { return TypeConfirm }

func (c Confirm) sizeHint() int {
	n := varintSize
	for _, it := range c.Items {
		n += len(it.Tenant) + len(it.Key) + len(it.JobID) + len(it.Datacenter) + 4*varintSize
	}
	return n
}

// Confirm body:
//
//	count uvarint, then count × (tenant string, key string, job_id string,
//	datacenter string)
func (c Confirm) appendBody(b []byte) []byte {
	b = appendUvarint(b, uint64(len(c.Items)))
	for _, it := range c.Items {
		b = appendString(b, it.Tenant)
		b = appendString(b, it.Key)
		b = appendString(b, it.JobID)
		b = appendString(b, it.Datacenter)
	}
	return b
}

func decodeConfirm(d *decoder) Confirm {
	n := d.length(4) // each item is at least four empty strings
	c := Confirm{Items: make([]Confirmation, 0, n)}
	for i := 0; i < n && d.err == nil; i++ {
		c.Items = append(c.Items, Confirmation{Tenant: d.string(), Key: d.string(), JobID: d.string(), Datacenter: d.string()})
	}
	return c
}

func (u Unknown) sizeHint() int                { return len(u.Body) }
func (u Unknown) appendBody(b []byte) []byte   { return append(b, u.Body...) }
func (Unknown) apply(*state, *applyCtx) Result { return Result{Outcome: OutcomeIgnored} }

// DecodeCommand decodes the bytes of a raft log entry. It never panics, and the
// returned command never aliases data. Errors match:
//   - ErrMalformed: shorter than the two header bytes, or a body that does not
//     decode exactly (truncated, bad varint, trailing bytes, ...);
//   - ErrUnknownCommand: a type this build does not know, TypeIgnorable clear;
//   - ErrUnsupportedVersion: a known type whose version is not FormatVersion.
//
// An unknown type with TypeIgnorable set decodes as Unknown, without error,
// whatever its version and body.
func DecodeCommand(data []byte) (Command, error) { return decodeCommand(data, false) }

// decodeCommand is DecodeCommand; with share, the strings of each command
// (of each item of a batch) are parts of one copy of its bytes (decoder).
func decodeCommand(data []byte, share bool) (Command, error) {
	if len(data) < 2 {
		return nil, fmt.Errorf("%w: %d bytes, want a 2-byte header", ErrMalformed, len(data))
	}
	t, v := CommandType(data[0]), data[1]
	kind, known := commandKinds[t]
	switch {
	case !known && t&TypeIgnorable != 0:
		return Unknown{Type: t, Version: v, Body: append([]byte(nil), data[2:]...)}, nil
	case !known:
		return nil, fmt.Errorf("%w: %s version %d", ErrUnknownCommand, t, v)
	case v != FormatVersion:
		return nil, fmt.Errorf("%w: %s version %d, this build reads version %d", ErrUnsupportedVersion, t, v, FormatVersion)
	}
	d := &decoder{b: data, off: 2, base: ErrMalformed, share: share}
	c := kind.decode(d)
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%s v%d: %w", t, v, err)
	}
	return c, nil
}

// commandKind is what this build knows of a command type: its name, and how
// its body decodes (at FormatVersion).
type commandKind struct {
	name   string
	decode func(*decoder) Command
}

// commandKinds are the command types this build knows (set in init: the
// batches' decoders refer to the table).
var commandKinds map[CommandType]commandKind

func init() {
	commandKinds = map[CommandType]commandKind{
		TypeExpire:       {"expire", func(d *decoder) Command { return decodeExpire(d) }},
		TypeAdmit:        {"admit", func(d *decoder) Command { return decodeAdmit(d) }},
		TypeAdmitBatch:   {"admit_batch", func(d *decoder) Command { return AdmitBatch{Items: decodeItems(d, admitItem)} }},
		TypeWorkerBatch:  {"worker_batch", func(d *decoder) Command { return WorkerBatch{Items: decodeItems(d, workerItem)} }},
		TypeConfirm:      {"confirm", func(d *decoder) Command { return decodeConfirm(d) }},
		TypeLease:        {"lease", func(d *decoder) Command { return decodeLease(d) }},
		TypeHeartbeat:    {"heartbeat", func(d *decoder) Command { return decodeHeartbeat(d) }},
		TypeComplete:     {"complete", func(d *decoder) Command { return decodeComplete(d) }},
		TypeFail:         {"fail", func(d *decoder) Command { return decodeFail(d) }},
		TypeExpireLeases: {"expire_leases", func(d *decoder) Command { return decodeExpireLeases(d) }},
		TypeClaim:        {"claim", func(d *decoder) Command { return decodeClaim(d) }},
		TypeRelease:      {"release", func(d *decoder) Command { return decodeRelease(d) }},
		TypeCancel:       {"cancel", func(d *decoder) Command { return Cancel{decodeJobAction(d)} }},
		TypeRetry:        {"retry", func(d *decoder) Command { return Retry{decodeJobAction(d)} }},
	}
}
