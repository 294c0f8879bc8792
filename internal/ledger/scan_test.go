package ledger

import (
	"fmt"
	"testing"
)

// TestResolvedMultiDatacenter: the scan yields the resolved entries whose
// request names another datacenter, committed and rejected, in (tenant, key)
// order, and no single-datacenter ones; returning
// false stops it.
func TestResolvedMultiDatacenter(t *testing.T) {
	h := newHarness(t)
	const now = 1_000_000
	multi := func(key string) Reserve {
		r := reserve("t", key, now)
		r.Request.Datacenters = []string{"dc1", "dc2"}
		return r
	}
	a, b, single := multi("a"), multi("b"), reserve("t", "d", now)
	h.must(admitWith(a, commit(a, now+1)), OutcomeCommitted)
	h.must(admitWith(b, reject(b, now+1, 429)), OutcomeRejected)
	h.must(admitWith(single, commit(single, now+1)), OutcomeCommitted)

	var got []string
	h.f.ResolvedMultiDatacenter("dc1", func(e Entry) bool {
		got = append(got, e.Key+":"+e.State.String())
		return true
	})
	if fmt.Sprint(got) != "[a:committed b:rejected]" {
		t.Fatalf("scan from dc1 = %v, want [a:committed b:rejected]", got)
	}
	got = nil
	h.f.ResolvedMultiDatacenter("dc2", func(e Entry) bool { got = append(got, e.Key); return false })
	if fmt.Sprint(got) != "[a]" {
		t.Fatalf("scan from dc2 stopped after the first = %v, want [a]", got)
	}
}
