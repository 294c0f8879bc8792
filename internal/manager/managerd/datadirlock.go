package managerd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// checkRaftLogFree refuses, before the manager touches anything in
// dataDir, a start on the data directory of a manager process that is still
// running (started twice, or the old process not gone yet): the Raft log's
// lock (walstore's flock on raft/wal/LOCK) is held. It only looks: it creates
// nothing, and it releases the lock at once; manager.New's walstore.Open
// takes it for the life of the process. Without this check the first store
// to refuse would be the ledger's, after the federation had written to the
// directory, with a message of its own (docs/operations.md names this one).
func checkRaftLogFree(dataDir string) error {
	dir := filepath.Join(dataDir, "raft", "wal")
	err := probeLock(filepath.Join(dir, "LOCK"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // a new directory: no store was ever opened there
	}
	if err != nil {
		return fmt.Errorf("manager: open raft log: walstore: lock %s: %w", dir, err)
	}
	return nil
}
