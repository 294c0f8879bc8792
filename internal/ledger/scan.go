package ledger

import "slices"

// ResolvedMultiDatacenter calls fn with every COMMITTED or REJECTED entry whose request
// names a datacenter other than own, in (tenant, key) order, until fn returns
// false. It reads a copy of each entry under the read lock: fn must not call
// back into the FSM. O(log n + such entries): it walks an order that holds
// only the resolved entries naming several datacenters; the manager's outbox
// calls it every few seconds at the leader (docs/multidc.md).
func (f *FSM) ResolvedMultiDatacenter(own string, fn func(Entry) bool) {
	f.mu.RLock()
	var out []Entry
	f.s.multiDC.Ascend(func(e *Entry) bool {
		if slices.ContainsFunc(e.Request.Datacenters, func(dc string) bool { return dc != own }) {
			out = append(out, *e)
		}
		return true
	})
	f.mu.RUnlock()
	for _, e := range out {
		if !fn(e) {
			return
		}
	}
}
