package ledger

import (
	"cmp"
	"strings"

	"github.com/once-dev/once/internal/ledger/engine"
)

// The orders of the state (docs/ledger.md, "State on disk"), each declared
// once, as its key prefix on disk and the fields it sorts by: its B-tree
// comparator (less, the memory engine) and its pebble key (key, the disk
// engine, after the prefix) both follow from that one declaration, so the
// engines cannot disagree on an order. A key's prefix of whole fields is a
// group (diskIndex.group: a tenant's queue), declared as an order of its own
// without a prefix, as is an order kept in memory only. The lifecycle's
// orders hold only lifecycle jobs (and probes with a Life).
var (
	entryOrder    = orderOf(pfxEntries, eTenant, eKey)
	entryExpOrder = orderOf(pfxEntryExp, eExpires, eTenant, eKey)
	multiDCOrder  = orderOf(pfxMultiDC, eTenant, eKey)
	owedOrder     = orderOf(pfxOwed, eTenant, eKey, eJobID)

	jobOrder          = orderOf(pfxJobs, jTenant, jID)
	jobSeqOrder       = orderOf(pfxJobSeq, jTenant, jSeq)
	jobTypeOrder      = orderOf(pfxJobType, jTenant, jType, jSeq)
	jobExpOrder       = orderOf(pfxJobExp, jExpires, jSeq, jTenant)
	jobQueueOrder     = orderOf(pfxJobQueue, jTenant, jRunAt, jSeq)
	jobQueueTypeOrder = orderOf(pfxJobQueueType, jTenant, jType, jRunAt, jSeq)
	jobRunningOrder   = orderOf(pfxJobRunning, jTenant, jSeq)
	jobStateOrder     = orderOf(pfxJobState, jTenant, jState, jSeq)
	jobTenantGroup    = orderOf(0, jTenant).key
	jobTypeGroup      = orderOf(0, jTenant, jType).key
	jobStateGroup     = orderOf(0, jTenant, jState).key

	watermarkOrder    = orderOf(pfxWatermarks, wTenant, wClient, wNonce)
	watermarkAgeOrder = orderOf(0, wUpdated, wTenant, wClient, wNonce) // in memory only
)

// The fields the orders sort by.
var (
	eTenant  = byString(func(e *Entry) string { return e.Tenant })
	eKey     = byString(func(e *Entry) string { return e.Key })
	eJobID   = byString(func(e *Entry) string { return e.JobID })
	eExpires = byInt64(func(e *Entry) int64 { return e.ExpiresAt })

	jTenant  = byString(func(j *Job) string { return j.Tenant })
	jID      = byString(func(j *Job) string { return j.ID })
	jType    = byString(func(j *Job) string { return j.Type })
	jSeq     = byUint64(func(j *Job) uint64 { return j.Seq })
	jExpires = byInt64(func(j *Job) int64 { return j.ExpiresAt })
	jRunAt   = byInt64(func(j *Job) int64 { return j.Life.RunAt })
	jState   = byUint64(func(j *Job) uint64 { return uint64(stateOf(j)) })

	wTenant  = byString(func(w *Watermark) string { return w.Tenant })
	wClient  = byString(func(w *Watermark) string { return w.ClientID })
	wNonce   = byString(func(w *Watermark) string { return w.Nonce })
	wUpdated = byInt64(func(w *Watermark) int64 { return w.UpdatedAt })
)

// field is one field of an order: exactly one of str, i64 and u64 is set.
type field[T any] struct {
	str func(T) string
	i64 func(T) int64
	u64 func(T) uint64
}

func byString[T any](f func(T) string) field[T] { return field[T]{str: f} }
func byInt64[T any](f func(T) int64) field[T]   { return field[T]{i64: f} }
func byUint64[T any](f func(T) uint64) field[T] { return field[T]{u64: f} }

// order is one order of the state: its keys' prefix on disk, its
// comparator, and its key encoder (what follows the prefix).
type order[T any] struct {
	prefix byte
	less   func(a, b T) bool
	key    func(b []byte, item T) []byte
}

// orderOf returns the order of fields under prefix: strings compare as
// strings.Compare and encode with engine.AppendString, an int64 with
// engine.AppendInt64, a uint64 with engine.AppendUint64, all
// order-preserving, so pebble's byte order of the keys is less's order.
func orderOf[T any](prefix byte, fields ...field[T]) order[T] {
	less := func(a, b T) bool {
		for _, f := range fields {
			var c int
			switch {
			case f.str != nil:
				c = strings.Compare(f.str(a), f.str(b))
			case f.i64 != nil:
				c = cmp.Compare(f.i64(a), f.i64(b))
			default:
				c = cmp.Compare(f.u64(a), f.u64(b))
			}
			if c != 0 {
				return c < 0
			}
		}
		return false
	}
	key := func(b []byte, item T) []byte {
		for _, f := range fields {
			switch {
			case f.str != nil:
				b = engine.AppendString(b, f.str(item))
			case f.i64 != nil:
				b = engine.AppendInt64(b, f.i64(item))
			default:
				b = engine.AppendUint64(b, f.u64(item))
			}
		}
		return b
	}
	return order[T]{prefix, less, key}
}
