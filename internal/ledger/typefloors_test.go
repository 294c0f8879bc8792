package ledger

import (
	"fmt"
	"testing"
)

// typeFloors returns how many (tenant, type) groups the disk queue by type
// keeps a floor for, and whether it keeps one for typ.
func typeFloors(h *harness, typ string) (n int, has bool) {
	d := h.f.s.jobQueueType.(*diskIndex[*Job])
	g := string(jobTypeGroup(nil, &Job{Tenant: tenant, Type: typ}))
	d.mu.Lock()
	defer d.mu.Unlock()
	_, inFloors := d.floors[g]
	_, inEmpty := d.emptyFloors[g]
	return len(d.floors) + len(d.emptyFloors), inFloors || inEmpty
}

// Leases naming ever new types do not grow the per-type floors of the disk
// queue without bound: a type with no queued job costs at most a place among
// maxEmptyTypeFloors, and a type whose jobs are all leased leaves the floors
// of the types with jobs at its next lease. Leasing stays exact throughout.
func TestLeaseTypeFloorsAreBounded(t *testing.T) {
	diskPassOnly(t)
	h := newHarness(t)
	queueJob(h, tenant, "k1", "real", tQ)
	queueJob(h, tenant, "k2", "real", tQ+1)
	now := tL
	names := 0
	for names < 3*maxEmptyTypeFloors {
		types := make([]string, MaxLeaseTypes)
		for i := range types {
			types[i] = fmt.Sprintf("never-queued-%d", names)
			names++
		}
		now++
		if ids := h.lease(leaseOf(tenant, 1, now, types...)); len(ids) != 0 {
			t.Fatalf("a lease of types never queued handed out %v", ids)
		}
	}
	if n, _ := typeFloors(h, "real"); n > maxEmptyTypeFloors+1 {
		t.Fatalf("%d type floors after leases naming %d types, want at most %d", n, names, maxEmptyTypeFloors+1)
	}

	now++
	if ids := h.lease(leaseOf(tenant, 1, now, "real")); len(ids) != 1 {
		t.Fatalf("lease of real: %v", ids)
	}
	d := h.f.s.jobQueueType.(*diskIndex[*Job])
	g := string(jobTypeGroup(nil, &Job{Tenant: tenant, Type: "real"}))
	d.mu.Lock()
	_, kept := d.floors[g]
	d.mu.Unlock()
	if !kept {
		t.Fatal("a type with a queued job keeps no floor")
	}
	now++
	if ids := h.lease(leaseOf(tenant, 5, now, "real")); len(ids) != 1 {
		t.Fatalf("second lease of real: %v", ids)
	}
	now++
	if ids := h.lease(leaseOf(tenant, 1, now, "real")); len(ids) != 0 {
		t.Fatalf("lease of a drained type: %v", ids)
	}
	d.mu.Lock()
	_, kept = d.floors[g]
	d.mu.Unlock()
	if kept {
		t.Fatal("a type without queued jobs is still among the floors of the types with jobs")
	}
	// A job of the type queued again is found (the floor follows it).
	queueJob(h, tenant, "k3", "real", now+1)
	now += 2
	if ids := h.lease(leaseOf(tenant, 1, now, "real")); len(ids) != 1 {
		t.Fatalf("lease after the type was queued again: %v", ids)
	}
}
