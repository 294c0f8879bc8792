package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"

	"github.com/once-dev/once/internal/atomicfile"
	"github.com/once-dev/once/pkg/keys"
)

// DefaultBlock is how many sequences Keys reserves in its state file at a time.
const DefaultBlock = 1000

// ErrKeysState is wrapped by the errors of OpenKeys and Keys.Next when the
// state file cannot be read, parsed or made durable.
var ErrKeysState = errors.New("client: keys state")

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
// concurrent use by many goroutines; one state file must be used by one
// process at a time.
type Keys struct {
	path     string
	block    uint64
	clientID string
	nonce    string

	mu    sync.Mutex
	next  uint64 // next sequence to hand out
	limit uint64 // highest sequence reserved in the file
}

// OpenKeys opens (or creates) the state file at path and reserves the first
// block of sequences.
func OpenKeys(path string, opts KeysOptions) (*Keys, error) {
	if opts.Block == 0 {
		opts.Block = DefaultBlock
	}
	// Under the lock: two processes creating the file at once agree on one
	// client id, and neither reserves the block the other does.
	unlock, err := lockFile(path + lockSuffix)
	if err != nil {
		return nil, fmt.Errorf("%w: locking %s: %w", ErrKeysState, path, err)
	}
	defer unlock()
	st, found, err := readKeysState(path)
	if err != nil {
		return nil, err
	}
	if found {
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
	k := &Keys{path: path, block: opts.Block, clientID: st.ClientID, nonce: nonce, next: st.Reserved + 1, limit: st.Reserved}
	if err := k.reserveLocked(); err != nil {
		return nil, err
	}
	return k, nil
}

// lockSuffix names the lock file beside the state file: path+lockSuffix,
// locked (flock) while the state file is read and replaced.
const lockSuffix = ".lock"

// readKeysState reads the state file; found is false when it does not exist.
func readKeysState(path string) (st keysState, found bool, err error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return st, false, nil
	case err != nil:
		return st, false, fmt.Errorf("%w: reading %s: %w", ErrKeysState, path, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false, fmt.Errorf("%w: parsing %s: %w", ErrKeysState, path, err)
	}
	return st, true, nil
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
// file's lock. k.mu is held.
func (k *Keys) reserve() error {
	unlock, err := lockFile(k.path + lockSuffix)
	if err != nil {
		return fmt.Errorf("%w: locking %s: %w", ErrKeysState, k.path, err)
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
// sequences that process hands out.
func (k *Keys) reserveLocked() error {
	base := k.limit
	st, found, err := readKeysState(k.path)
	switch {
	case err != nil:
		return err
	case found && st.ClientID != k.clientID:
		return fmt.Errorf("%w: %s: names client id %q, not this process's %q: it was replaced", ErrKeysState, k.path, st.ClientID, k.clientID)
	case found && st.Reserved > base:
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
	if base > k.limit {
		k.next = base + 1
	}
	k.limit = st.Reserved
	return nil
}

// ClientID is the client id every key carries.
func (k *Keys) ClientID() string { return k.clientID }

// Nonce is this process's nonce.
func (k *Keys) Nonce() string { return k.nonce }

// Next returns a new key: the next sequence, reserving a new block in the
// state file first when the current one is used up.
func (k *Keys) Next() (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	// next is 0 once the largest sequence was handed out (it wrapped
	// around): reserve then fails, the sequences being used up.
	if k.next > k.limit || k.next == 0 {
		if err := k.reserve(); err != nil {
			return "", err
		}
	}
	seq := k.next
	k.next++
	return keys.Format(k.clientID, seq, k.nonce), nil
}
