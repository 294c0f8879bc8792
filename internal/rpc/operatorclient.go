package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// The operator routes' client side (operator.go): oncectl's calls of the
// managers, with the retries and the leader following of every call
// (Client.retry). Reads answer on whichever manager is asked; changes of
// the Raft configuration and the snapshot follow "not leader" to the
// leader. ClientConfig.OperatorSecret, or a client certificate of the
// operator role in ClientConfig.TLS, is the operator credential.

// Status returns the status of whichever manager answers (the leader when
// it is known), with retries.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st Status
	if err := c.do(ctx, http.MethodGet, "/rpc/v1/status", nil, nil, 0, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Members returns the LAN gossip pool's members as a manager sees them.
func (c *Client) Members(ctx context.Context) (*Members, error) {
	var m Members
	if err := c.do(ctx, http.MethodGet, OperatorMembersPath, nil, nil, 0, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// RemovePeer removes the Raft server id from the configuration, at the
// leader.
func (c *Client) RemovePeer(ctx context.Context, id string) (*PeerResult, error) {
	return c.peerChange(ctx, OperatorRemovePeerPath, id)
}

// TransferLeader hands leadership to id, or with "" to the voter Raft
// picks, and returns the leader after it.
func (c *Client) TransferLeader(ctx context.Context, id string) (*PeerResult, error) {
	return c.peerChange(ctx, OperatorTransferLeaderPath, id)
}

func (c *Client) peerChange(ctx context.Context, path, id string) (*PeerResult, error) {
	b, err := json.Marshal(PeerRequest{ID: id})
	if err != nil {
		return nil, err
	}
	var res PeerResult
	if err := c.do(ctx, http.MethodPost, path, nil, b, 0, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Keyring lists the gossip keys of every member of pool (PoolLAN or
// PoolWAN; "" is the LAN pool), through one manager.
func (c *Client) Keyring(ctx context.Context, pool string) (*Keyring, error) {
	var k Keyring
	if err := c.do(ctx, http.MethodGet, OperatorKeyringPath, url.Values{"pool": {pool}}, nil, 0, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// ChangeKeyring applies req (install, use or remove) on every member of
// its pool, through one manager.
func (c *Client) ChangeKeyring(ctx context.Context, req KeyringRequest) (*Keyring, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var k Keyring
	if err := c.do(ctx, http.MethodPost, OperatorKeyringPath, nil, b, 0, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// Snapshot writes a snapshot archive of the leader's ledger to w. An
// attempt that fails before the first byte is retried; once a byte is
// written, or w fails, the error is returned as it is (w may hold part of
// an archive).
func (c *Client) Snapshot(ctx context.Context, w io.Writer) error {
	return c.retry(ctx, OperatorSnapshotPath, func(addr string) error {
		return c.exchange(ctx, addr, http.MethodGet, OperatorSnapshotPath, nil, nil, "", 0, func(r io.Reader) error {
			cw := &countWriter{w: w}
			_, err := io.Copy(cw, r)
			switch {
			case cw.err != nil:
				return &finalError{fmt.Errorf("snapshot: write: %w", cw.err)}
			case err != nil && cw.n > 0:
				return &finalError{fmt.Errorf("snapshot from %s cut after %d bytes: %w", addr, cw.n, err)}
			}
			return err
		})
	})
}

// countWriter counts what reaches w and keeps w's own error apart from the
// reader's.
type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// Restore replaces the leader's ledger with the archive r holds; each
// attempt sends it from its start.
func (c *Client) Restore(ctx context.Context, r io.ReadSeeker) error {
	return c.retry(ctx, OperatorSnapshotPath, func(addr string) error {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return &finalError{fmt.Errorf("restore: rewind the archive: %w", err)}
		}
		return c.exchange(ctx, addr, http.MethodPut, OperatorSnapshotPath, nil, io.NopCloser(r), "", 0, func(r io.Reader) error {
			var res PeerResult
			b, err := io.ReadAll(io.LimitReader(r, 1<<20))
			if err == nil {
				err = json.Unmarshal(b, &res)
			}
			if err != nil {
				return Errorf(CodeInternal, "decode restore answer: %v", err)
			}
			return nil
		})
	})
}
