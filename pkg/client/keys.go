package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/once-dev/once/internal/atomicfile"
	"github.com/once-dev/once/pkg/keys"
)

// DefaultBlock is how many sequences Keys reserves in its state file at a time.
const DefaultBlock = 1000

// ErrKeysState is wrapped by the errors of OpenKeys and Keys.Next when the
// state file cannot be read, parsed or made durable.
var ErrKeysState = errors.New("client: keys state")

// ErrKeysStateLost is wrapped (with ErrKeysState) by the error of Next when
// the state file (or its directory) was deleted, or replaced by one that
// does not hold this Keys' last reservation, since this Keys last wrote it.
// What other processes sharing the file reserved is no longer known, so no
// block can be reserved safely: that Keys fails every Next from then on
// (keys of its current block excepted), and the file is not recreated.
var ErrKeysStateLost = errors.New("client: keys state file deleted or replaced while in use")

// DefaultLockTimeout is how long OpenKeys and Next wait for the state
// file's lock by default.
const DefaultLockTimeout = 10 * time.Second

// KeysLockedError is the error of OpenKeys and Next when another process
// (or another Keys of this one) held the state file's lock for as long as
// the call could wait: KeysOptions.LockTimeout, or less when the context of
// OpenKeysContext or Submit ended first. It matches ErrKeysState and Err.
type KeysLockedError struct {
	// Path is the lock file.
	Path string
	// PID is the holder's process id as the lock file records it; 0 when
	// it records none.
	PID int
	// Err ended the wait: context.DeadlineExceeded, or the context's error.
	Err error
}

func (e *KeysLockedError) Error() string {
	holder := "another process"
	if e.PID != 0 {
		holder = fmt.Sprintf("process %d", e.PID)
	}
	return fmt.Sprintf("%v: %s holds the lock %s: %v", ErrKeysState, holder, e.Path, e.Err)
}

// Unwrap returns ErrKeysState and Err.
func (e *KeysLockedError) Unwrap() []error { return []error{ErrKeysState, e.Err} }

// KeysOptions configure OpenKeys.
type KeysOptions struct {
	// ClientID is used when the state file does not exist yet. Empty: the
	// host name (reduced to the client_id alphabet) followed by "." and 8
	// random hex characters. When the file exists, its client id wins.
	ClientID string
	// Block is how many sequences are reserved per write of the state file
	// (default DefaultBlock). Larger blocks mean fewer fsyncs and larger gaps
	// in the sequence after a restart.
	Block uint64
	// LockTimeout bounds each wait for the state file's lock while another
	// process holds it (default DefaultLockTimeout); past it, OpenKeys or
	// Next fails with a *KeysLockedError.
	LockTimeout time.Duration
}

// keysState is the content of the state file.
type keysState struct {
	ClientID string `json:"client_id"`
	// Reserved is the highest sequence handed to any process so far. A new
	// process starts after it, so a sequence is never used twice.
	Reserved uint64 `json:"reserved"`
}

// Keys makes structured idempotency keys <client_id>:<sequence>:<nonce>
// (docs/api.md). The client id and the highest reserved sequence live in a
// state file; the nonce is drawn once per OpenKeys (once per process).
//
// Sequences are reserved in blocks: before a key of a new block is handed out,
// the file records the block's end, written to a temporary file, fsync'd and
// renamed over the old one (then the directory is fsync'd). A process that
// crashes after reserving a block loses the rest of it; the next process
// starts after the block, so no sequence is ever used twice. Keys is safe for
// concurrent use by many goroutines. Processes may share a state file
// under its lock (flock on Unix; elsewhere one process at a time), and a
// file deleted or replaced while in use stops the reservations
// (ErrKeysStateLost) rather than be recreated (docs/client.md).
type Keys struct {
	path     string
	block    uint64
	wait     time.Duration // KeysOptions.LockTimeout
	clientID string
	nonce    string

	// mu (one token) guards what follows; taken with a select, so that
	// a goroutine waiting behind another's reservation gives up when its
	// context ends.
	mu    chan struct{}
	next  uint64 // next sequence to hand out
	limit uint64 // highest sequence reserved in the file
	// written is the state file as this Keys last wrote it (nil before
	// its first write); lost is set once the file was found deleted or
	// replaced since, and fails every reservation.
	written os.FileInfo
	lost    error
}

