package ledger

import (
	"errors"
	"fmt"

	"github.com/once-dev/once/internal/ledger/engine"
)

// Open returns an FSM whose state is kept on disk in dir (docs/ledger.md,
// "State on disk"), as it was last applied: its applied index
// (Stats().AppliedIndex) is where Raft's replay of the log goes on. An empty
// or missing directory is an empty ledger. Close it when done.
//
// Everything in the FSM's contract holds for it as for New's: the same
// commands give the same results and byte-identical snapshots. Memory holds
// pebble's caches, a few counters, the watermarks and the key counts
// (engine/keys.go), not the tables. Open does not read the tables: the key
// counts are scanned in the background, and Close stops that scan.
func Open(dir string, opts Options) (*FSM, error) {
	st, err := engine.Open(dir, opts.Store.engine())
	if err != nil {
		return nil, err
	}
	s, err := loadDiskState(st, opts.Store.Knobs)
	if err != nil {
		_ = st.Abandon()
		return nil, err
	}
	return &FSM{onChange: opts.OnChange, onHalt: opts.OnHalt, s: s, delivered: s.applied, disk: true}, nil
}

// Close closes the FSM's store (a no-op in memory). The FSM must not be used
// after.
func (f *FSM) Close() error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.s.store == nil || f.closed {
		return nil
	}
	f.closed = true
	return f.s.store.Close()
}

// loadDiskState reads the counters of a store. O(tenants).
func loadDiskState(st *engine.Store, knobs TestingKnobs) (s *state, err error) {
	defer recoverStore(&err)
	var m storeMeta
	var merr error
	if !st.Get(metaKey, func(v []byte) { m, merr = decodeMeta(v) }) {
		nonEmpty := false
		st.Walk(nil, nil, func(_, _ []byte) bool { nonEmpty = true; return false })
		if nonEmpty {
			return nil, fmt.Errorf("%w: data without its counters", ErrStore)
		}
	}
	var ferr *FormatError
	if errors.As(merr, &ferr) {
		return nil, ferr
	}
	if merr != nil {
		return nil, fmt.Errorf("%w: counters: %w", ErrStore, merr)
	}
	s = newState()
	s.knobs = knobs
	s.useStore(st, m)
	s.loadRunning()
	if byState := m.committed + m.rejected + m.claimed; m.entries != byState {
		return nil, fmt.Errorf("%w: %d entries, the counts by state say %d", ErrStore, m.entries, byState)
	}
	if life := m.queued + m.running + m.succeeded + m.failed + m.dead + m.cancelled; life > m.jobs {
		return nil, fmt.Errorf("%w: %d jobs, the counts by lifecycle state say %d", ErrStore, m.jobs, life)
	}
	if s.wms.Len() != int(m.watermarks) {
		return nil, fmt.Errorf("%w: %d watermarks stored, the counters say %d", ErrStore, s.wms.Len(), m.watermarks)
	}
	var derr error
	tenants := func(p byte, set func(tenant string, n uint64)) {
		st.Walk([]byte{p}, prefixEnd(p), func(k, v []byte) bool {
			d := &decoder{b: v, base: ErrStore}
			n := d.uvarint()
			set(string(k[1:]), n)
			derr = d.finish()
			return derr == nil
		})
	}
	var sum uint64
	tenants(pfxTenantBytes, func(t string, n uint64) { s.tenantBytes[t], sum = n, sum+n })
	if derr == nil {
		tenants(pfxTenantWMs, func(t string, n uint64) { s.wmTenant[t] = int(n) })
	}
	if derr != nil {
		return nil, fmt.Errorf("%w: tenant counters: %w", ErrStore, derr)
	}
	if sum != s.bytes {
		return nil, fmt.Errorf("%w: tenants account for %d bytes, the counters for %d", ErrStore, sum, s.bytes)
	}
	return s, nil
}

// recoverStore turns a store failure's panic into an error (for Open and
// Restore, which can return one).
func recoverStore(err *error) {
	if p := recover(); p != nil {
		se, ok := p.(*StoreError)
		if !ok {
			panic(p)
		}
		*err = fmt.Errorf("%w: %w", ErrStore, se)
	}
}

// begin opens a batch for the commands about to be applied; commit writes
// them with the counters in one atomic batch. No-ops in memory.
func (s *state) begin() {
	if s.store != nil {
		s.store.Begin()
	}
}

func (s *state) commit() {
	st := s.store
	if st == nil {
		return
	}
	buf := make([]byte, 0, 128)          // the counters (about 50 bytes): one allocation, not a growth per field
	for t, was := range s.dirtyTenants { // the order of these writes does not matter
		now := s.tenantCounts(t)
		k := append([]byte{pfxTenantBytes}, t...)
		writeCounter(st, k, buf, was.hasBytes, now.hasBytes, was.bytes, now.bytes)
		k[0] = pfxTenantWMs
		writeCounter(st, k, buf, was.hasWM, now.hasWM, uint64(was.wms), uint64(now.wms))
		delete(s.dirtyTenants, t)
	}
	st.Set(metaKey, s.meta().append(buf[:0]))
	st.Commit()
}

// writeCounter writes counter k (in buf) where it changed: set to v, or
// deleted when it is no longer held.
func writeCounter(st *engine.Store, k, buf []byte, had, has bool, was, v uint64) {
	switch {
	case had == has && was == v:
	case has:
		st.Set(k, appendUvarint(buf[:0], v))
	default:
		st.Delete(k)
	}
}

// checkpoint commits what was applied so far and opens a new batch (Restore
// writes a large state in several batches).
func (s *state) checkpoint() {
	if s.store != nil {
		s.commit()
		s.begin()
	}
}

func (s *state) meta() storeMeta {
	return storeMeta{
		applied:    s.applied,
		ledgerTime: s.ledgerTime,
		lastSeq:    s.lastSeq,
		bytes:      s.bytes,
		committed:  uint64(s.entryStates[StateCommitted]),
		rejected:   uint64(s.entryStates[StateRejected]),
		claimed:    uint64(s.entryStates[StateClaimed]),
		entries:    uint64(s.entries.Len()),
		jobs:       uint64(s.jobs.Len()),
		watermarks: uint64(s.wms.Len()),
		queued:     uint64(s.jobStates[JobQueued]),
		running:    uint64(s.jobStates[JobRunning]),
		succeeded:  uint64(s.jobStates[JobSucceeded]),
		failed:     uint64(s.jobStates[JobFailed]),
		dead:       uint64(s.jobStates[JobDead]),
		cancelled:  uint64(s.jobStates[JobCancelled]),
	}
}
