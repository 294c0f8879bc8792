package ledger

import "errors"

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
	// ErrUnsupportedVersion: the command type is known but its version is not.
	// The replica is older than the log: upgrade it. A committed entry of such
	// a version halts the FSM (HaltError).
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
	// read. The FSM keeps its previous state.
	ErrSnapshotVersion = errors.New("ledger: unsupported snapshot version")
	// ErrHalted: the FSM met a committed entry it cannot decode and applies
	// nothing more (HaltError says which entry and why).
	ErrHalted = errors.New("ledger: halted")
	// ErrReplaying: Snapshot was asked while Raft replays entries the store
	// had applied already, so the state is ahead of the index Raft would
	// name the snapshot by. Raft tries again later; by then the replay has
	// passed the store's applied index.
	ErrReplaying = errors.New("ledger: replaying entries already applied, no snapshot yet")
)
