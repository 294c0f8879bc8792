package ledger

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/once-dev/once/internal/ledger/engine"
)

// Snapshot format (docs/ledger.md has the details):
//
//	magic    8 bytes "ONCELEDG" (builds before 1.0 wrote "ONCELDGR")
//	version  1 byte  FormatVersion
//	header   record: applied_index uvarint, entries uvarint, jobs uvarint,
//	         watermarks uvarint, ledger_time int64, seq_high uvarint,
//	         owed uvarint
//	entries  that many records, ordered by (tenant, key)
//	jobs     that many records, ordered by (tenant, id)
//	watermarks that many records, ordered by (tenant, client_id, nonce)
//	owed     that many entry records, ordered by (tenant, key, job_id)
//	crc      4 bytes, big-endian CRC-32C (Castagnoli) of every byte before it
//
// A record is a uvarint length and that many bytes, decoded strictly (no
// trailing bytes) with the command primitives.
const (
	snapshotMagic = "ONCELEDG"
	// preReleaseMagic began every snapshot of the builds before 1.0
	// (versions 1 to 6), which Restore refuses by name.
	preReleaseMagic = "ONCELDGR"
	// maxRecord bounds one record (an entry with its payload).
	maxRecord = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot is the raft.FSMSnapshot of an FSM: an immutable view of the state
// at one applied index. Persist may run concurrently with Apply.
type Snapshot struct {
	applied    uint64
	ledgerTime int64
	seqHigh    uint64
	entries    records
	jobs       records
	watermarks records
	owed       records
	// sync makes the store durable up to the view (nil in memory); release
	// drops the view.
	sync    func() error
	release func()
}

// Snapshot captures the state in O(1); see FSM.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.s
	if h := f.halt.Load(); h != nil {
		return nil, fmt.Errorf("ledger: snapshot: %w", h)
	}
	if f.delivered < s.applied {
		return nil, fmt.Errorf("%w: Raft has given entries up to index %d, the store has applied %d",
			ErrReplaying, f.delivered, s.applied)
	}
	snap := &Snapshot{
		applied:    s.applied,
		ledgerTime: s.ledgerTime,
		seqHigh:    max(s.lastSeq, s.applied),
		owed:       cloneRecords(s.owed, appendEntry),
	}
	if s.store == nil {
		snap.entries = cloneRecords(s.entries, appendEntry)
		snap.jobs = cloneRecords(s.jobs, appendJob)
		snap.watermarks = cloneRecords(s.wms, appendWatermark)
		snap.release = func() {}
		return snap, nil
	}
	if f.closed {
		return nil, fmt.Errorf("%w: snapshot of a closed FSM", ErrStore)
	}
	view, release := s.store.View()
	snap.entries = storeRecords{view, pfxEntries, s.entries.Len()}
	snap.jobs = storeRecords{view, pfxJobs, s.jobs.Len()}
	snap.watermarks = storeRecords{view, pfxWatermarks, s.wms.Len()} // written through: the same as memory
	snap.sync = s.store.Sync
	snap.release = release
	return snap, nil
}

// Persist writes the snapshot to sink and closes it; on error it cancels the
// sink and returns the error.
func (s *Snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.PersistTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("ledger: persist snapshot: %w", err)
	}
	return sink.Close()
}

// PersistTo writes the snapshot to w (without closing it). Persist uses it; it is
// exported for tests and tools.
func (s *Snapshot) PersistTo(w io.Writer) error {
	if s.entries == nil {
		return errors.New("ledger: snapshot already released")
	}
	if s.sync != nil {
		if err := s.sync(); err != nil {
			return err
		}
	}
	crc := crc32.New(castagnoli)
	// bw's first error sticks: every later write and Flush return it, so
	// only put, which stops a table's walk, and Flush look at it.
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 256<<10)
	lenBuf := make([]byte, 0, binary.MaxVarintLen64)
	put := func(r []byte) bool {
		lenBuf = binary.AppendUvarint(lenBuf[:0], uint64(len(r)))
		_, _ = bw.Write(lenBuf)
		_, err := bw.Write(r)
		return err == nil
	}
	_, _ = bw.WriteString(snapshotMagic)
	_ = bw.WriteByte(FormatVersion)
	var rec []byte
	rec = appendUvarint(rec, s.applied)
	rec = appendUvarint(rec, uint64(s.entries.Len()))
	rec = appendUvarint(rec, uint64(s.jobs.Len()))
	rec = appendUvarint(rec, uint64(s.watermarks.Len()))
	rec = appendInt64(rec, s.ledgerTime)
	rec = appendUvarint(rec, s.seqHigh)
	rec = appendUvarint(rec, uint64(s.owed.Len()))
	put(rec)
	for _, table := range []records{s.entries, s.jobs, s.watermarks, s.owed} {
		if err := table.each(put); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(crc.Sum(nil))
	return err
}