// OpenKeys opens (or creates) the state file at path and reserves the first
// block of sequences. See OpenKeysContext.
func OpenKeys(path string, opts KeysOptions) (*Keys, error) {
	return OpenKeysContext(context.Background(), path, opts)
}

// OpenKeysContext is OpenKeys whose wait for the state file's lock, held by
// another process, also ends with ctx.
func OpenKeysContext(ctx context.Context, path string, opts KeysOptions) (*Keys, error) {
	if opts.Block == 0 {
		opts.Block = DefaultBlock
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	// Under the lock: two processes creating the file at once agree on one
	// client id, and neither reserves the block the other does.
	unlock, err := lock(ctx, path, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, fi, err := readKeysState(path)
	if err != nil {
		return nil, err
	}
	if fi != nil {
		if err := keys.ValidateClientID(st.ClientID); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrKeysState, path, err)
		}
	} else {
		st.ClientID = opts.ClientID
		if st.ClientID == "" {
			if st.ClientID, err = defaultClientID(); err != nil {
				return nil, err
			}
		}
		if err := keys.ValidateClientID(st.ClientID); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKeysState, err)
		}
	}
	nonce, err := keys.NewNonce()
	if err != nil {
		return nil, err
	}
	k := &Keys{path: path, block: opts.Block, wait: opts.LockTimeout, mu: make(chan struct{}, 1), clientID: st.ClientID, nonce: nonce, next: st.Reserved + 1, limit: st.Reserved}
	if err := k.reserveLocked(); err != nil {
		return nil, err
	}
	return k, nil
}

// lockSuffix names the lock file beside the state file: path+lockSuffix,
// locked (flock) while the state file is read and replaced.
const lockSuffix = ".lock"

// lock takes the lock of the state file at path, waiting for another
// holder at most wait and until ctx ends.
func lock(ctx context.Context, path string, wait time.Duration) (unlock func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	unlock, err = lockFile(ctx, path+lockSuffix)
	var locked *KeysLockedError
	switch {
	case errors.As(err, &locked):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: locking %s: %w", ErrKeysState, path, err)
	}
	return unlock, nil
}

