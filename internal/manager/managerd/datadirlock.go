package managerd

import (
	"fmt"
	"path/filepath"

	"github.com/once-dev/once/internal/walstore"
)

// checkRaftLogFree refuses, before the manager touches anything in
// dataDir, a start on the data directory of a manager process that is still
// running (started twice, or the old process not gone yet): the Raft log's
// lock is held (walstore.CheckUnlocked, which creates nothing; manager.New's
// walstore.Open takes the lock for the life of the process, before it opens
// the ledger). Without this check the federation's files would be written
// before the refusal.
func checkRaftLogFree(dataDir string) error {
	if err := walstore.CheckUnlocked(filepath.Join(dataDir, "raft", "wal")); err != nil {
		return fmt.Errorf("manager: open raft log: %w", err)
	}
	return nil
}