// Release drops the view.
func (s *Snapshot) Release() {
	if s.entries == nil {
		return
	}
	s.release()
	s.entries, s.jobs, s.watermarks, s.owed = nil, nil, nil, nil
}

// Entry record:
//
//	tenant string, key string, fingerprint string, state uvarint, job_id string,
//	reserved_at int64, resolved_at int64, expires_at int64,
//	type string, payload bytes, datacenters strings,
//	structured bool, [client_id string, sequence uvarint, nonce string],
//	status uvarint, reason string, detail string,
//	result_ttl int64 (nanoseconds), confirmed strings
func appendEntry(b []byte, e *Entry) []byte {
	b = appendString(b, e.Tenant)
	b = appendString(b, e.Key)
	b = appendString(b, e.Fingerprint)
	b = appendUvarint(b, uint64(e.State))
	b = appendString(b, e.JobID)
	b = appendInt64(b, e.ReservedAt)
	b = appendInt64(b, e.ResolvedAt)
	b = appendInt64(b, e.ExpiresAt)
	b = appendString(b, e.Request.Type)
	b = appendBytes(b, e.Request.Payload)
	b = appendStrings(b, e.Request.Datacenters)
	b = appendBool(b, e.Structured)
	if e.Structured {
		b = appendString(b, e.ClientID)
		b = appendUvarint(b, e.Sequence)
		b = appendString(b, e.Nonce)
	}
	b = appendUvarint(b, uint64(e.Status))
	b = appendString(b, e.Reason)
	b = appendString(b, e.Detail)
	b = appendInt64(b, int64(e.ResultTTL))
	return appendStrings(b, e.Confirmed)
}

func decodeEntry(d *decoder) *Entry {
	e := &Entry{Tenant: d.string(), Key: d.string(), Fingerprint: d.string()}
	st := d.uvarint()
	e.State = State(st)
	if d.err == nil && (st > 255 || !e.State.valid()) {
		d.fail(fmt.Sprintf("bad state %d", st))
	}
	e.JobID, e.ReservedAt, e.ResolvedAt, e.ExpiresAt = d.string(), d.int64(), d.int64(), d.int64()
	e.Request = Request{Type: d.string(), Payload: d.bytes(), Datacenters: d.strings()}
	e.Structured = d.bool()
	if e.Structured {
		e.ClientID, e.Sequence, e.Nonce = d.string(), d.uvarint(), d.string()
	}
	e.Status, e.Reason, e.Detail = d.status(), d.string(), d.string()
	e.ResultTTL = time.Duration(d.int64())
	if d.err == nil && e.ResultTTL < 0 {
		d.fail("negative result_ttl")
	}
	e.Confirmed = d.strings()
	if d.err == nil && !confirmedValid(e) {
		d.fail("confirmed datacenters not sorted, repeated, or not named by the request")
	}
	return e
}

// confirmedValid: Confirmed is a sorted set of datacenters the request names,
// and only a resolved entry has one (what Confirm builds).
func confirmedValid(e *Entry) bool {
	for i, dc := range e.Confirmed {
		if (i > 0 && e.Confirmed[i-1] >= dc) || !slices.Contains(e.Request.Datacenters, dc) {
			return false
		}
	}
	return true
}

// Job record:
//
//	tenant string, id string, key string, type string, payload bytes,
//	datacenters strings, life bool, created_at int64, seq uvarint,
//	expires_at int64,
//	(with life, a job in the lifecycle, only; a legacy job's record ends here:)
//	state uvarint (1..6), attempts uvarint, run_at int64, lease_id string,
//	holder string, lease_expires_at int64, retention int64 (ns),
//	finished_at int64, result bytes, error string
//
// The job's status is not stored: it is its state's name (Job.State). Where
// life is, a record of the earlier layout has its status string, whose
// length (4 to 9) is no bool: such a record fails to decode, never misread.
func appendJob(b []byte, j *Job) []byte {
	b = appendString(b, j.Tenant)
	b = appendString(b, j.ID)
	b = appendString(b, j.Key)
	b = appendString(b, j.Type)
	b = appendBytes(b, j.Payload)
	b = appendStrings(b, j.Datacenters)
	l := j.Life
	b = appendBool(b, l != nil)
	b = appendInt64(b, j.CreatedAt)
	b = appendUvarint(b, j.Seq)
	b = appendInt64(b, j.ExpiresAt)
	if l == nil {
		return b
	}
	b = appendUvarint(b, uint64(l.State))
	b = appendUvarint(b, l.Attempts)
	b = appendInt64(b, l.RunAt)
	b = appendString(b, l.LeaseID)
	b = appendString(b, l.Holder)
	b = appendInt64(b, l.LeaseExpiresAt)
	b = appendInt64(b, l.Retention)
	b = appendInt64(b, l.FinishedAt)
	b = appendBytes(b, l.Result)
	return appendString(b, l.Error)
}

