// Package jobid derives a job's ID from what identifies its submission:
// (tenant, idempotency key, fingerprint). Every datacenter a job names, and
// every gate that forwards it, computes the same ID without talking to any
// other datacenter; see docs/multidc.md.
//
// The ID is a UUID version 8 (RFC 9562, section 5.8: "custom") whose 122 free
// bits are the first bits of SHA-256 over the three inputs, each prefixed by
// its length so that no two input triples share an encoding.
package jobid

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/google/uuid"
)

// domain separates this hash from every other SHA-256 of the same inputs.
const domain = "once/jobid/v1"

// Derive returns the job ID of the submission (tenant, key, fingerprint), as
// a UUID string in its canonical 36-character form.
func Derive(tenant, key, fingerprint string) string {
	// The hashed bytes are built in one buffer, on the stack for the usual
	// sizes: SHA-256 over them in one call, no digest on the heap.
	var buf [256]byte
	in := buf[:0]
	for _, s := range [...]string{domain, tenant, key, fingerprint} {
		in = binary.BigEndian.AppendUint64(in, uint64(len(s)))
		in = append(in, s...)
	}
	sum := sha256.Sum256(in)
	var u uuid.UUID
	copy(u[:], sum[:16])
	u[6] = (u[6] & 0x0f) | 0x80 // version 8
	u[8] = (u[8] & 0x3f) | 0x80 // variant RFC 9562
	return u.String()
}
