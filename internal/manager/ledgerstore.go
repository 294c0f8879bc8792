package manager

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

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

// ErrRestoreUnconfirmed: a RestoreLedger installed its state on this leader
// (the newest snapshot and the ledger) but Raft did not confirm it: the
// entry raft.Restore appends after it did not commit (the leader lost its
// office, or its time ran out). The state may or may not reach the other
// replicas (a next leader that holds it sends it to every replica; one that
// does not drops it), and admissions may follow it: restoring the archive
// again could erase them, so the caller must not simply send it again.
var ErrRestoreUnconfirmed = errors.New("manager: the restore was installed on the leader but not confirmed")

// RestoreLedger replaces the datacenter's ledger with state, a snapshot of
// meta's (raft.Restore: the leader installs it as its newest snapshot and
// ledger, then sends it to the followers). An error that wraps
// ErrRestoreUnconfirmed says the state was installed here although
// raft.Restore failed; any other error says it was not.
func (m *Manager) RestoreLedger(meta *raft.SnapshotMeta, state io.Reader, timeout time.Duration) error {
	release, err := m.holdRaft()
	if err != nil {
		return err
	}
	defer release()
	if f := m.deps.Knobs.RestoreRead; f != nil {
		state = &eofHook{r: state, f: f}
	}
	last := m.raft.LastIndex()
	err = m.raft.Restore(meta, state, timeout)
	if err == nil || !m.restoreInstalled(meta, last) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrRestoreUnconfirmed, err)
}

// restoreInstalled tells whether raft.Restore installed meta's state after
// the log ended at last: it stores the state as a snapshot past the log's
// end (and past meta's index) before the ledger takes it, and the snapshots
// Raft takes of its own are at an applied index, so a snapshot past last of
// the state's size is the restore's. A store that cannot be listed says
// yes: the caller then does not restore again.
func (m *Manager) restoreInstalled(meta *raft.SnapshotMeta, last uint64) bool {
	snaps, err := m.snaps.List()
	if err != nil {
		return true
	}
	for _, s := range snaps {
		if s.Index > last && s.Index > meta.Index && s.Size == meta.Size {
			return true
		}
	}
	return false
}

// eofHook is r that calls f when it first reaches the end (RestoreRead).
type eofHook struct {
	r    io.Reader
	f    func()
	done bool
}

func (h *eofHook) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if errors.Is(err, io.EOF) && !h.done {
		h.done = true
		h.f()
	}
	return n, err
}
