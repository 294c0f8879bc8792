package ledger

import "slices"

// ResolvedMultiDatacenter calls fn with every COMMITTED or REJECTED entry whose request
// names a datacenter other than own, in (tenant, key) order, until fn returns
// false. It reads a copy of each entry under the read lock: fn must not call
// back into the FSM. O(log n + such entries): it walks an order that holds
// only the resolved entries naming several datacenters; the manager's outbox
// calls it every few seconds at the leader (docs/multidc.md).
func (f *FSM) ResolvedMultiDatacenter(own string, fn func(Entry) bool) {
	eachCopy(f, func(s *state) index[*Entry] { return s.multiDC }, func(e *Entry) bool {
		return slices.ContainsFunc(e.Request.Datacenters, func(dc string) bool { return dc != own })
	}, fn)
}

// eachCopy calls fn with every entry of the order table picks that keep
// accepts, in order, until fn returns false: the entries are copied under the
// read lock and fn is called after it is released.
func eachCopy(f *FSM, table func(*state) index[*Entry], keep func(*Entry) bool, fn func(Entry) bool) {
	f.mu.RLock()
	var out []Entry
	table(f.s).Ascend(func(e *Entry) bool {
		if keep(e) {
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
