package ledger

import (
	"fmt"
	"time"
)

// CommandType is the first byte of every command: what the command is.
type CommandType uint8

// Command types. The values are part of the raft log format and never change.
const (
	TypeReserve CommandType = 0x01
	TypeCommit  CommandType = 0x02
	TypeReject  CommandType = 0x03
	TypeExpire  CommandType = 0x04
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

	// TypeIgnorable is a flag bit of the type byte. A replica that does not know
	// a type with this bit set ignores the command (OutcomeIgnored) instead of
	// failing it, so a later version can add commands that older replicas may
	// safely skip during a rolling upgrade (Nomad's IgnoreUnknownTypeFlag).
	TypeIgnorable CommandType = 0x80
)

// Current command versions, the second byte of every command. Encode always
// writes these; DecodeCommand reads these and every older version still in any
// log.
const (
	ReserveVersion uint8 = 2
	// CommitVersion is the newest Commit: version 3 queues the job (the
	// worker lifecycle). A Commit without Queue still encodes as version 2
	// (CommitLegacyVersion), the job outside the lifecycle, so a manager can
	// go on proposing it until the worker endpoints exist.
	CommitVersion       uint8 = 3
	CommitLegacyVersion uint8 = 2
	RejectVersion       uint8 = 1
	ExpireVersion       uint8 = 2
	ConfirmVersion      uint8 = 1

	// LeaseVersion is the newest Lease: version 2 adds Replay, version 3
	// MaxBytes. A Lease encodes as the oldest version that carries what it
	// sets: without MaxBytes as version 2 (LeaseReplayVersion) with Replay,
	// else as version 1 (LeaseLegacyVersion), byte for byte what the builds
	// before them wrote.
	LeaseVersion       uint8 = 3
	LeaseReplayVersion uint8 = 2
	LeaseLegacyVersion uint8 = 1
	HeartbeatVersion   uint8 = 1
	// CompleteVersion and FailVersion are the newest: version 2 adds the
	// byte budgets (MaxBytes, MaxTenantBytes). Without them they encode as
	// version 1 (CompleteLegacyVersion, FailLegacyVersion).
	CompleteVersion       uint8 = 2
	CompleteLegacyVersion uint8 = 1
	FailVersion           uint8 = 2
	FailLegacyVersion     uint8 = 1
	ExpireLeasesVersion   uint8 = 1
	ClaimVersion          uint8 = 1
	ReleaseVersion        uint8 = 1
)

func (t CommandType) String() string {
	switch t {
	case TypeReserve:
		return "reserve"
	case TypeCommit:
		return "commit"
	case TypeReject:
		return "reject"
	case TypeExpire:
		return "expire"
	case TypeAdmit:
		return "admit"
	case TypeReserveBatch:
		return "reserve_batch"
	case TypeResolveBatch:
		return "resolve_batch"
	case TypeWorkerBatch:
		return "worker_batch"
	case TypeConfirm:
		return "confirm"
	case TypeLease:
		return "lease"
	case TypeHeartbeat:
		return "heartbeat"
	case TypeComplete:
		return "complete"
	case TypeFail:
		return "fail"
	case TypeExpireLeases:
		return "expire_leases"
	case TypeClaim:
		return "claim"
	case TypeRelease:
		return "release"
	}
	return fmt.Sprintf("type(0x%02x)", uint8(t))
}

// Command is one of Reserve, Commit, Reject, Admit, Expire, ReserveBatch,
// ResolveBatch, WorkerBatch, Confirm, Lease, Heartbeat, Complete, Fail,
// ExpireLeases, Claim, Release (and
// Unknown, which
// DecodeCommand returns for an ignorable type it does not know). Encode turns a
// Command into the bytes to pass to raft.Apply.
type Command interface {
	// CommandType is the type byte.
	CommandType() CommandType
	// CommandVersion is the version byte.
	CommandVersion() uint8
	appendBody(b []byte) []byte
	sizeHint() int
}