func decodeJob(d *decoder) *Job {
	j := &Job{Tenant: d.string(), ID: d.string(), Key: d.string(), Type: d.string(), Payload: d.bytes(),
		Datacenters: d.strings()}
	life := d.bool()
	j.CreatedAt, j.Seq, j.ExpiresAt = d.int64(), d.uvarint(), d.int64()
	if d.err != nil || !life {
		return j
	}
	l := &JobLife{}
	j.Life = l
	st := d.uvarint()
	l.State = JobState(st)
	if d.err == nil && (st < uint64(JobQueued) || st > uint64(JobCancelled)) {
		d.fail(fmt.Sprintf("bad job state %d", st))
	}
	l.Attempts, l.RunAt, l.LeaseID, l.Holder = d.uvarint(), d.int64(), d.string(), d.string()
	l.LeaseExpiresAt, l.Retention, l.FinishedAt = d.int64(), d.int64(), d.int64()
	l.Result, l.Error = d.bytes(), d.string()
	if d.err == nil && l.Retention < 0 {
		d.fail("negative retention")
	}
	return j
}

// Watermark record:
//
//	tenant string, client_id string, nonce string, sequence uvarint,
//	updated_at int64, window: WatermarkWindow/64 int64
func appendWatermark(b []byte, w *Watermark) []byte {
	b = appendString(b, w.Tenant)
	b = appendString(b, w.ClientID)
	b = appendString(b, w.Nonce)
	b = appendUvarint(b, w.Sequence)
	b = appendInt64(b, w.UpdatedAt)
	for _, word := range w.Window {
		b = appendInt64(b, int64(word))
	}
	return b
}

func decodeWatermark(d *decoder) *Watermark {
	w := &Watermark{Tenant: d.string(), ClientID: d.string(), Nonce: d.string(), Sequence: d.uvarint(), UpdatedAt: d.int64()}
	for i := range w.Window {
		w.Window[i] = uint64(d.int64())
	}
	return w
}

// snapReader reads a snapshot stream and keeps the CRC of what it consumed.
type snapReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	buf []byte
	one [1]byte
}

func (r *snapReader) ReadByte() (byte, error) {
	b, err := r.r.ReadByte()
	if err == nil {
		r.one[0] = b
		r.crc.Write(r.one[:])
	}
	return b, err
}

func (r *snapReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.crc.Write(p[:n])
	return n, err
}

func badSnapshot(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadSnapshot}, args...)...)
}

// full reads exactly n bytes, allocating as data arrives so that a forged
// length cannot make it allocate much more than the stream holds.
func (r *snapReader) full(n int) ([]byte, error) {
	const direct = 1 << 20
	if n <= direct {
		if cap(r.buf) < n {
			r.buf = make([]byte, n, max(n, 4096))
		}
		b := r.buf[:n]
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, err
	}
	if len(b) != n {
		return nil, io.ErrUnexpectedEOF
	}
	return b, nil
}

// record reads one length-prefixed record and returns a strict decoder over
// it. The bytes are valid until the next call.
func (r *snapReader) record(what string) (*decoder, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, badSnapshot("%s: length: %w", what, err)
	}
	if n > maxRecord {
		return nil, badSnapshot("%s: record of %d bytes", what, n)
	}
	b, err := r.full(int(n))
	if err != nil {
		return nil, badSnapshot("%s: %w", what, err)
	}
	return &decoder{b: b, base: ErrBadSnapshot}, nil
}

// Restore replaces the whole state with the snapshot's; see FSM. It closes rc.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.RLock()
	cur, knobs, closed := f.s.store, f.s.knobs, f.closed
	f.mu.RUnlock()
	if closed {
		return fmt.Errorf("ledger: restore: %w: closed", ErrStore)
	}
	fresh := func() (*state, error) { return newState(), nil }
	var gen *engine.Store
	if cur != nil {
		fresh = func() (*state, error) {
			var err error
			if gen, err = cur.NewGeneration(); err != nil {
				return nil, err
			}
			s := newState()
			s.knobs = knobs
			s.useStore(gen, storeMeta{})
			s.begin()
			return s, nil
		}
	}
	s, err := readSnapshot(rc, fresh)
	if err != nil {
		if gen != nil {
			gen.Discard()
		}
		return fmt.Errorf("ledger: restore: %w", err)
	}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.mu.Lock()
	if gen != nil {
		if err := gen.MakeCurrent(cur); err != nil {
			f.mu.Unlock()
			gen.Discard()
			return fmt.Errorf("ledger: restore: %w", err)
		}
	}
	f.s = s
	f.delivered = s.applied
	f.mutations.Add(1)
	f.mu.Unlock()
	if f.onChange != nil {
		f.changes = append(f.changes[:0], Change{Kind: ChangeRestored})
		f.notify()
	}
	return nil
}

