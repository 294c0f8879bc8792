package walstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/hashicorp/raft"
)

// Record format. Each raft.Log is one tidwall/wal entry; the wal
// frames it as uvarint(len(record)) || record. The record itself is
//
//	version    1 byte   recordVersion (2)
//	flags      1 byte   flagBatchEnd | flagAppendedAt | flagBatchStart
//	index      uvarint  raft.Log.Index
//	term       uvarint  raft.Log.Term
//	type       1 byte   raft.Log.Type
//	dataLen    uvarint  then dataLen bytes of raft.Log.Data
//	extLen     uvarint  then extLen bytes of raft.Log.Extensions
//	[seconds   varint   raft.Log.AppendedAt.Unix()      ] only with flagAppendedAt
//	[nanos     uvarint  raft.Log.AppendedAt.Nanosecond()] only with flagAppendedAt
//	crc        4 bytes  CRC-32C (Castagnoli) of every byte above, little-endian
//
// The index makes every record self-describing: the offset between raft and
// wal indexes is derived from the first record, and a record that lands at
// the wrong place is detected. flagBatchStart and flagBatchEnd mark the
// first and the last record of a StoreLogs call; recovery uses them to tell
// a torn final write from damage to data that was already durable (see
// scan.go).
//
// recordVersion is the only version written and read. A record that carries
// another version but is otherwise whole (its checksum matches) is not
// damage: Open refuses the log with a *VersionError (see scan.go) and
// changes nothing on disk.
const (
	recordVersion byte = 2
	// recordVersionPre10 is the version byte of records written by builds
	// before 1.0; this build does not read them.
	recordVersionPre10 byte = 1

	flagBatchEnd   byte = 1 << 0
	flagAppendedAt byte = 1 << 1
	flagBatchStart byte = 1 << 2
	knownFlags          = flagBatchEnd | flagAppendedAt | flagBatchStart

	crcSize = 4
	// minRecordSize is version, flags, index, term, type, dataLen, extLen
	// (one byte each at least) and the CRC.
	minRecordSize = 7 + crcSize
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecord appends the encoding of l to dst; batchStart and batchEnd say
// whether l is the first and the last entry of its StoreLogs batch.
func appendRecord(dst []byte, l *raft.Log, batchStart, batchEnd bool) []byte {
	start := len(dst)
	var flags byte
	if batchStart {
		flags |= flagBatchStart
	}
	if batchEnd {
		flags |= flagBatchEnd
	}
	if !l.AppendedAt.IsZero() {
		flags |= flagAppendedAt
	}
	dst = append(dst, recordVersion, flags)
	dst = binary.AppendUvarint(dst, l.Index)
	dst = binary.AppendUvarint(dst, l.Term)
	dst = append(dst, byte(l.Type))
	dst = binary.AppendUvarint(dst, uint64(len(l.Data)))
	dst = append(dst, l.Data...)
	dst = binary.AppendUvarint(dst, uint64(len(l.Extensions)))
	dst = append(dst, l.Extensions...)
	if flags&flagAppendedAt != 0 {
		dst = binary.AppendVarint(dst, l.AppendedAt.Unix())
		dst = binary.AppendUvarint(dst, uint64(l.AppendedAt.Nanosecond()))
	}
	sum := crc32.Checksum(dst[start:], castagnoli)
	return binary.LittleEndian.AppendUint32(dst, sum)
}

// record is a parsed record whose Data and Extensions still point into the
// buffer it was parsed from.
type record struct {
	flags      byte
	index      uint64
	term       uint64
	typ        raft.LogType
	data       []byte
	ext        []byte
	appendedAt time.Time
}

// errRecord describes why a record does not parse. It is wrapped in
// ErrCorrupt by the callers that report it.
type errRecord string

func (e errRecord) Error() string { return string(e) }

// errVersion is parseRecord's error for a record whose version byte is not
// recordVersion. Alone it says nothing about the rest of the record: damage
// and garbage produce it too (see sealedRecord).
type errVersion byte

func (e errVersion) Error() string { return fmt.Sprintf("unknown record version %d", byte(e)) }

// parseRecord checks the structure first (cheap: a handful of varints whose
// lengths must add up exactly) and the CRC second, so that scanning damaged
// bytes for the next valid record rarely pays for a checksum.
func parseRecord(b []byte) (record, error) {
	var r record
	if len(b) < minRecordSize {
		return r, errRecord(fmt.Sprintf("record of %d bytes is shorter than the minimum %d", len(b), minRecordSize))
	}
	body := b[:len(b)-crcSize]
	if body[0] != recordVersion {
		return r, errVersion(body[0])
	}
	r.flags = body[1]
	if r.flags&^knownFlags != 0 {
		return r, errRecord(fmt.Sprintf("unknown record flags %#x", r.flags))
	}
	p := body[2:]
	var ok bool
	if r.index, p, ok = uvarint(p); !ok {
		return r, errRecord("bad index")
	}
	if r.term, p, ok = uvarint(p); !ok {
		return r, errRecord("bad term")
	}
	if len(p) == 0 {
		return r, errRecord("missing type")
	}
	r.typ, p = raft.LogType(p[0]), p[1:]
	if r.data, p, ok = lenPrefixed(p); !ok {
		return r, errRecord("bad data length")
	}
	if r.ext, p, ok = lenPrefixed(p); !ok {
		return r, errRecord("bad extensions length")
	}
	if r.flags&flagAppendedAt != 0 {
		sec, n := binary.Varint(p)
		if n <= 0 {
			return r, errRecord("bad appended-at seconds")
		}
		p = p[n:]
		var nsec uint64
		if nsec, p, ok = uvarint(p); !ok || nsec >= uint64(time.Second) {
			return r, errRecord("bad appended-at nanoseconds")
		}
		r.appendedAt = time.Unix(sec, int64(nsec))
	}
	if len(p) != 0 {
		return r, errRecord(fmt.Sprintf("%d trailing bytes", len(p)))
	}
	want := binary.LittleEndian.Uint32(b[len(b)-crcSize:])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return r, errRecord(fmt.Sprintf("checksum mismatch: stored %#08x, computed %#08x", want, got))
	}
	return r, nil
}

