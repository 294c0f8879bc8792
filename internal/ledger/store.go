package ledger

import (
	"log/slog"

	"github.com/once-dev/once/internal/ledger/engine"
)

// The disk-backed state keeps every table in one store of the storage
// engine (internal/ledger/engine: pebble, bytes only); this file is how the
// ledger lays its state out in it: a one-byte prefix per table and order,
// and the counters record.

// The counters record (metaKey) begins with storeTag and the store's format,
// FormatVersion. A build before 1.0 began it with its own format, 1 or 2,
// never 0: Open refuses such a store by name (FormatError), and a store of
// another format the same way. The node then needs its state from a
// snapshot (remove the ledger directory; Raft restores it).
const storeTag = 0

// Key prefixes, one byte each; what follows the prefix is declared with the
// order (orders.go). Values of primary tables are snapshot records of the
// current version (appendEntry, appendJob, appendWatermark), so Persist
// streams them as they are; values of secondary orders are the primary key
// of their item, or (the expiry orders) its record.
const (
	pfxMeta        byte = 0x01 // one key: the counters (metaKey)
	pfxTenantBytes byte = 0x02 // tenant → accounted bytes (uvarint)
	pfxTenantWMs   byte = 0x03 // tenant → watermark count (uvarint)
	pfxEntries     byte = 'e'
	pfxEntryExp    byte = 'x'
	pfxMultiDC     byte = 'm' // entries naming several datacenters
	pfxOwed        byte = 'o' // entries expired before every datacenter confirmed them (owed.go)
	pfxJobs        byte = 'j'
	pfxJobSeq      byte = 's'
	pfxJobType     byte = 't'
	pfxJobExp      byte = 'y'
	pfxWatermarks  byte = 'w'
	// The job lifecycle.
	pfxJobQueue     byte = 'q' // QUEUED
	pfxJobQueueType byte = 'u' // QUEUED
	pfxJobRunning   byte = 'l' // RUNNING
	pfxJobState     byte = 'z' // QUEUED and finished
)

var metaKey = []byte{pfxMeta}

// ErrStore: the ledger's store could not be opened or is not one this build
// reads (another format, damaged counters); Open returns it and the manager
// refuses to start (engine.ErrStore).
var ErrStore = engine.ErrStore

// StoreError is what the FSM panics with when its store fails while applying
// or reading (engine.StoreError).
type StoreError = engine.StoreError

// StoreOptions tune the store; zero values take the defaults. CacheBytes,
// MemTableBytes and Logger are the storage engine's (engine.Options).
type StoreOptions struct {
	CacheBytes    int64
	MemTableBytes uint64
	Logger        *slog.Logger
	// Knobs are for benchmarks and their tests only (TestingKnobs).
	Knobs TestingKnobs
}

// engine returns the engine's options for o.
func (o StoreOptions) engine() engine.Options {
	return engine.Options{CacheBytes: o.CacheBytes, MemTableBytes: o.MemTableBytes, Logger: o.Logger,
		Knobs: engine.TestingKnobs{KeyScanStarts: o.Knobs.KeyScanStarts,
			NoWrites: o.Knobs.NoWrites, NoWritesKeep: pfxTenantWMs}} // the counters only
}

// The meta record: after storeTag and the format, the applied index, ledger
// time, last Seq, accounted bytes, entries by state, the three primary
// tables' lengths, the jobs by lifecycle state, the claimed entries and the
// cancelled jobs.
type storeMeta struct {
	applied                                  uint64
	ledgerTime                               int64
	lastSeq                                  uint64
	bytes                                    uint64
	committed, rejected                      uint64
	entries, jobs, watermarks                uint64
	queued, running, succeeded, failed, dead uint64
	claimed, cancelled                       uint64
}

func (m storeMeta) append(b []byte) []byte {
	b = append(b, storeTag, FormatVersion)
	b = appendUvarint(b, m.applied)
	b = appendInt64(b, m.ledgerTime)
	b = appendUvarint(b, m.lastSeq)
	b = appendUvarint(b, m.bytes)
	b = appendUvarint(b, m.committed)
	b = appendUvarint(b, m.rejected)
	b = appendUvarint(b, m.entries)
	b = appendUvarint(b, m.jobs)
	b = appendUvarint(b, m.watermarks)
	b = appendUvarint(b, m.queued)
	b = appendUvarint(b, m.running)
	b = appendUvarint(b, m.succeeded)
	b = appendUvarint(b, m.failed)
	b = appendUvarint(b, m.dead)
	b = appendUvarint(b, m.claimed)
	return appendUvarint(b, m.cancelled)
}

func decodeMeta(v []byte) (storeMeta, error) {
	d := &decoder{b: v, base: ErrStore}
	var m storeMeta
	switch tag := d.uvarint(); {
	case d.err != nil:
	case tag != storeTag:
		return m, &FormatError{What: "store", Version: tag, PreRelease: true}
	default:
		if f := d.uvarint(); d.err == nil && f != uint64(FormatVersion) {
			return m, &FormatError{What: "store", Version: f}
		}
	}
	m.applied = d.uvarint()
	m.ledgerTime = d.int64()
	m.lastSeq = d.uvarint()
	m.bytes = d.uvarint()
	m.committed, m.rejected = d.uvarint(), d.uvarint()
	m.entries, m.jobs, m.watermarks = d.uvarint(), d.uvarint(), d.uvarint()
	m.queued, m.running, m.succeeded, m.failed, m.dead = d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
	m.claimed, m.cancelled = d.uvarint(), d.uvarint()
	return m, d.finish()
}

// prefixEnd is the first key after every key with prefix p.
func prefixEnd(p byte) []byte { return []byte{p + 1} }

// storeRecords streams one primary table of a pebble snapshot: its values
// are already snapshot records.
type storeRecords struct {
	snap   engine.View
	prefix byte
	n      int
}

func (r storeRecords) Len() int { return r.n }

func (r storeRecords) each(fn func(rec []byte) bool) (err error) {
	defer recoverStore(&err)
	r.snap.Walk([]byte{r.prefix}, prefixEnd(r.prefix), func(_, v []byte) bool { return fn(v) })
	return nil
}