// Reserve inserts a PENDING entry for (Tenant, Key) unless one is live.
//
// Semantics, in this order:
//  1. An entry of the key that is due (ExpiresAt <= Now) is removed first, with
//     exactly Expire's effects, so the answer never depends on when the last
//     Expire ran.
//  2. A live entry with the same Fingerprint: OutcomeExists; another
//     fingerprint: OutcomeKeyReused. Both return the entry; nothing changes.
//  3. A structured key whose Sequence is known committed (inside its client's
//     watermark window with its bit set) or below the window:
//     OutcomeKeyExpired; nothing changes. (Version 1: at or below the
//     watermark's Sequence.) Version 2 then creates the client's watermark if
//     it has none, unless the table holds MaxWatermarks
//     (OutcomeWatermarksFull) or the tenant MaxTenantWatermarks
//     (OutcomeTenantWatermarksFull); nothing is evicted for it.
//  4. When the table holds MaxEntries entries or more, due entries are removed
//     earliest first (at most a few per Reserve); if it is still at the bound:
//     OutcomeFull, and nothing else changes. A live entry is never dropped.
//  5. Otherwise a PENDING entry is inserted: OutcomeReserved.
type Reserve struct {
	Tenant      string
	Key         string
	Fingerprint string
	// JobID is decided by the leader; it must be unique per reservation.
	JobID string
	// Now is the leader's clock (unix nanoseconds); ExpiresAt = Now + the
	// pending TTL, computed by the leader. ExpiresAt must be after Now.
	Now       int64
	ExpiresAt int64
	// MaxEntries is the bound on entries (IDEMPOTENCY_MAX_ENTRIES); at least 1.
	MaxEntries uint64
	Request    Request
	// Structured marks a <client_id>:<sequence>:<nonce> key. When it is false,
	// ClientID, Sequence and Nonce are not encoded.
	Structured bool
	ClientID   string
	Sequence   uint64
	Nonce      string

	// Version 2. Every bound is 0 for "no bound" (what version 1 decodes to).
	// MaxWatermarks bounds the watermark table (IDEMPOTENCY_WATERMARK_MAX_CLIENTS),
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

	// version is the version this command was decoded from when older than
	// ReserveVersion (0: current), so that it re-encodes to the same bytes.
	version uint8
}

// Commit moves the PENDING entry of (Tenant, Key) reserved with JobID to
// COMMITTED and creates the job (Seq = the command's raft index, CreatedAt =
// Now, retained until JobExpiresAt). Any other state of the entry is left as is
// (OutcomeUnchanged, with the entry), so a new leader can re-propose a Commit
// safely; no entry: OutcomeNotFound. A PENDING entry is committed even when it
// is due but not yet removed. If the tenant already has a job with JobID:
// OutcomeJobIDInUse and nothing changes.
//
// Capacity is decided here, atomically (version 2): when MaxJobs is not 0 and
// the job table holds MaxJobs unfinished jobs or more (after removing up to a
// few due jobs), the entry becomes REJECTED with status 429, reason
// "capacity", CapacityDetail and ExpiresAt = RejectedExpiresAt:
// OutcomeRejected, no job. Unfinished: every job but the SUCCEEDED, FAILED
// and DEAD ones (so, in a log without version 3, every job, as before). A
// version-1 Commit decodes with MaxJobs 0 (no bound), as it always applied.
//
// Version 3 (Queue) creates the job QUEUED (State JobQueued, RunAt = Now,
// Retention = JobExpiresAt - Now): it is leased by workers and stays until it
// finishes, then for its retention. Versions 1 and 2 create a JobLegacy job,
// retained until JobExpiresAt, in none of the lifecycle's orders.
type Commit struct {
	Tenant string
	Key    string
	JobID  string
	// Now is the commit time; ExpiresAt = Now + the committed TTL; JobExpiresAt
	// = Now + the job retention. Both must be after Now.
	Now          int64
	ExpiresAt    int64
	JobExpiresAt int64
	// MaxJobs is the bound on the job table (MANAGER_MAX_QUEUED_JOBS); 0: none.
	MaxJobs uint64
	// RejectedExpiresAt (Now + the rejected TTL) and CapacityDetail make the
	// capacity rejection; RejectedExpiresAt must be after Now when MaxJobs > 0.
	RejectedExpiresAt int64
	CapacityDetail    string
	// Queue creates the job in the worker lifecycle (encoded as version 3;
	// without it, version 2). See QueueCommit.
	Queue bool

	// version is the version this command was decoded from when older than
	// CommitLegacyVersion (0: by Queue), so that it re-encodes to the same
	// bytes.
	version uint8
}

