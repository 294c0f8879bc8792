//go:build !race

package gate

import (
	"bytes"
	"testing"

	"github.com/once-dev/once/internal/fingerprint"
	"github.com/once-dev/once/pkg/api"
)

// Allocation counts, which the race detector's instrumentation would
// falsify (docs/testing.md).

// TestFingerprintBodyOfASetAllocatesNothing: a body whose datacenters list
// is already the sorted set it resolves to is fingerprinted as it is, no
// copy built (what it gives is checkCanonical's).
func TestFingerprintBodyOfASetAllocatesNothing(t *testing.T) {
	canonical, members, err := fingerprint.CanonicalizeObject([]byte(invoiceBody))
	if err != nil {
		t.Fatal(err)
	}
	job, err := api.DecodeJobRequest(canonical, "home")
	if err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() { fingerprintBody(canonical, members, job, false) }); allocs != 0 {
		t.Fatalf("fingerprintBody allocates %v times", allocs)
	}
	if got, _ := fingerprintBody(canonical, members, job, false); !bytes.Equal(got, canonical) {
		t.Fatalf("fingerprint body %s, want the canonical body %s", got, canonical)
	}
}
