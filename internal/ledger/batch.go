package ledger

import (
	"fmt"
)

// Batch command types (docs/ledger.md, "Batch commands"). One raft log entry
// carries many submissions' Admits, or many workers' commands, so a leader
// under load writes, replicates, fsyncs and applies one entry where it wrote
// one per submission.
const (
	// TypeAdmitBatch carries Admits, applied in order.
	TypeAdmitBatch CommandType = 0x05
	// TypeWorkerBatch carries the workers' Leases, Heartbeats, Completes and
	// Fails, applied in order.
	TypeWorkerBatch CommandType = 0x0E
)

// MaxBatchItems bounds the items of one batch command; a batch with more (or
// none) is refused (OutcomeInvalid). The manager's own bound is lower.
const MaxBatchItems = 1 << 16

// AdmitBatch applies its Admits in order, each exactly as an Admit of its own
// log entry would apply at that point (same checks, same effects, same
// Result), and answers a Result per item in Result.Items (OutcomeBatch). An
// item that breaks a rule of its command gets OutcomeInvalid and changes
// nothing; the others apply. The batch is invalid as a whole (no item
// applied) only when it does not decode or holds no item or more than
// MaxBatchItems. Encode skips items of any other type.
//
// The i-th item's job gets the Seq an Admit at index+i would get (index+i,
// or the last Seq given plus one if that is higher), so Seqs stay unique and
// in log order though a batch's Seqs may pass its index.
type AdmitBatch struct {
	Items []Command
}

// WorkerBatch applies the workers' commands (Lease, Heartbeat, Complete,
// Fail) in order, as AdmitBatch does its items: each exactly as the command
// of its own entry would apply at that point, lease fencing and
// completion-recorded-once included. Encode skips items of any other type.
type WorkerBatch struct {
	Items []Command
}

func (WorkerBatch) CommandType() CommandType { return TypeWorkerBatch }

// The item types each batch carries (checked by type byte before an item is
// decoded, so batches never nest).
func admitItem(t CommandType) bool { return t == TypeAdmit }
func workerItem(t CommandType) bool {
	switch t {
	case TypeLease, TypeHeartbeat, TypeComplete, TypeFail:
		return true
	}
	return false
}

func (b AdmitBatch) sizeHint() int  { return batchSizeHint(b.Items) }
func (b WorkerBatch) sizeHint() int { return batchSizeHint(b.Items) }

func (b AdmitBatch) appendBody(out []byte) []byte  { return appendBatch(out, b.Items, admitItem) }
func (b WorkerBatch) appendBody(out []byte) []byte { return appendBatch(out, b.Items, workerItem) }

func batchSizeHint(items []Command) int {
	n := varintSize
	for _, c := range items {
		n += varintSize + 2 + c.sizeHint()
	}
	return n
}

// appendBatch appends a batch body: the count, then each item of a type the
// batch carries (the others are skipped).
func appendBatch(out []byte, items []Command, carries func(CommandType) bool) []byte {
	n := 0
	for _, c := range items {
		if carries(c.CommandType()) {
			n++
		}
	}
	out = appendUvarint(out, uint64(n))
	for _, c := range items {
		if carries(c.CommandType()) {
			out = appendItem(out, c)
		}
	}
	return out
}

func (AdmitBatch) CommandType() CommandType { return TypeAdmitBatch }

// Batch body (every batch type):
//
//	count uvarint, then count items, each: length uvarint · a whole command
//	(type byte · version byte · body) of a type the batch carries.

// appendItem appends length · command without a scratch buffer.
func appendItem(out []byte, c Command) []byte {
	return appendFramed(out, func(b []byte) []byte { return AppendCommand(b, c) })
}

// appendFramed appends length · what write appends: it writes after a
// maximal length slot, then moves it down to the minimal one.
func appendFramed(out []byte, write func([]byte) []byte) []byte {
	start := len(out)
	out = append(out, make([]byte, varintSize)...)
	out = write(out)
	n := len(out) - start - varintSize
	l := uvarintLen(uint64(n))
	appendUvarint(out[start:start], uint64(n))
	copy(out[start+l:], out[start+varintSize:])
	return out[:start+l+n]
}

// decodeItems reads a batch body; each item must be a command of a type ok
// accepts (checked before decoding it, so batches never nest) that decodes.
func decodeItems(d *decoder, ok func(CommandType) bool) []Command {
	n := d.length(3) // an item takes at least its length and two header bytes
	if d.err != nil {
		return nil
	}
	items := make([]Command, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		if c := decodeItem(d, i, ok); c != nil {
			items = append(items, c)
		}
	}
	return items
}

// decodeItem reads one length-prefixed command (the i-th of its container)
// of a type ok accepts; nil, with d failed, when it cannot.
func decodeItem(d *decoder, i int, ok func(CommandType) bool) Command {
	l := d.length(1)
	if d.err != nil {
		return nil
	}
	if l == 0 || !ok(CommandType(d.b[d.off])) {
		d.fail(fmt.Sprintf("item %d: not a command this batch carries", i))
		return nil
	}
	c, err := decodeCommand(d.b[d.off:d.off+l], d.share)
	if err != nil {
		d.fail(fmt.Sprintf("item %d: %v", i, err))
		return nil
	}
	d.off += l
	return c
}

func (b AdmitBatch) apply(s *state, ax *applyCtx) Result  { return s.applyBatch(ax, b.Items) }
func (b WorkerBatch) apply(s *state, ax *applyCtx) Result { return s.applyBatch(ax, b.Items) }

// applyBatch applies the items of a batch in order, each as the command of its
// own entry would apply (ledger time included); the index was checked by apply.
func (s *state) applyBatch(ax *applyCtx, items []Command) Result {
	if len(items) == 0 || len(items) > MaxBatchItems {
		return invalidf("batch: %d items, want 1..%d", len(items), MaxBatchItems)
	}
	res := Result{Outcome: OutcomeBatch, Items: make([]Result, len(items))}
	defer func() { ax.item = 0 }()
	for i, c := range items {
		ax.item = uint64(i)
		r := c.apply(s, ax)
		if r.Outcome != OutcomeInvalid {
			s.raiseLedgerTime(c)
		}
		res.Items[i] = r
	}
	return res
}

// nextSeq returns the Seq of a job committed at index (for a batch item:
// the entry's index plus the item's position): the index, unless a batch gave
// Seqs up to or past it, then the next one.
func (s *state) nextSeq(index uint64) uint64 {
	seq := max(index, s.lastSeq+1)
	s.lastSeq = seq
	return seq
}

// EncodeBatch returns a batch command of type t (TypeAdmitBatch or
// TypeWorkerBatch) whose items are already encoded
// commands (Encode's output), so a proposer that encoded each submission's
// command once need not encode it again. Items of a type the batch does not
// carry make the batch invalid when applied; nothing is checked here.
func EncodeBatch(t CommandType, items [][]byte) []byte {
	n := 2 + varintSize
	for _, it := range items {
		n += varintSize + len(it)
	}
	b := append(make([]byte, 0, n), byte(t), FormatVersion)
	b = appendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = appendBytes(b, it)
	}
	return b
}