// QueueCommit returns c as a version-3 Commit: its job is QUEUED for the
// workers instead of committed outside the lifecycle. The manager's switch to
// the lifecycle is proposing QueueCommit(c) instead of c.
func QueueCommit(c Commit) Commit {
	c.Queue, c.version = true, 0
	return c
}

// ReasonCapacity is the Reason of a capacity rejection (status 429).
const ReasonCapacity = "capacity"

// Reject moves the PENDING entry of (Tenant, Key) reserved with JobID to
// REJECTED, storing Status, Reason and Detail. The other states are handled as
// for Commit.
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
//     least recently updated first; WatermarkTTL <= 0 disables this;
//   - version 1 only: while more than MaxWatermarks watermarks remain, the
//     least recently updated (ties by tenant, client, nonce); 0: no bound.
//
// Result.Removed counts each kind; Result.More is set when MaxRemovals stopped
// it while something was still due.
type Expire struct {
	Now          int64
	MaxRemovals  uint64
	WatermarkTTL time.Duration
	// MaxWatermarks is version 1 only (encoded only for a command decoded from
	// version 1): it evicted live watermarks, which re-opened late retries to
	// execution. Version 2 never evicts; a full table refuses at Reserve.
	MaxWatermarks uint64

	version uint8
}

// Unknown is a command of an ignorable type (TypeIgnorable set) that this
// version does not know. Apply ignores it. Encode writes it back as it was read.
type Unknown struct {
	Type    CommandType
	Version uint8
	Body    []byte
}

func (Reserve) CommandType() CommandType   { return TypeReserve }
func (Commit) CommandType() CommandType    { return TypeCommit }
func (Reject) CommandType() CommandType    { return TypeReject }
func (Expire) CommandType() CommandType    { return TypeExpire }
func (u Unknown) CommandType() CommandType { return u.Type }

func (r Reserve) CommandVersion() uint8 {
	if r.version != 0 {
		return r.version
	}
	return ReserveVersion
}
func (c Commit) CommandVersion() uint8 {
	switch {
	case c.version != 0:
		return c.version
	case c.Queue:
		return CommitVersion
	}
	return CommitLegacyVersion
}
func (Reject) CommandVersion() uint8 { return RejectVersion }
func (e Expire) CommandVersion() uint8 {
	if e.version != 0 {
		return e.version
	}
	return ExpireVersion
}
func (u Unknown) CommandVersion() uint8 { return u.Version }

// Encode returns the bytes of c (type byte, version byte, body), ready for
// raft.Apply. It never fails: every value of a command type has an encoding.
func Encode(c Command) []byte {
	return AppendCommand(make([]byte, 0, 2+c.sizeHint()), c)
}

// AppendCommand appends the encoding of c to b.
func AppendCommand(b []byte, c Command) []byte {
	b = append(b, byte(c.CommandType()), c.CommandVersion())
	return c.appendBody(b)
}

const varintSize = 10

func (r Reserve) sizeHint() int {
	return len(r.Tenant) + len(r.Key) + len(r.Fingerprint) + len(r.JobID) +
		len(r.Request.Type) + len(r.Request.Payload) + sizeStrings(r.Request.Datacenters) +
		len(r.ClientID) + len(r.Nonce) + 16*varintSize + 24
}

// Reserve v2 body (v1 ends after the structured part):
//
//	tenant string, key string, fingerprint string, job_id string,
//	now int64, expires_at int64, max_entries uvarint,
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
	b = appendInt64(b, r.ExpiresAt)
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
	if r.version == 1 {
		return b
	}
	b = appendUvarint(b, r.MaxWatermarks)
	b = appendUvarint(b, r.MaxTenantWatermarks)
	b = appendUvarint(b, r.MaxBytes)
	b = appendUvarint(b, r.MaxTenantBytes)
	return appendInt64(b, int64(r.ResultTTL))
}

func decodeReserveV2(d *decoder) Reserve {
	r := decodeReserveV1(d)
	r.MaxWatermarks = d.uvarint()
	r.MaxTenantWatermarks = d.uvarint()
	r.MaxBytes = d.uvarint()
	r.MaxTenantBytes = d.uvarint()
	r.ResultTTL = time.Duration(d.int64())
	return r
}

