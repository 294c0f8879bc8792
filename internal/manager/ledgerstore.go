package manager

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/logging"
)

// ErrLedgerAhead: the disk ledger has applied log entries that this node's
// Raft log and snapshots do not hold, so it belongs to another history (the
// raft directory was removed or replaced and the ledger directory was not).
// The manager refuses to start; docs/operations.md says what to do.
var ErrLedgerAhead = errors.New("manager: the ledger is ahead of the Raft log")

// openLedger opens the ledger as cfg.LedgerStore says: on disk in
// DataDir/ledger, or in memory. onHalt is called if it halts.
func openLedger(cfg Config, onChange func(ledger.Change), onHalt func(*ledger.HaltError), log *slog.Logger) (*ledger.FSM, error) {
	opts := ledger.Options{OnChange: onChange, OnHalt: onHalt}
	if cfg.LedgerStore == "memory" {
		return ledger.New(opts), nil
	}
	opts.Store = ledger.StoreOptions{
		CacheBytes: cfg.LedgerCacheBytes,
		Logger:     log.With(logging.KeyComponent, "ledger-store"),
	}
	f, err := ledger.Open(filepath.Join(cfg.DataDir, "ledger"), opts)
	if err != nil {
		return nil, fmt.Errorf("manager: open ledger: %w", err)
	}
	return f, nil
}

// ledgerRestoreOnStart decides whether Raft restores the newest snapshot into
// the ledger as it starts. A ledger in memory always is. A disk ledger at or
// past the newest snapshot goes on from its own applied index: Raft replays
// the log after the snapshot and the ledger skips the entries it has (Apply
// refuses an index that is not after the applied one and changes nothing),
// so a restart reads no snapshot at all (and the ledger takes no snapshot
// while that replay is below its applied index: ledger.ErrReplaying, so no
// snapshot records an index above the one Raft names it by). A disk ledger
// behind the newest snapshot (a new store beside an old Raft directory, or
// one lost with its disk) is restored from it. A disk ledger past everything
// Raft holds is refused (ErrLedgerAhead).
func (m *Manager) ledgerRestoreOnStart() (bool, error) {
	if m.cfg.LedgerStore == "memory" {
		return true, nil
	}
	applied := m.fsm.Stats().AppliedIndex
	snaps, err := m.snaps.List()
	if err != nil {
		return false, fmt.Errorf("manager: list snapshots: %w", err)
	}
	var snapIndex uint64
	if len(snaps) > 0 {
		snapIndex = snaps[0].Index
	}
	last, err := m.logStore.LastIndex()
	if err != nil {
		return false, fmt.Errorf("manager: raft log: %w", err)
	}
	if applied > max(last, snapIndex) {
		return false, fmt.Errorf("%w: the ledger in %s has applied index %d, the Raft log ends at %d and the newest snapshot at %d",
			ErrLedgerAhead, filepath.Join(m.cfg.DataDir, "ledger"), applied, last, snapIndex)
	}
	restore := applied < snapIndex
	reason := "the ledger on disk goes on from its applied index"
	if restore {
		reason = "the ledger on disk is behind the newest snapshot: restoring it"
	}
	m.log.Info("ledger opened", logging.KeyIndex, applied, logging.KeySnapIndex, snapIndex, logging.KeyReason, reason)
	return restore, nil
}