// restoreCheckpoint is how many records Restore writes to the store in one
// batch.
const restoreCheckpoint = 4096

// readSnapshot decodes a whole snapshot into a fresh state made by fresh
// (on disk: its batch open, committed here).
func readSnapshot(src io.Reader, fresh func() (*state, error)) (s *state, err error) {
	defer recoverStore(&err)
	r := &snapReader{r: bufio.NewReaderSize(src, 256<<10), crc: crc32.New(castagnoli)}
	var head [len(snapshotMagic) + 1]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, badSnapshot("header: %w", err)
	}
	version := head[len(snapshotMagic)]
	switch magic := string(head[:len(snapshotMagic)]); {
	case magic == preReleaseMagic:
		return nil, &FormatError{What: "snapshot", Version: uint64(version), PreRelease: true}
	case magic != snapshotMagic:
		return nil, badSnapshot("bad magic %q", magic)
	case version != FormatVersion:
		return nil, &FormatError{What: "snapshot", Version: uint64(version)}
	}
	d, err := r.record("header")
	if err != nil {
		return nil, err
	}
	applied := d.uvarint()
	nEntries, nJobs, nWatermarks := d.uvarint(), d.uvarint(), d.uvarint()
	ledgerTime, seqHigh := d.int64(), d.uvarint()
	if d.err == nil && seqHigh < applied {
		d.fail("seq_high below the applied index")
	}
	nOwed := d.uvarint()
	if err := d.finish(); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}

	if s, err = fresh(); err != nil {
		return nil, err
	}
	s.applied = applied
	s.ledgerTime = ledgerTime
	s.lastSeq = seqHigh
	err = readTable(r, s, "entry", nEntries, decodeEntry, entryOrder.less, func(e *Entry) error {
		if e.Tenant == "" || e.Key == "" {
			return badSnapshot("empty tenant or key")
		}
		return nil
	}, s.insertEntry)
	if err == nil {
		err = readTable(r, s, "job", nJobs, decodeJob, jobOrder.less, func(j *Job) error {
			switch {
			case j.Tenant == "" || j.ID == "" || j.Seq == 0 || j.Seq > seqHigh:
				return badSnapshot("empty tenant or id, or seq %d not in 1..%d", j.Seq, seqHigh)
			case s.jobSeq.Has(j): // a tenant's seqs are unique: a duplicate would corrupt the indexes
				return badSnapshot("duplicate seq %d", j.Seq)
			}
			return nil
		}, s.insertJob)
	}
	if err == nil {
		err = readTable(r, s, "watermark", nWatermarks, decodeWatermark, watermarkOrder.less,
			func(*Watermark) error { return nil }, s.insertWatermark)
	}
	if err == nil {
		err = readTable(r, s, "owed entry", nOwed, decodeEntry, owedOrder.less, func(e *Entry) error {
			if e.Tenant == "" || e.Key == "" || e.JobID == "" || !carried(e) {
				return badSnapshot("empty tenant, key or job ID, or nothing owed")
			}
			return nil
		}, s.insertOwed)
	}
	if err != nil {
		return nil, err
	}
	sum := r.crc.Sum32()
	var trailer [4]byte
	if _, err := io.ReadFull(r.r, trailer[:]); err != nil {
		return nil, badSnapshot("crc: %w", err)
	}
	if got := binary.BigEndian.Uint32(trailer[:]); got != sum {
		return nil, badSnapshot("crc mismatch: stored %08x, computed %08x", got, sum)
	}
	if _, err := r.r.ReadByte(); err != io.EOF {
		return nil, badSnapshot("trailing data after crc")
	}
	s.commit()
	return s, nil
}

// readTable reads a table's n records: each decodes strictly, passes check,
// follows the one before it by less, and is inserted; the store is
// checkpointed every restoreCheckpoint records.
func readTable[T any](r *snapReader, s *state, what string, n uint64, decode func(*decoder) T,
	less func(a, b T) bool, check func(T) error, insert func(T)) error {
	var prev T
	for i := uint64(0); i < n; i++ {
		d, err := r.record(what)
		if err != nil {
			return err
		}
		item := decode(d)
		if err = d.finish(); err == nil {
			err = check(item)
		}
		if err != nil {
			return fmt.Errorf("%s %d: %w", what, i, err)
		}
		if i > 0 && !less(prev, item) {
			return badSnapshot("%s %d: out of order", what, i)
		}
		prev = item
		insert(item)
		if i%restoreCheckpoint == restoreCheckpoint-1 {
			s.checkpoint()
		}
	}
	return nil
}