func decodeReserveV1(d *decoder) Reserve {
	var r Reserve
	r.Tenant = d.string()
	r.Key = d.string()
	r.Fingerprint = d.string()
	r.JobID = d.string()
	r.Now = d.int64()
	r.ExpiresAt = d.int64()
	r.MaxEntries = d.uvarint()
	r.Request.Type = d.string()
	r.Request.Payload = d.bytes()
	r.Request.Datacenters = d.strings()
	r.Structured = d.bool()
	if r.Structured {
		r.ClientID = d.string()
		r.Sequence = d.uvarint()
		r.Nonce = d.string()
	}
	return r
}

func (c Commit) sizeHint() int {
	return len(c.Tenant) + len(c.Key) + len(c.JobID) + len(c.CapacityDetail) + 5*varintSize + 32
}

// Commit v2 and v3 body (v1 is its first six fields; v3 is v2's layout, the
// version itself says the job is queued):
//
//	tenant string, key string, job_id string,
//	now int64, expires_at int64, job_expires_at int64,
//	max_jobs uvarint, rejected_expires_at int64, capacity_detail string
func (c Commit) appendBody(b []byte) []byte {
	b = appendString(b, c.Tenant)
	b = appendString(b, c.Key)
	b = appendString(b, c.JobID)
	b = appendInt64(b, c.Now)
	b = appendInt64(b, c.ExpiresAt)
	b = appendInt64(b, c.JobExpiresAt)
	if c.version == 1 {
		return b
	}
	b = appendUvarint(b, c.MaxJobs)
	b = appendInt64(b, c.RejectedExpiresAt)
	return appendString(b, c.CapacityDetail)
}

func decodeCommitV2(d *decoder) Commit {
	c := decodeCommitV1(d)
	c.MaxJobs = d.uvarint()
	c.RejectedExpiresAt = d.int64()
	c.CapacityDetail = d.string()
	return c
}

func decodeCommitV1(d *decoder) Commit {
	var c Commit
	c.Tenant = d.string()
	c.Key = d.string()
	c.JobID = d.string()
	c.Now = d.int64()
	c.ExpiresAt = d.int64()
	c.JobExpiresAt = d.int64()
	return c
}

func (r Reject) sizeHint() int {
	return len(r.Tenant) + len(r.Key) + len(r.JobID) + len(r.Reason) + len(r.Detail) +
		6*varintSize + 16
}

// Reject v1 body:
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

func decodeRejectV1(d *decoder) Reject {
	var r Reject
	r.Tenant = d.string()
	r.Key = d.string()
	r.JobID = d.string()
	r.Now = d.int64()
	r.ExpiresAt = d.int64()
	st := d.uvarint()
	if st > 0xFFFF {
		d.fail("status out of range")
		st = 0
	}
	r.Status = int(st)
	r.Reason = d.string()
	r.Detail = d.string()
	return r
}

func (Expire) sizeHint() int { return 2*varintSize + 16 }

// Expire v2 body (v1 adds max_watermarks uvarint at the end):
//
//	now int64, max_removals uvarint, watermark_ttl int64 (nanoseconds)
func (e Expire) appendBody(b []byte) []byte {
	b = appendInt64(b, e.Now)
	b = appendUvarint(b, e.MaxRemovals)
	b = appendInt64(b, int64(e.WatermarkTTL))
	if e.version != 1 {
		return b
	}
	return appendUvarint(b, e.MaxWatermarks)
}

func decodeExpireV2(d *decoder) Expire {
	var e Expire
	e.Now = d.int64()
	e.MaxRemovals = d.uvarint()
	e.WatermarkTTL = time.Duration(d.int64())
	return e
}

