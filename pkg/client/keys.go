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
	var st keysState
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, fmt.Errorf("%w: parsing %s: %w", ErrKeysState, path, err)
		}
		if err := keys.ValidateClientID(st.ClientID); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrKeysState, path, err)
		}
	case errors.Is(err, os.ErrNotExist):
		st.ClientID = opts.ClientID
		if st.ClientID == "" {
			if st.ClientID, err = defaultClientID(); err != nil {
				return nil, err
			}
		}
		if err := keys.ValidateClientID(st.ClientID); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKeysState, err)
		}
	default:
		return nil, fmt.Errorf("%w: reading %s: %w", ErrKeysState, path, err)
	}
	nonce, err := keys.NewNonce()
	if err != nil {
		return nil, err
	}
	k := &Keys{path: path, block: opts.Block, clientID: st.ClientID, nonce: nonce, next: st.Reserved + 1, limit: st.Reserved}
	if err := k.reserve(); err != nil {
		return nil, err
	}
	return k, nil
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

// reserve records limit+block as reserved, durably. k.mu is held (or k is not
// shared yet).
func (k *Keys) reserve() error {
	if k.limit > math.MaxUint64-k.block {
		// limit+block would wrap around to a small number, and the
		// sequences after it would be used a second time.
		return fmt.Errorf("%w: %s: the sequences are used up (reserved %d, block %d, the largest is %d): start a new state file, which has a new client id",
			ErrKeysState, k.path, k.limit, k.block, uint64(math.MaxUint64))
	}
	st := keysState{ClientID: k.clientID, Reserved: k.limit + k.block}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKeysState, err)
	}
	if err := atomicfile.WriteBytes(k.path, append(b, '\n')); err != nil {
		return fmt.Errorf("%w: %w", ErrKeysState, err)
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
