package walstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// tidwall/wal names a segment by the wal index of its first entry, as 20
// decimal digits; a truncation in progress leaves "<name>.START" or
// "<name>.END", written through "<name>.START.TEMP" / "<name>.END.TEMP".
const (
	segmentNameLen = 20
	tempSuffix     = ".TEMP"
	startSuffix    = ".START"
	endSuffix      = ".END"
)

type segmentFile struct {
	index uint64 // wal index of the first entry
	path  string
}

// listSegments returns the finished segment files of dir in index order.
func listSegments(dir string) ([]segmentFile, error) {
	ents, err := os.ReadDir(dir) // sorted by name = by index (zero-padded)
	if err != nil {
		return nil, err
	}
	var segs []segmentFile
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || len(name) != segmentNameLen {
			continue
		}
		idx, err := strconv.ParseUint(name, 10, 64)
		if err != nil || idx == 0 {
			continue
		}
		segs = append(segs, segmentFile{index: idx, path: filepath.Join(dir, name)})
	}
	return segs, nil
}

// hasPendingTruncation reports whether dir still holds a .START or .END
// segment, i.e. a truncation that tidwall/wal could not finish on open.
func hasPendingTruncation(dir string) (bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasSuffix(n, startSuffix) || strings.HasSuffix(n, endSuffix) {
			return true, nil
		}
	}
	return false, nil
}

// removeTempFiles deletes the leftovers of a tidwall/wal atomic write that
// crashed before its rename: the truncation it prepared never took effect.
func removeTempFiles(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tempSuffix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

type scanResult struct {
	entries  uint64 // whole, valid entries that survive (after the repair below)
	walFirst uint64 // wal index of the first entry
	base     uint64 // raft index = base + wal index - 1; valid when entries > 0
	torn     *tornTail
}

// tornTail is the part of the last segment that recovery drops.
type tornTail struct {
	path   string
	offset int64  // bytes [0, offset) are kept
	size   int64  // file size before the repair
	kept   int    // whole entries kept in this segment
	reason string // why the record at offset was rejected
}

// scanSegments reads and checks every record of every segment: framing,
// version, structure, checksum, and that raft indexes are consecutive and
// agree with the segment names. The first bad record decides:
//
//   - a record whose version byte is not recordVersion but whose checksum
//     matches: a *VersionError, wherever it lies. It was written whole by
//     another build; it is neither damage nor a torn write.
//   - in a segment that is not the last one: a *CorruptError. Those segments
//     were fsynced before the next one was created; damage there is
//     corruption, and dropping it would silently lose committed entries.
//   - in the last segment, in a batch that is not the final one
//     (laterBatchFollows): a *CorruptError, for the same reason.
//   - otherwise it is the torn final write: the result names the tail to cut.
func scanSegments(dir string) (scanResult, error) {
	var res scanResult
	segs, err := listSegments(dir)
	if err != nil || len(segs) == 0 {
		return res, err
	}
	res.walFirst = segs[0].index
	next := segs[0].index // wal index of the next record
	haveBase := false
	for i, seg := range segs {
		if seg.index != next {
			return res, fmt.Errorf("%w: segment %s starts at wal index %d, want %d",
				ErrCorrupt, seg.path, seg.index, next)
		}
		data, err := os.ReadFile(seg.path)
		if err != nil {
			return res, err
		}
		last := i == len(segs)-1
		pos, kept := 0, 0
		for pos < len(data) {
			rec, size, bad := frameAt(data[pos:])
			if bad == nil {
				switch {
				case !haveBase && rec.index+1 < next:
					bad = errRecord(fmt.Sprintf("record holds index %d, too small for wal index %d", rec.index, next))
				case !haveBase:
					res.base, haveBase = rec.index+1-next, true
				case rec.index != res.base+next-1:
					bad = errRecord(fmt.Sprintf("record holds index %d, want %d", rec.index, res.base+next-1))
				}
			}
			if bad != nil {
				var ve errVersion
				if errors.As(bad, &ve) && sealedRecord(recordIn(data[pos:pos+size])) {
					// A whole record of another version, not damage: cutting
					// it as a torn tail would drop entries this build
					// merely cannot read.
					return res, &VersionError{Segment: seg.path, Offset: int64(pos), WalIndex: next, Version: byte(ve)}
				}
				want := uint64(0) // raft index the bad record should hold; 0: unknown
				if haveBase {
					want = res.base + next - 1
				}
				if !last {
					return res, &CorruptError{Segment: seg.path, Offset: int64(pos), WalIndex: next,
						Why: "damage in a segment that is not the last one", Err: bad}
				}
				if why := laterBatchFollows(data, pos, want); why != "" {
					return res, &CorruptError{Segment: seg.path, Offset: int64(pos), WalIndex: next, Why: why, Err: bad}
				}
				res.torn = &tornTail{path: seg.path, offset: int64(pos), size: int64(len(data)),
					kept: kept, reason: bad.Error()}
				break
			}
			pos += size
			next++
			kept++
			res.entries++
		}
	}
	return res, nil
}

// frameAt parses the wal frame (uvarint length, record) at the start of b
// and returns the record and the frame's size.
func frameAt(b []byte) (record, int, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return record{}, 0, errRecord("incomplete length prefix")
	}
	if n > uint64(len(b)-k) {
		return record{}, 0, errRecord(fmt.Sprintf("record of %d bytes runs past the end of the file (%d bytes left)", n, len(b)-k))
	}
	rec, err := parseRecord(b[k : k+int(n)])
	return rec, k + int(n), err
}

