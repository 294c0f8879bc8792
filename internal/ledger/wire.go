package ledger

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// The primitives of the binary formats (commands and snapshot records); see
// docs/ledger.md. Every value has exactly one encoding, and the decoder refuses
// any other (non-minimal varints, bools other than 0 and 1, trailing bytes), so
// Decode(Encode(x)) == x and Encode(Decode(b)) == b for every b that decodes.
//
//	uvarint  encoding/binary unsigned varint, minimal length
//	int64    8 bytes, big-endian two's complement (times: unix nanoseconds)
//	bool     1 byte, 0 or 1
//	string   uvarint length, then the bytes
//	bytes    uvarint length, then the bytes (length 0 decodes as nil)
//	strings  uvarint count, then count strings (count 0 decodes as nil)

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendInt64(b []byte, v int64) []byte { return binary.BigEndian.AppendUint64(b, uint64(v)) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// sizeStrings is a capacity hint for appendStrings.
func sizeStrings(ss []string) int {
	n := binary.MaxVarintLen64
	for _, s := range ss {
		n += binary.MaxVarintLen64 + len(s)
	}
	return n
}

// decoder reads primitives from a byte slice. The first failure sticks in err
// (wrapping base, ErrMalformed or ErrBadSnapshot) and every later read returns
// a zero value, so a decode function reads all fields and checks err once. It
// never panics and never allocates more than the input's length.
//
// A decoder with share set allocates its strings once: the first string it
// reads copies the whole input into one string, and every string is a part
// of it, where each would otherwise be a copy of its own (a command's tenant,
// key, job ID, type, ...: about a fifth of an apply's allocations). A string
// read so keeps the whole input alive, so share is for inputs no larger than
// the item the strings belong to (one command of a batch, one record of the
// store), decoded where the item's strings do not outlive its record: the
// disk store's apply path (DecodeCommand's share, storeValue). What the state
// keeps in memory beyond the apply (a new watermark, a tenant's name in its
// counters, a RUNNING job's lease key, an owed entry) it clones; and an input
// longer than maxShared (a large payload) is read string by string as without
// share, so a string kept by mistake never keeps more than maxShared bytes.
type decoder struct {
	b     []byte
	off   int
	err   error
	base  error
	share bool
	s     string // with share: the input, once a string was read
}

// maxShared is the longest input whose strings a decoder with share reads
// as parts of one copy (decoder).
const maxShared = 1 << 10

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at offset %d", d.base, what, d.off)
	}
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	if n != uvarintLen(v) {
		d.fail("non-minimal varint")
		return 0
	}
	d.off += n
	return v
}

// uvarintLen is the length of v's minimal uvarint: 7 bits a byte.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func (d *decoder) int64() int64 {
	if d.err != nil {
		return 0
	}
	if d.remaining() < 8 {
		d.fail("truncated int64")
		return 0
	}
	v := int64(binary.BigEndian.Uint64(d.b[d.off:]))
	d.off += 8
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.remaining() < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.off--
	d.fail("bad bool")
	return false
}

// status reads an HTTP status: a uvarint of at most 0xFFFF.
func (d *decoder) status() int {
	st := d.uvarint()
	if st > 0xFFFF {
		d.fail("status out of range")
		return 0
	}
	return int(st)
}

// length reads a length and checks that at least min*length bytes remain, so a
// forged length can never make the caller allocate more than the input.
func (d *decoder) length(min int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(d.remaining()/min) {
		d.fail("length past the end")
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.length(1)
	if d.err != nil || n == 0 {
		return ""
	}
	var s string
	if d.share && len(d.b) <= maxShared {
		if d.s == "" {
			d.s = string(d.b)
		}
		s = d.s[d.off : d.off+n]
	} else {
		s = string(d.b[d.off : d.off+n])
	}
	d.off += n
	return s
}

// bytes returns a copy (never an alias of the input), clipped to its length.
func (d *decoder) bytes() []byte {
	n := d.length(1)
	if d.err != nil || n == 0 {
		return nil
	}
	p := make([]byte, n)
	copy(p, d.b[d.off:])
	d.off += n
	return p
}

func (d *decoder) strings() []string {
	n := d.length(1) // every string takes at least its length byte
	if d.err != nil || n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.string()
	}
	if d.err != nil {
		return nil
	}
	return ss
}

// finish fails on trailing bytes and returns the sticky error.
func (d *decoder) finish() error {
	if d.err == nil && d.remaining() != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", d.remaining()))
	}
	return d.err
}
