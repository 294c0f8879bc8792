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
	return doJSON[Status](ctx, c, http.MethodGet, "/rpc/v1/status", nil, nil)
}

// Members returns the LAN gossip pool's members as a manager sees them.
func (c *Client) Members(ctx context.Context) (*Members, error) {
	return doJSON[Members](ctx, c, http.MethodGet, OperatorMembersPath, nil, nil)
}

// RemovePeer removes the Raft server id from the configuration, at the
// leader.
func (c *Client) RemovePeer(ctx context.Context, id string) (*PeerResult, error) {
	return doJSON[PeerResult](ctx, c, http.MethodPost, OperatorRemovePeerPath, nil, PeerRequest{ID: id})
}

// TransferLeader hands leadership to id, or with "" to the voter Raft
// picks, and returns the leader after it.
func (c *Client) TransferLeader(ctx context.Context, id string) (*PeerResult, error) {
	return doJSON[PeerResult](ctx, c, http.MethodPost, OperatorTransferLeaderPath, nil, PeerRequest{ID: id})
}

// Keyring lists the gossip keys of every member of pool (PoolLAN or
// PoolWAN; "" is the LAN pool), through one manager.
func (c *Client) Keyring(ctx context.Context, pool string) (*Keyring, error) {
	return doJSON[Keyring](ctx, c, http.MethodGet, OperatorKeyringPath, url.Values{"pool": {pool}}, nil)
}

// ChangeKeyring applies req (install, use or remove) on every member of
// its pool, through one manager.
func (c *Client) ChangeKeyring(ctx context.Context, req KeyringRequest) (*Keyring, error) {
	return doJSON[Keyring](ctx, c, http.MethodPost, OperatorKeyringPath, nil, req)
}

// doJSON sends in (nil: no body) as JSON with the retries of every call
// and decodes the answer.
func doJSON[T any](ctx context.Context, c *Client, method, path string, q url.Values, in any) (*T, error) {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = b
	}
	var out T
	if err := c.do(ctx, method, path, q, body, 0, &out); err != nil {
		return nil, err
	}
	return &out, nil
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
