package engine

import (
	"encoding/binary"
	"strings"
)

// Order-preserving key encoding: a string is its bytes with 0x00 escaped as
// 0x00 0xFF and terminated by 0x00 0x01, so byte order of the encodings is
// strings.Compare order of the strings, field by field; an int64 is
// big-endian with the sign bit flipped; a uint64 is big-endian.

// AppendString appends s's key encoding to b.
func AppendString(b []byte, s string) []byte {
	for {
		i := strings.IndexByte(s, 0)
		if i < 0 {
			return append(append(b, s...), 0, 1)
		}
		b = append(append(b, s[:i]...), 0, 0xFF)
		s = s[i+1:]
	}
}

// AppendInt64 appends v's key encoding to b.
func AppendInt64(b []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(v)^(1<<63))
}

// AppendUint64 appends v's key encoding to b.
func AppendUint64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }
