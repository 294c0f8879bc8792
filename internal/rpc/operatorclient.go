package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The Operator service's client side (operator.go): oncectl's. The operator
// credential is ClientConfig.OperatorSecret, sent with these calls only, or
// a client certificate of the operator role in ClientConfig.TLS.

// operatorCall runs an Operator method with the retries of every call,
// the operator secret in its metadata, each attempt within AttemptTimeout
// (a snapshot's or a restore's whole stream included); do is told the
// address of the manager its attempt goes to. learn is retry's: with true
// the manager that answers is taken for the leader (false for a method any
// manager answers: its answer proves nothing about the leader).
func (c *Client) operatorCall(ctx context.Context, what string, learn bool, do func(context.Context, string, rpcpb.OperatorClient) error) error {
	if s := c.cfg.OperatorSecret; s != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, OperatorSecretMetadata, s)
	}
	return c.retry(ctx, what, learn, func(addr string) error {
		return c.onConn(ctx, addr, what, 0, func(ctx context.Context, cc grpc.ClientConnInterface) error {
			return do(ctx, addr, rpcpb.NewOperatorClient(cc))
		})
	})
}

// operatorUnary runs a unary Operator method (m, a method expression of
// rpcpb.OperatorClient) with operatorCall (learn: its answer is the
// leader's) and returns its answer.
func operatorUnary[Req, Resp any](c *Client, ctx context.Context, what string, learn bool,
	m func(rpcpb.OperatorClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	var res Resp
	err := c.operatorCall(ctx, what, learn, func(ctx context.Context, _ string, oc rpcpb.OperatorClient) (err error) {
		res, err = m(oc, ctx, req)
		return err
	})
	return res, err
}

// Members returns the LAN gossip pool's members as a manager sees them.
func (c *Client) Members(ctx context.Context) (*rpcpb.MembersResponse, error) {
	return operatorUnary(c, ctx, "members", false, rpcpb.OperatorClient.Members, &rpcpb.MembersRequest{})
}

// RemovePeer removes the Raft server id from the configuration, at the
// leader. An attempt whose outcome is unknown (its answer lost in
// transport, or unavailable: the leader lost its office while the removal
// was being committed) may have removed id, so the retry would find no such
// server: after such an attempt, not_found is the removal's goal reached,
// and the answer says so instead of failing. Unknown means answered
// unavailable, or no answer before the attempt's deadline; a connection
// refused (a dead manager of the list) is not, or a mistyped ID would pass
// for removed. A deadline passed on a manager that got the request but
// would not have led cannot be told apart, so the answer says "may have":
// the server is out of the configuration either way.
func (c *Client) RemovePeer(ctx context.Context, id string) (*rpcpb.PeerResult, error) {
	var res *rpcpb.PeerResult
	mayHaveRemoved := false
	err := c.operatorCall(ctx, "remove peer", true, func(ctx context.Context, _ string, oc rpcpb.OperatorClient) (err error) {
		res, err = oc.RemovePeer(ctx, &rpcpb.PeerRequest{Id: id})
		if err == nil {
			return nil
		}
		switch answer := callError("remove peer", "", err); {
		case mayHaveRemoved && errors.Is(answer, ErrNotFound):
			res, err = &rpcpb.PeerResult{Done: id + " is not in the Raft configuration (an earlier attempt, whose answer was lost, may have removed it)"}, nil
		case errors.Is(answer, ErrUnavailable), status.Code(err) == codes.DeadlineExceeded:
			mayHaveRemoved = true
		}
		return err
	})
	return res, err
}

// TransferLeader hands leadership to id, or with "" to the voter Raft
// picks, and returns the leader after it. An attempt whose outcome is
// unknown (answered unavailable: Raft's transfer timed out, and its target
// may still win the election it started; or no answer before the attempt's
// deadline) may have moved leadership, so the retry first asks the manager
// that attempt went to for its status: when the leader it knows is id (any
// manager but itself with ""), the transfer happened and the answer says so,
// rather than transfer leadership a second time (with "") or refuse a
// transfer to the manager that already leads (with id). A manager that
// knows no leader yet (the election under way) is asked again after the
// backoff; one that does not answer leaves the outcome unknown: with "" the
// call then fails, without a second transfer; with id the status of the
// manager the retry goes to decides instead.
func (c *Client) TransferLeader(ctx context.Context, id string) (*rpcpb.PeerResult, error) {
	var res *rpcpb.PeerResult
	unknownAt := "" // the manager an attempt of unknown outcome went to
	err := c.operatorCall(ctx, "transfer leader", true, func(ctx context.Context, addr string, oc rpcpb.OperatorClient) (err error) {
		if unknownAt != "" {
			done, err := c.transferDone(ctx, id, unknownAt, addr)
			if done != nil || err != nil {
				res = done
				return err
			}
		}
		res, err = oc.TransferLeader(ctx, &rpcpb.PeerRequest{Id: id})
		if err == nil {
			return nil
		}
		if errors.Is(callError("transfer leader", "", err), ErrUnavailable) || status.Code(err) == codes.DeadlineExceeded {
			unknownAt = addr
		}
		return err
	})
	return res, err
}

// transferDone tells whether a transfer of leadership to id (or, with "",
// away from the manager at) happened after an attempt at at whose outcome is
// unknown: the answer when it did; nil when the transfer is still to be
// made (at still leads, or with id another manager does); an error when
// that cannot be told yet (unavailable, retried) or at all (final). With
// id, next (the manager the retry goes to) is asked when at does not
// answer: its leader, if id, is enough.
func (c *Client) transferDone(ctx context.Context, id, at, next string) (*rpcpb.PeerResult, error) {
	st, err := c.StatusOf(ctx, at)
	if err != nil && id != "" && next != at {
		st, err = c.StatusOf(ctx, next)
	}
	switch {
	case err != nil && id == "":
		return nil, &finalError{fmt.Errorf("transfer leader: an attempt at %s, whose answer was lost, may have moved leadership, and %s does not answer now: "+
			"the outcome is unknown (see cluster status): %w", at, at, err)}
	case err != nil:
		return nil, err // retried: the transfer to id is still to be confirmed or made
	case st.LeaderID == "":
		return nil, Errorf(CodeUnavailable, "transfer leader: %s knows no leader yet", st.NodeID)
	case id != "" && st.LeaderID == id, id == "" && st.LeaderID != st.NodeID:
		return &rpcpb.PeerResult{Done: "leadership transferred (by an earlier attempt, whose answer was lost)", Leader: st.LeaderID}, nil
	}
	return nil, nil
}

// Keyring lists the gossip keys of every member of pool (PoolLAN or
// PoolWAN; "" is the LAN pool), through one manager.
func (c *Client) Keyring(ctx context.Context, pool string) (*rpcpb.KeyringResponse, error) {
	return operatorUnary(c, ctx, "keyring", false, rpcpb.OperatorClient.Keyring, &rpcpb.KeyringListRequest{Pool: pool})
}

// ChangeKeyring applies req (op install, use or remove) on every member of
// its pool, through one manager.
func (c *Client) ChangeKeyring(ctx context.Context, req *rpcpb.KeyringRequest) (*rpcpb.KeyringResponse, error) {
	return operatorUnary(c, ctx, "keyring", false, rpcpb.OperatorClient.ChangeKeyring, req)
}

// ForgetDatacenter has the leader record every submission its outbox
// carries to dc as confirmed by dc (a datacenter gone for good), and returns
// how many it recorded. Retried as any call: a second run records only what
// the first did not, so after an attempt whose answer was lost the count is
// the retry's alone.
func (c *Client) ForgetDatacenter(ctx context.Context, dc string) (*rpcpb.ForgetDatacenterResult, error) {
	return operatorUnary(c, ctx, "forget datacenter", true, rpcpb.OperatorClient.ForgetDatacenter, &rpcpb.ForgetDatacenterRequest{Datacenter: dc})
}

// Snapshot writes a snapshot archive of the leader's ledger to w. An
// attempt that fails before the first chunk is retried; once a chunk is
// written, or w fails, the error is returned as it is (w may hold part of
// an archive).
func (c *Client) Snapshot(ctx context.Context, w io.Writer) error {
	return c.operatorCall(ctx, "snapshot", true, func(ctx context.Context, _ string, oc rpcpb.OperatorClient) error {
		stream, err := oc.Snapshot(ctx, &rpcpb.SnapshotRequest{})
		if err != nil {
			return err
		}
		var n int64
		for {
			ch, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				if n > 0 {
					return &finalError{fmt.Errorf("snapshot cut after %d bytes: %w", n, callError("snapshot", "", err))}
				}
				return err
			}
			k, err := w.Write(ch.GetData())
			n += int64(k)
			if err != nil {
				return &finalError{fmt.Errorf("snapshot: write: %w", err)}
			}
		}
	})
}

