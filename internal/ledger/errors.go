package ledger

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error this package returns matches exactly one of them
// with errors.Is (a *HaltError matches ErrHalted and its decoding error); the
// wrapping text adds detail (an offset, a field) and is not meant to be
// matched.
var (
	// ErrMalformed: a command's bytes do not decode (truncated, a bad varint, a
	// length past the end, trailing bytes, a non-canonical value). A committed
	// entry that does not decode halts the FSM (HaltError).
	ErrMalformed = errors.New("ledger: malformed command")
	// ErrUnknownCommand: the command type is not known to this version and its
	// ignorable bit (TypeIgnorable) is clear. The replica is older than the log:
	// upgrade it. A committed entry of such a type halts the FSM (HaltError).
	ErrUnknownCommand = errors.New("ledger: unknown command type")
	// ErrUnsupportedVersion: the command type is known but its version is
	// not FormatVersion: the log was written by a later build (upgrade the
	// replica) or by a build before 1.0. A committed entry of such a version
	// halts the FSM (HaltError).
	ErrUnsupportedVersion = errors.New("ledger: unsupported command version")
	// ErrInvalidCommand: the command decodes but breaks a rule of its type (an
	// empty tenant, key or job ID, ExpiresAt not after Now, MaxEntries of 0, a
	// rejection status outside 400–599). A bug in the proposer.
	ErrInvalidCommand = errors.New("ledger: invalid command")
	// ErrBadSnapshot: Restore read a snapshot that is truncated, corrupt (CRC
	// mismatch), out of order, or otherwise not one Persist writes. The FSM keeps
	// its previous state.
	ErrBadSnapshot = errors.New("ledger: malformed snapshot")
	// ErrSnapshotVersion: the snapshot has a format version this build does not
	// read (a FormatError says which). The FSM keeps its previous state.
	ErrSnapshotVersion = errors.New("ledger: unsupported snapshot version")
	// ErrPreRelease: a snapshot or a store written by a build before 1.0,
	// whose formats this build does not read (a FormatError says which).
	ErrPreRelease = errors.New("ledger: written by a pre-1.0 build")
	// ErrHalted: the FSM met a committed entry it cannot decode and applies
	// nothing more (HaltError says which entry and why).
	ErrHalted = errors.New("ledger: halted")
	// ErrReplaying: Snapshot was asked while Raft replays entries the store
	// had applied already, so the state is ahead of the index Raft would
	// name the snapshot by. Raft tries again later; by then the replay has
	// passed the store's applied index.
	ErrReplaying = errors.New("ledger: replaying entries already applied, no snapshot yet")
)

// FormatError: a snapshot (Restore) or a store (Open) in a format this build
// does not read: Version is the version found, PreRelease says a build
// before 1.0 wrote it. It matches ErrSnapshotVersion (a snapshot) or
// ErrStore (a store), and ErrPreRelease when PreRelease is set.
type FormatError struct {
	What       string // "snapshot" or "store"
	Version    uint64
	PreRelease bool
}

func (e *FormatError) Error() string {
	if e.PreRelease {
		return fmt.Sprintf("ledger: %s format %d was written by a pre-1.0 build; this build reads format %d only "+
			"(docs/operations.md: a pre-1.0 data directory is not upgraded, start from an empty one)", e.What, e.Version, FormatVersion)
	}
	return fmt.Sprintf("ledger: %s format %d, this build reads format %d only (a later build wrote it?)", e.What, e.Version, FormatVersion)
}

// Unwrap returns ErrSnapshotVersion or ErrStore, and ErrPreRelease.
func (e *FormatError) Unwrap() []error {
	errs := []error{ErrStore}
	if e.What == "snapshot" {
		errs[0] = ErrSnapshotVersion
	}
	if e.PreRelease {
		errs = append(errs, ErrPreRelease)
	}
	return errs
}
