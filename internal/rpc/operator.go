package rpc

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The Operator service (rpcpb.Operator; operator.proto and docs/rpc.md say
// what each method answers, and where), served beside Manager on a
// manager's RPC listener, to callers with an operator credential
// (operatorauth.go).

// snapshotChunkBytes is the size of a snapshot archive's chunks, both ways.
const snapshotChunkBytes = 1 << 20

// maxOperatorRequestBytes bounds a unary operator request (a Raft server
// ID, a keyring change).
const maxOperatorRequestBytes = 4 << 10

// Keyring pools (rpcpb.KeyringRequest's and KeyringListRequest's Pool).
const (
	PoolLAN = "lan"
	PoolWAN = "wan"
)

// Operator is what a manager offers oncectl, in the service's own messages
// (operator.proto). Implementations return *Error values.
type Operator interface {
	Members(ctx context.Context) (*rpcpb.MembersResponse, error)
	RemovePeer(ctx context.Context, id string) (*rpcpb.PeerResult, error)
	TransferLeader(ctx context.Context, id string) (*rpcpb.PeerResult, error)
	// Snapshot writes a snapshot archive to w; nothing is written before the
	// snapshot is taken, so an error can still be answered as one.
	Snapshot(ctx context.Context, w io.Writer) error
	Restore(ctx context.Context, r io.Reader) error
	// Keyring runs a keyring operation (list, install, use, remove) on
	// every member of a gossip pool; the Keyring method is op "list".
	Keyring(ctx context.Context, req *rpcpb.KeyringRequest) (*rpcpb.KeyringResponse, error)
	// ForgetDatacenter records every submission the outbox carries to dc,
	// a datacenter gone for good, as confirmed by it, and returns how
	// many (leader only).
	ForgetDatacenter(ctx context.Context, dc string) (*rpcpb.ForgetDatacenterResult, error)
}

// operatorService is the Operator service of a Server: each method runs
// the Operator the Server was given (ServerConfig.Operator) and answers its
// error as the Manager service's methods do (callStatus). The operator
// credential was checked before (operatorInterceptors).
type operatorService struct {
	rpcpb.UnimplementedOperatorServer
	s  *Server
	op Operator
}

func (o *operatorService) Members(ctx context.Context, _ *rpcpb.MembersRequest) (*rpcpb.MembersResponse, error) {
	m, err := o.op.Members(ctx)
	return m, o.s.callStatus("members", err)
}

// checkOperatorRequest refuses as invalid a unary operator request over
// its bound, or one that is invalid for the reason refusal says.
func checkOperatorRequest(p proto.Message, invalid bool, refusal string) error {
	if n := proto.Size(p); n > maxOperatorRequestBytes {
		return Errorf(CodeInvalid, "request of %d bytes is over %d", n, maxOperatorRequestBytes)
	}
	if invalid {
		return Errorf(CodeInvalid, "%s", refusal)
	}
	return nil
}

func (o *operatorService) RemovePeer(ctx context.Context, p *rpcpb.PeerRequest) (*rpcpb.PeerResult, error) {
	return reply(o.s, "remove peer", checkOperatorRequest(p, p.GetId() == "", "id: the Raft server ID to act on is required"),
		func() (*rpcpb.PeerResult, error) { return o.op.RemovePeer(ctx, p.GetId()) })
}

func (o *operatorService) TransferLeader(ctx context.Context, p *rpcpb.PeerRequest) (*rpcpb.PeerResult, error) {
	return reply(o.s, "transfer leader", checkOperatorRequest(p, false, ""),
		func() (*rpcpb.PeerResult, error) { return o.op.TransferLeader(ctx, p.GetId()) })
}

func (o *operatorService) Keyring(ctx context.Context, p *rpcpb.KeyringListRequest) (*rpcpb.KeyringResponse, error) {
	k, err := o.op.Keyring(ctx, &rpcpb.KeyringRequest{Op: "list", Pool: p.GetPool()})
	return k, o.s.callStatus("keyring", err)
}

func (o *operatorService) ChangeKeyring(ctx context.Context, p *rpcpb.KeyringRequest) (*rpcpb.KeyringResponse, error) {
	return reply(o.s, "keyring", checkOperatorRequest(p, p.GetOp() == "list", "op: list is the Keyring method, not ChangeKeyring"),
		func() (*rpcpb.KeyringResponse, error) { return o.op.Keyring(ctx, p) })
}

func (o *operatorService) ForgetDatacenter(ctx context.Context, p *rpcpb.ForgetDatacenterRequest) (*rpcpb.ForgetDatacenterResult, error) {
	return reply(o.s, "forget datacenter", checkOperatorRequest(p, p.GetDatacenter() == "", "datacenter: the datacenter to forget is required"),
		func() (*rpcpb.ForgetDatacenterResult, error) { return o.op.ForgetDatacenter(ctx, p.GetDatacenter()) })
}

// Snapshot sends the archive in chunks of snapshotChunkBytes; an error
// before the first chunk is answered as the call's error, one after it
// cuts the stream (the client refuses the archive).
func (o *operatorService) Snapshot(_ *rpcpb.SnapshotRequest, stream grpc.ServerStreamingServer[rpcpb.SnapshotChunk]) error {
	w := &chunkWriter{send: stream.Send}
	err := o.op.Snapshot(stream.Context(), w)
	if err == nil {
		err = w.flush()
	}
	if err != nil && w.sent {
		o.s.log.Error("snapshot archive cut short", logging.KeyError, err)
	}
	return o.s.callStatus("snapshot", err)
}

// Restore hands the chunks to the Operator as one reader.
func (o *operatorService) Restore(stream grpc.ClientStreamingServer[rpcpb.SnapshotChunk, rpcpb.PeerResult]) error {
	if err := o.op.Restore(stream.Context(), &chunkReader{recv: stream.Recv}); err != nil {
		return o.s.callStatus("restore", err)
	}
	return stream.SendAndClose(&rpcpb.PeerResult{Done: "restored"})
}

// chunkWriter sends what is written in chunks of snapshotChunkBytes (the
// last one shorter, at flush); each chunk is its own buffer, never reused
// after its Send.
type chunkWriter struct {
	send func(*rpcpb.SnapshotChunk) error
	buf  []byte
	sent bool // a chunk was sent
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if c.buf == nil {
			c.buf = make([]byte, 0, snapshotChunkBytes)
		}
		k := min(len(p), snapshotChunkBytes-len(c.buf))
		c.buf = append(c.buf, p[:k]...)
		p, n = p[k:], n+k
		if len(c.buf) == snapshotChunkBytes {
			if err := c.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	b := c.buf
	c.buf = nil
	c.sent = true
	return c.send(&rpcpb.SnapshotChunk{Data: b})
}

// chunkReader reads the chunks recv returns as one stream.
type chunkReader struct {
	recv func() (*rpcpb.SnapshotChunk, error)
	buf  []byte
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		ch, err := c.recv()
		if err != nil {
			return 0, err // io.EOF at the end of the client's stream
		}
		c.buf = ch.GetData()
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}