// recordIn returns the record inside the wal frame f, as sized by frameAt.
func recordIn(f []byte) []byte {
	_, k := binary.Uvarint(f)
	if k <= 0 {
		return nil
	}
	return f[k:]
}

// laterBatchFollows reports whether the damaged record at offset from
// belongs to a batch that is not the final one, and if so names the
// evidence. want is the raft index the damaged record should hold (0 if
// unknown); evidence must lie beyond it.
//
// The argument: StoreLogs writes a batch and fsyncs it once, and raft calls
// it again only after it returned, so a crash can tear only the bytes of the
// final batch (the one whose fsync had not completed); every earlier batch
// was durable and may have been acknowledged. A record whole and valid
// after the damage that opens a batch (flagBatchStart) is a batch written
// after the damaged record's batch was complete, hence after that batch was
// fsynced: the damage hit durable data. A batch end followed by another
// whole record proves the same (the end may be the damaged batch's own, but
// the record after it opens a later batch); it matters when the damage also
// hit the next batch's first record.
//
// Framing may be lost at from, so this resynchronises byte by byte;
// parseRecord rejects almost every false start on structure before
// computing a CRC.
func laterBatchFollows(data []byte, from int, want uint64) string {
	sawBatchEnd := false
	for o := from + 1; o < len(data); {
		rec, size, err := frameAt(data[o:])
		if err != nil || (want != 0 && rec.index <= want) {
			o++
			continue
		}
		switch {
		case rec.flags&flagBatchStart != 0:
			return fmt.Sprintf("a later batch starts at offset %d (index %d)", o, rec.index)
		case sawBatchEnd:
			return fmt.Sprintf("a batch ends before offset %d and another record follows (index %d)", o, rec.index)
		}
		if rec.flags&flagBatchEnd != 0 {
			sawBatchEnd = true
		}
		o += size
	}
	return ""
}

// CorruptError is what Open returns when a damaged record lies in data that
// was already durable, so that raft may have acknowledged it: cutting it
// could lose committed entries, so the store refuses to open and changes
// nothing on disk. It matches ErrCorrupt.
type CorruptError struct {
	Segment  string // the damaged segment file
	Offset   int64  // byte offset of the damaged record in Segment
	WalIndex uint64 // wal index of the damaged record
	Why      string // why the damage cannot be a torn final write
	Err      error  // what is wrong with the record
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%v: segment %s, offset %d (wal index %d): %v; not a torn final write (%s): "+
		"this record was durable and may have been acknowledged, so it is not cut and nothing was changed on disk. "+
		"To recover this manager, stop it, remove it from the group (oncectl raft remove-peer), move its whole data "+
		"directory aside, not only raft/ (keep it for inspection), and start it with an empty one: it joins again "+
		"and the leader sends it a snapshot. If a majority of the managers report this, restore the datacenter from a backup",
		ErrCorrupt, e.Segment, e.Offset, e.WalIndex, e.Err, e.Why)
}

// Unwrap returns ErrCorrupt and the record's error.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// VersionError is what Open returns when a segment holds a whole record
// (its checksum matches) whose version this build does not read, such as a
// record written before 1.0. The store does not open and changes nothing on
// disk: such a record is neither damage nor a torn write, and cutting it
// would drop entries that may have been acknowledged. It matches
// ErrUnsupportedVersion.
type VersionError struct {
	Segment  string // the segment file
	Offset   int64  // byte offset of the record's frame in Segment
	WalIndex uint64 // wal index of the record
	Version  byte   // the record's version byte
}

func (e *VersionError) Error() string {
	what := fmt.Sprintf("the record has version %d, which this build does not know", e.Version)
	if e.Version == recordVersionPre10 {
		what = "the record is a pre-1.0 log record (version 1), which this build does not read"
	}
	return fmt.Sprintf("%v: segment %s, offset %d (wal index %d): %s; this build reads record version %d only. "+
		"Nothing was changed on disk. To recover this manager, stop it, move its raft data directory aside and "+
		"start it with an empty one: the leader adds it back and sends it a snapshot",
		ErrUnsupportedVersion, e.Segment, e.Offset, e.WalIndex, what, recordVersion)
}

// Unwrap returns ErrUnsupportedVersion.
func (e *VersionError) Unwrap() error { return ErrUnsupportedVersion }

// repairTail cuts the torn tail off its segment and makes the cut durable.
func repairTail(t *tornTail) error {
	f, err := os.OpenFile(t.path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = errors.Join(f.Truncate(t.offset), f.Sync())
	return errors.Join(err, f.Close())
}
