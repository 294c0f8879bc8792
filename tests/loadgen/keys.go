package loadgen

import (
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
)

// keyStream generates the Idempotency-Keys of one worker: structured keys
// <prefix>-<worker>:<seq>:<nonce>, the nonce random per worker and run (a client
// restart, as the contract puts it), seq counting from 1. A stream is owned by
// one goroutine.
type keyStream struct {
	mode   KeyMode
	stream uint64 // worker number
	head   []byte // "<prefix>-<worker>:"
	tail   string // ":<nonce>"
	seq    uint64 // last sequence number issued

	// duplicates
	ratio float64
	debt  float64
	ring  []uint64 // recent sequence numbers
	next  int      // ring slot to overwrite once full
	rng   *rand.Rand

	// storm
	fixed    string
	fixedIdx uint64

	buf []byte
}

// keyIndex identifies a generated key for the job-id tracker.
func keyIndex(stream, seq uint64) uint64 { return stream<<40 | seq }

// newNonce returns 16 lowercase hex characters from 8 random bytes.
func newNonce() string {
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}

func newKeyStream(s Spec, worker int, nonce, stormKey string) *keyStream {
	ks := &keyStream{
		mode:   s.Keys,
		stream: uint64(worker),
		head:   []byte(s.ClientPrefix + "-" + strconv.Itoa(worker) + ":"),
		tail:   ":" + nonce,
		ratio:  s.DuplicateRatio,
	}
	switch s.Keys {
	case KeysDuplicates:
		ks.ring = make([]uint64, 0, s.RecentKeys)
		var seed [16]byte
		_, _ = crand.Read(seed[:])
		ks.rng = rand.New(rand.NewPCG(le64(seed[:8]), le64(seed[8:])))
	case KeysStorm:
		ks.fixed, ks.fixedIdx = stormKey, keyIndex(0, 1)
	}
	return ks
}

// stormKeyOf is the single key of a storm run: worker 0's first key.
func stormKeyOf(s Spec, nonce string) string {
	return s.ClientPrefix + "-0:1:" + nonce
}

func le64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// Next returns the next key, its tracker index and whether it repeats a key
// this stream sent before.
func (ks *keyStream) Next() (key string, idx uint64, reused bool) {
	switch ks.mode {
	case KeysStorm:
		// Whether this request repeats the key depends on the other workers;
		// Run counts a storm's repeats as all requests but one.
		return ks.fixed, ks.fixedIdx, false
	case KeysDuplicates:
		// The ratio is kept exactly by accumulating it: every request adds
		// ratio to the debt, every reuse pays one off.
		ks.debt += ks.ratio
		if ks.debt >= 1 && len(ks.ring) > 0 {
			ks.debt--
			seq := ks.ring[ks.rng.IntN(len(ks.ring))]
			return ks.format(seq), keyIndex(ks.stream, seq), true
		}
	}
	ks.seq++
	if ks.mode == KeysDuplicates {
		if len(ks.ring) < cap(ks.ring) {
			ks.ring = append(ks.ring, ks.seq)
		} else {
			ks.ring[ks.next] = ks.seq
			ks.next = (ks.next + 1) % len(ks.ring)
		}
	}
	return ks.format(ks.seq), keyIndex(ks.stream, ks.seq), false
}

// keysSent is how many distinct keys the stream generated.
func (ks *keyStream) keysSent() uint64 {
	if ks.mode == KeysStorm {
		return 0 // counted once for the whole run
	}
	return ks.seq
}

func (ks *keyStream) format(seq uint64) string {
	b := append(ks.buf[:0], ks.head...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, ks.tail...)
	ks.buf = b
	return string(b)
}