func decodeExpireV1(d *decoder) Expire {
	var e Expire
	e.Now = d.int64()
	e.MaxRemovals = d.uvarint()
	e.WatermarkTTL = time.Duration(d.int64())
	e.MaxWatermarks = d.uvarint()
	return e
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
func (Confirm) CommandVersion() uint8    { return ConfirmVersion }

func (c Confirm) sizeHint() int {
	n := varintSize
	for _, it := range c.Items {
		n += len(it.Tenant) + len(it.Key) + len(it.JobID) + len(it.Datacenter) + 4*varintSize
	}
	return n
}

// Confirm v1 body:
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

func decodeConfirmV1(d *decoder) Confirm {
	n := d.length(4) // each item is at least four empty strings
	c := Confirm{Items: make([]Confirmation, 0, n)}
	for i := 0; i < n && d.err == nil; i++ {
		c.Items = append(c.Items, Confirmation{Tenant: d.string(), Key: d.string(), JobID: d.string(), Datacenter: d.string()})
	}
	return c
}

func (u Unknown) sizeHint() int              { return len(u.Body) }
func (u Unknown) appendBody(b []byte) []byte { return append(b, u.Body...) }

// DecodeCommand decodes the bytes of a raft log entry. It never panics, and the
// returned command never aliases data. Errors match:
//   - ErrMalformed: shorter than the two header bytes, or a body that does not
//     decode exactly (truncated, bad varint, trailing bytes, ...);
//   - ErrUnknownCommand: a type this version does not know, TypeIgnorable clear;
//   - ErrUnsupportedVersion: a known type with a version this build cannot read.
//
// An unknown type with TypeIgnorable set decodes as Unknown, without error,
// whatever its version and body.
func DecodeCommand(data []byte) (Command, error) {
	if len(data) < 2 {
		return nil, fmt.Errorf("%w: %d bytes, want a 2-byte header", ErrMalformed, len(data))
	}
	t, v := CommandType(data[0]), data[1]
	d := &decoder{b: data, off: 2, base: ErrMalformed}
	var c Command
	switch t {
	case TypeReserve:
		switch v {
		case 1:
			r := decodeReserveV1(d)
			r.version = 1
			c = r
		case 2:
			c = decodeReserveV2(d)
		default:
			return nil, versionError(t, v)
		}
	case TypeCommit:
		switch v {
		case 1:
			cv := decodeCommitV1(d)
			cv.version = 1
			c = cv
		case 2:
			c = decodeCommitV2(d)
		case 3:
			cv := decodeCommitV2(d)
			cv.Queue = true
			c = cv
		default:
			return nil, versionError(t, v)
		}
	case TypeReject:
		if v != 1 {
			return nil, versionError(t, v)
		}
		c = decodeRejectV1(d)
	case TypeExpire:
		switch v {
		case 1:
			e := decodeExpireV1(d)
			e.version = 1
			c = e
		case 2:
			c = decodeExpireV2(d)
		default:
			return nil, versionError(t, v)
		}
	case TypeAdmit:
		if v != AdmitVersion {
			return nil, versionError(t, v)
		}
		c = decodeAdmitV1(d)
	case TypeReserveBatch:
		if v != ReserveBatchVersion {
			return nil, versionError(t, v)
		}
		c = decodeReserveBatchV1(d)
	case TypeResolveBatch:
		if v != ResolveBatchVersion {
			return nil, versionError(t, v)
		}
		c = decodeResolveBatchV1(d)
	case TypeWorkerBatch:
		if v != WorkerBatchVersion {
			return nil, versionError(t, v)
		}
		c = decodeWorkerBatchV1(d)
	case TypeConfirm:
		if v != ConfirmVersion {
			return nil, versionError(t, v)
		}
		c = decodeConfirmV1(d)
	case TypeClaim:
		if v != ClaimVersion {
			return nil, versionError(t, v)
		}
		c = decodeClaimV1(d)
	case TypeRelease:
		if v != ReleaseVersion {
			return nil, versionError(t, v)
		}
		c = decodeReleaseV1(d)
	case TypeLease, TypeHeartbeat, TypeComplete, TypeFail, TypeExpireLeases:
		var ok bool
		if c, ok = decodeLifecycle(d, t, v); !ok {
			return nil, versionError(t, v)
		}
	default:
		if t&TypeIgnorable != 0 {
			return Unknown{Type: t, Version: v, Body: append([]byte(nil), data[2:]...)}, nil
		}
		return nil, fmt.Errorf("%w: %s version %d", ErrUnknownCommand, t, v)
	}
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("%s v%d: %w", t, v, err)
	}
	return c, nil
}

func versionError(t CommandType, v uint8) error {
	return fmt.Errorf("%w: %s version %d", ErrUnsupportedVersion, t, v)
}