// readKeysState reads the state file; fi is nil when it does not exist.
func readKeysState(path string) (st keysState, fi os.FileInfo, err error) {
	f, err := os.Open(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return st, nil, nil
	case err != nil:
		return st, nil, fmt.Errorf("%w: reading %s: %w", ErrKeysState, path, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return st, nil, fmt.Errorf("%w: reading %s: %w", ErrKeysState, path, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return st, nil, fmt.Errorf("%w: reading %s: %w", ErrKeysState, path, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, nil, fmt.Errorf("%w: parsing %s: %w", ErrKeysState, path, err)
	}
	return st, fi, nil
}

func defaultClientID() (string, error) {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return -1
	}, host)
	if len(host) > 100 {
		host = host[:100]
	}
	if host == "" {
		host = "client"
	}
	n, err := keys.NewNonce()
	if err != nil {
		return "", err
	}
	return host + "." + n[:8], nil
}

// reserve records the next block as reserved, durably, under the state
// file's lock, waiting for it until ctx ends. k.mu is held.
func (k *Keys) reserve(ctx context.Context) error {
	if k.lost != nil {
		return k.lost
	}
	unlock, err := lock(ctx, k.path, k.wait)
	if errors.Is(err, os.ErrNotExist) {
		// The directory is gone: so is the state file.
		k.lost = fmt.Errorf("%w: %w: %s: %w", ErrKeysState, ErrKeysStateLost, k.path, err)
		return k.lost
	}
	if err != nil {
		return err
	}
	defer unlock()
	return k.reserveLocked()
}

// reserveLocked records the block after limit, or after what the file
// says was reserved when that is more (another process of the same client
// id sharing the file reserved it since: its sequences are skipped), as
// reserved, durably. The state file's lock is held, and k.mu (or k is not
// shared yet).
//
// A file that cannot be read or parsed, or names another client id, is
// refused, not replaced: what another process sharing it reserved is no
// longer known, and a block after this process's own limit could hold
// sequences that process hands out. So is, for good (ErrKeysStateLost), a
// file gone since this Keys wrote it, or one that holds less than it wrote,
// or as much but is another file: every write of a sharing process
// reserves past what the file held, so only a file put back or recreated
// does that.
func (k *Keys) reserveLocked() error {
	base := k.limit
	st, fi, err := readKeysState(k.path)
	switch {
	case err != nil:
		return err
	case k.written != nil && fi == nil:
		k.lost = fmt.Errorf("%w: %w: %s was deleted", ErrKeysState, ErrKeysStateLost, k.path)
		return k.lost
	case fi != nil && st.ClientID != k.clientID:
		return fmt.Errorf("%w: %s: names client id %q, not this process's %q: it was replaced", ErrKeysState, k.path, st.ClientID, k.clientID)
	case k.written != nil && (st.Reserved < k.limit || st.Reserved == k.limit && !sameWrite(fi, k.written)):
		k.lost = fmt.Errorf("%w: %w: %s was replaced: it reserves up to %d, this process reserved up to %d", ErrKeysState, ErrKeysStateLost, k.path, st.Reserved, k.limit)
		return k.lost
	case st.Reserved > base:
		base = st.Reserved
	}
	if base > math.MaxUint64-k.block {
		// base+block would wrap around to a small number, and the
		// sequences after it would be used a second time.
		return fmt.Errorf("%w: %s: the sequences are used up (reserved %d, block %d, the largest is %d): start a new state file, which has a new client id",
			ErrKeysState, k.path, base, k.block, uint64(math.MaxUint64))
	}
	st = keysState{ClientID: k.clientID, Reserved: base + k.block}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKeysState, err)
	}
	if err := atomicfile.WriteBytes(k.path, append(b, '\n')); err != nil {
		return fmt.Errorf("%w: %w", ErrKeysState, err)
	}
	if k.written, err = os.Stat(k.path); err != nil {
		return fmt.Errorf("%w: %w", ErrKeysState, err)
	}
	if base > k.limit {
		k.next = base + 1
	}
	k.limit = st.Reserved
	return nil
}

// sameWrite reports whether a and b are one file as one write left it:
// the same file (device and inode; a new file may get a removed one's
// inode) with the same modification time.
func sameWrite(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

// ClientID is the client id every key carries.
func (k *Keys) ClientID() string { return k.clientID }

// Nonce is this process's nonce.
func (k *Keys) Nonce() string { return k.nonce }

// Next returns a new key: the next sequence, reserving a new block in the
// state file first when the current one is used up.
func (k *Keys) Next() (string, error) { return k.nextKey(context.Background()) }

// nextKey is Next whose wait for the state file's lock also ends with ctx.
func (k *Keys) nextKey(ctx context.Context) (string, error) {
	select {
	case k.mu <- struct{}{}:
	default:
		select {
		case k.mu <- struct{}{}:
		case <-ctx.Done():
			// Another goroutine is reserving a block, waiting for the
			// state file's lock.
			return "", fmt.Errorf("%w: waiting for this process's reservation in %s: %w", ErrKeysState, k.path, ctx.Err())
		}
	}
	defer func() { <-k.mu }()
	// next is 0 once the largest sequence was handed out (it wrapped
	// around): reserve then fails, the sequences being used up.
	if k.next > k.limit || k.next == 0 {
		if err := k.reserve(ctx); err != nil {
			return "", err
		}
	}
	seq := k.next
	k.next++
	return keys.Format(k.clientID, seq, k.nonce), nil
}
