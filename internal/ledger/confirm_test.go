package ledger

import (
	"fmt"
	"reflect"
	"testing"
)

// Confirm, item by item, in every state of the entry it names.
func TestConfirm(t *testing.T) {
	h := newHarness(t)
	multi := func(key string, dcs ...string) Reserve {
		r := reserve("t", key, t0)
		r.Request.Datacenters = dcs
		return r
	}
	two, three, single := multi("two", "dc1", "dc2"), multi("three", "dc1", "dc2", "dc3"), multi("single", "dc1")
	h.must(admitWith(two, commit(two, t0+sec)), OutcomeCommitted)
	h.must(admitWith(three, reject(three, t0+sec, 429)), OutcomeRejected)
	h.must(admitWith(single, commit(single, t0+sec)), OutcomeCommitted)
	carriedKeys := func() (keys []string) {
		h.f.ResolvedMultiDatacenter("dc1", func(e Entry) bool { keys = append(keys, e.Key); return true })
		return keys
	}
	if got := carriedKeys(); !reflect.DeepEqual(got, []string{"three", "two"}) {
		t.Fatalf("carried before any Confirm: %v", got)
	}
	item := func(r Reserve, dc string) Confirmation { return Confirmation{r.Tenant, r.Key, r.JobID, dc} }
	cases := []struct {
		name string
		item Confirmation
		want Outcome
	}{
		{"a named datacenter of a committed entry", item(two, "dc2"), OutcomeConfirmed},
		{"the same again", item(two, "dc2"), OutcomeUnchanged},
		{"a rejected entry", item(three, "dc3"), OutcomeConfirmed},
		{"another job ID", Confirmation{"t", "two", "other-job", "dc2"}, OutcomeUnchanged},
		{"no such entry", Confirmation{"t", "nope", "j", "dc2"}, OutcomeNotFound},
		{"a datacenter the request does not name", item(two, "dc9"), OutcomeInvalid},
		{"an empty datacenter", item(two, ""), OutcomeInvalid},
	}
	var items []Confirmation
	for _, c := range cases {
		items = append(items, c.item)
	}
	res := h.must(Confirm{Items: items}, OutcomeConfirmed)
	for i, c := range cases {
		if got := res.Items[i].Outcome; got != c.want {
			t.Errorf("%s: %v, want %v (%v)", c.name, got, c.want, res.Items[i].Err)
		}
	}
	if e, _ := h.f.Entry("t", "two"); fmt.Sprint(e.Confirmed) != "[dc2]" {
		t.Fatalf("two: confirmed %v", e.Confirmed)
	}
	// Fully confirmed entries leave the outbox's order; "three" waits on dc2.
	if got := carriedKeys(); !reflect.DeepEqual(got, []string{"three"}) {
		t.Fatalf("carried after the Confirms: %v", got)
	}
	h.must(Confirm{Items: []Confirmation{item(three, "dc2")}}, OutcomeConfirmed)
	if e, _ := h.f.Entry("t", "three"); fmt.Sprint(e.Confirmed) != "[dc2 dc3]" {
		t.Fatalf("three: confirmed %v, want sorted [dc2 dc3]", e.Confirmed)
	}
	if got := carriedKeys(); len(got) != 0 {
		t.Fatalf("carried after every datacenter confirmed: %v", got)
	}
	checkInvariants(t, h.f)
	// The progress survives a snapshot.
	g := restore(t, persist(t, h.f))
	if e, _ := g.Entry("t", "three"); fmt.Sprint(e.Confirmed) != "[dc2 dc3]" {
		t.Fatalf("after restore: confirmed %v", e.Confirmed)
	}
	sameState(t, h.f, g)
}