// Restore replaces the leader's ledger with the archive r holds, sent in
// chunks of snapshotChunkBytes as it is read (never all of it in memory).
// When r is an io.Seeker each attempt sends it from its start; otherwise an
// attempt that read from r is the last. An attempt that sent the whole
// archive and got no answer is the last too: the leader may have installed
// it. The leader answers unavailable only for a restore it did not install
// (an archive it installed and could not confirm is an internal error), so
// that answer is retried.
func (c *Client) Restore(ctx context.Context, r io.Reader) error {
	seeker, _ := r.(io.Seeker)
	read := false
	return c.operatorCall(ctx, "restore", true, func(ctx context.Context, _ string, oc rpcpb.OperatorClient) error {
		if seeker != nil {
			if _, err := seeker.Seek(0, io.SeekStart); err != nil {
				return &finalError{fmt.Errorf("restore: rewind the archive: %w", err)}
			}
		} else if read {
			return &finalError{errors.New("restore: the archive cannot be sent again (not seekable)")}
		}
		err := c.restoreOnce(ctx, oc, r, &read)
		if err != nil && seeker == nil && read && !errors.As(err, new(*finalError)) {
			err = &finalError{callError("restore", "", err)}
		}
		return err
	})
}

// restoreOnce sends r on one Restore stream and returns the manager's
// answer; read is set once anything was read from r. An attempt whose
// stream ended before the whole archive was sent (a connection cut as it
// was sent) fails as any attempt does: the manager cannot have installed
// an archive it did not receive.
func (c *Client) restoreOnce(ctx context.Context, oc rpcpb.OperatorClient, r io.Reader, read *bool) error {
	stream, err := oc.Restore(ctx)
	if err != nil {
		return err
	}
	sentAll := false // every chunk of the archive handed to the stream
	for {
		buf := make([]byte, snapshotChunkBytes) // each chunk its own: Send may keep it
		n, rerr := io.ReadFull(r, buf)
		*read = true
		if n > 0 {
			if err := stream.Send(&rpcpb.SnapshotChunk{Data: buf[:n]}); err != nil {
				if errors.Is(err, io.EOF) {
					// The stream ended before the archive did: the
					// manager answered already, or the connection was
					// cut. CloseAndRecv has which.
					break
				}
				return err
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			sentAll = true
			break
		}
		if rerr != nil {
			return &finalError{fmt.Errorf("restore: read the archive: %w", rerr)}
		}
	}
	_, err = stream.CloseAndRecv()
	if answer := callError("restore", "", err); err != nil && sentAll && !errors.As(answer, new(*Error)) {
		// The whole archive was sent and no answer came (the attempt's
		// deadline, a connection cut): the leader may be installing it,
		// and sending it again would restore it a second time, erasing
		// what was admitted after the first.
		return &finalError{fmt.Errorf("restore: the archive was sent and its answer lost: the leader may have installed it; "+
			"do not send it again before checking the ledger: %w", answer)}
	}
	return err
}