// sealedRecord reports whether the record b (without its wal frame) ends in
// the CRC-32C of the bytes before it, as every record this store ever wrote
// does, whatever its version. A torn or damaged record almost never passes.
func sealedRecord(b []byte) bool {
	if len(b) < minRecordSize {
		return false
	}
	body := b[:len(b)-crcSize]
	return crc32.Checksum(body, castagnoli) == binary.LittleEndian.Uint32(b[len(b)-crcSize:])
}

// into copies r into out. Data and Extensions get fresh memory (one
// allocation for both) because raft and the FSM may keep them.
func (r *record) into(out *raft.Log) {
	out.Index = r.index
	out.Term = r.term
	out.Type = r.typ
	out.Data, out.Extensions = nil, nil
	if n := len(r.data) + len(r.ext); n > 0 {
		buf := make([]byte, n)
		copy(buf, r.data)
		copy(buf[len(r.data):], r.ext)
		if len(r.data) > 0 {
			out.Data = buf[:len(r.data):len(r.data)]
		}
		if len(r.ext) > 0 {
			out.Extensions = buf[len(r.data):]
		}
	}
	out.AppendedAt = r.appendedAt
}

func uvarint(p []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, p, false
	}
	return v, p[n:], true
}

func lenPrefixed(p []byte) ([]byte, []byte, bool) {
	n, rest, ok := uvarint(p)
	if !ok || n > uint64(len(rest)) {
		return nil, p, false
	}
	return rest[:n:n], rest[n:], true
}

// frameSize is how many bytes the wal spends on a record of n bytes.
func frameSize(n int) int64 {
	var buf [binary.MaxVarintLen64]byte
	return int64(binary.PutUvarint(buf[:], uint64(n)) + n)
}
