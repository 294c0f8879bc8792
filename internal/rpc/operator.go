package rpc

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// The Operator service (rpcpb.Operator, docs/rpc.md), served beside Manager
// on a manager's RPC listener: oncectl's cluster, raft, snapshot and gossip
// commands (docs/oncectl.md). Every method needs an operator credential
// besides the cluster's (operatorauth.go); a caller without one is refused
// CodeForbidden before the method runs. Reads answer on any manager;
// changes to the Raft configuration, the snapshot and the restore answer on
// the leader only, and elsewhere not_leader naming the leader, as the
// Manager service's methods do.

// snapshotChunkBytes is the size of a snapshot archive's chunks, both ways.
const snapshotChunkBytes = 1 << 20

// maxOperatorRequestBytes bounds a unary operator request (a Raft server
// ID, a keyring change).
const maxOperatorRequestBytes = 4 << 10

// Keyring pools and operations (KeyringRequest).
const (
	PoolLAN = "lan"
	PoolWAN = "wan"
)

// KeyringRequest is a pool-wide keyring change: Op is install, use or remove
// (Client.ChangeKeyring; Client.Keyring lists); Key is the base64 gossip key; Pool is lan (default: the
// datacenter's pool, managers and gates) or wan (the managers of every
// datacenter).
type KeyringRequest struct {
	Op   string `json:"op"`
	Key  string `json:"key"`
	Pool string `json:"pool,omitempty"`
}

// KeyringNode is one member's answer: its keys after the operation (base64,
// the primary first) or its error.
type KeyringNode struct {
	Node  string   `json:"node"`
	Keys  []string `json:"keys"`
	Error string   `json:"error,omitempty"`
}

// KeyringKey is one key and how many members hold it and encrypt with it.
type KeyringKey struct {
	Key       string `json:"key"`
	Installed int    `json:"installed"`
	Primary   int    `json:"primary"`
}

// Keyring is the answer of the Keyring and ChangeKeyring methods.
type Keyring struct {
	Node string `json:"node"` // the manager that asked the pool
	Pool string `json:"pool"`
	Op   string `json:"op"`
	// Members is how many members answered; Keys counts them per key.
	Members  int           `json:"members"`
	Keys     []KeyringKey  `json:"keys"`
	Nodes    []KeyringNode `json:"nodes"`
	NoAnswer []string      `json:"no_answer"`
	// Complete: every alive member answered, without error.
	Complete bool `json:"complete"`
}

// Member is one node of a manager's LAN gossip pool.
type Member struct {
	Name       string `json:"name"`
	Addr       string `json:"addr"`
	Status     string `json:"status"` // alive, suspect, failed, left
	Role       string `json:"role"`
	Datacenter string `json:"datacenter"`
	NodeID     string `json:"node_id,omitempty"`
	RPCAddr    string `json:"rpc_addr,omitempty"`
	RaftAddr   string `json:"raft_addr,omitempty"`
}

// Members is the answer of the Members method.
type Members struct {
	Node    string   `json:"node"` // the manager that answered
	Members []Member `json:"members"`
}

// PeerResult is the answer of a change: the leader after it.
type PeerResult struct {
	Done   string `json:"done"`
	Leader string `json:"leader,omitempty"`
}

// Operator is what a manager offers oncectl. Implementations return *Error
// values.
type Operator interface {
	Members(ctx context.Context) (*Members, error)
	RemovePeer(ctx context.Context, id string) (*PeerResult, error)
	TransferLeader(ctx context.Context, id string) (*PeerResult, error)
	// Snapshot writes a snapshot archive to w; nothing is written before the
	// snapshot is taken, so an error can still be answered as one.
	Snapshot(ctx context.Context, w io.Writer) error
	Restore(ctx context.Context, r io.Reader) error
	// Keyring runs a keyring operation (list, install, use, remove) on every
	// member of a gossip pool.
	Keyring(ctx context.Context, req KeyringRequest) (*Keyring, error)
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
	if err != nil {
		return nil, o.s.callStatus("members", err)
	}
	return toPBMembers(m), nil
}

// peerChange runs a Raft change of the server p names (required unless
// idOptional).
func (o *operatorService) peerChange(ctx context.Context, what string, p *rpcpb.PeerRequest, idOptional bool,
	do func(context.Context, string) (*PeerResult, error)) (*rpcpb.PeerResult, error) {
	if err := checkSize(p, maxOperatorRequestBytes); err != nil {
		return nil, o.s.callStatus(what, err)
	}
	if !idOptional && p.GetId() == "" {
		return nil, o.s.callStatus(what, Errorf(CodeInvalid, "id: the Raft server ID to act on is required"))
	}
	res, err := do(ctx, p.GetId())
	if err != nil {
		return nil, o.s.callStatus(what, err)
	}
	return &rpcpb.PeerResult{Done: res.Done, Leader: res.Leader}, nil
}

func (o *operatorService) RemovePeer(ctx context.Context, p *rpcpb.PeerRequest) (*rpcpb.PeerResult, error) {
	return o.peerChange(ctx, "remove peer", p, false, o.op.RemovePeer)
}

func (o *operatorService) TransferLeader(ctx context.Context, p *rpcpb.PeerRequest) (*rpcpb.PeerResult, error) {
	return o.peerChange(ctx, "transfer leader", p, true, o.op.TransferLeader)
}

func (o *operatorService) Keyring(ctx context.Context, p *rpcpb.KeyringListRequest) (*rpcpb.KeyringResponse, error) {
	return o.keyring(ctx, KeyringRequest{Op: "list", Pool: p.GetPool()})
}

func (o *operatorService) ChangeKeyring(ctx context.Context, p *rpcpb.KeyringRequest) (*rpcpb.KeyringResponse, error) {
	if err := checkSize(p, maxOperatorRequestBytes); err != nil {
		return nil, o.s.callStatus("keyring", err)
	}
	if p.GetOp() == "list" {
		return nil, o.s.callStatus("keyring", Errorf(CodeInvalid, "op: list is the Keyring method, not ChangeKeyring"))
	}
	return o.keyring(ctx, KeyringRequest{Op: p.GetOp(), Key: p.GetKey(), Pool: p.GetPool()})
}

func (o *operatorService) keyring(ctx context.Context, req KeyringRequest) (*rpcpb.KeyringResponse, error) {
	k, err := o.op.Keyring(ctx, req)
	if err != nil {
		return nil, o.s.callStatus("keyring", err)
	}
	return toPBKeyring(k), nil
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
	if err != nil {
		return o.s.callStatus("snapshot", err)
	}
	return nil
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

// chunkReader reads the chunks recv returns as one stream; the end of the
// client's stream is io.EOF.
type chunkReader struct {
	recv func() (*rpcpb.SnapshotChunk, error)
	buf  []byte
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		ch, err := c.recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.EOF
			}
			return 0, err
		}
		c.buf = ch.GetData()
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// The conversions of the operator's types (as wire.go's): every member
// crosses, and the slices the manager always sets (Keyring's Keys and
// NoAnswer, a node's Keys) arrive empty rather than nil, so oncectl's JSON
// output is the manager's.

func toPBMembers(m *Members) *rpcpb.MembersResponse {
	p := &rpcpb.MembersResponse{Node: m.Node}
	for _, x := range m.Members {
		p.Members = append(p.Members, &rpcpb.Member{Name: x.Name, Addr: x.Addr, Status: x.Status, Role: x.Role,
			Datacenter: x.Datacenter, NodeId: x.NodeID, RpcAddr: x.RPCAddr, RaftAddr: x.RaftAddr})
	}
	return p
}

func fromPBMembers(p *rpcpb.MembersResponse) *Members {
	m := &Members{Node: p.GetNode()}
	for _, x := range p.GetMembers() {
		m.Members = append(m.Members, Member{Name: x.GetName(), Addr: x.GetAddr(), Status: x.GetStatus(), Role: x.GetRole(),
			Datacenter: x.GetDatacenter(), NodeID: x.GetNodeId(), RPCAddr: x.GetRpcAddr(), RaftAddr: x.GetRaftAddr()})
	}
	return m
}

func toPBKeyring(k *Keyring) *rpcpb.KeyringResponse {
	p := &rpcpb.KeyringResponse{Node: k.Node, Pool: k.Pool, Op: k.Op, Members: int64(k.Members),
		NoAnswer: k.NoAnswer, Complete: k.Complete}
	for _, x := range k.Keys {
		p.Keys = append(p.Keys, &rpcpb.KeyringKey{Key: x.Key, Installed: int64(x.Installed), Primary: int64(x.Primary)})
	}
	for _, n := range k.Nodes {
		p.Nodes = append(p.Nodes, &rpcpb.KeyringNode{Node: n.Node, Keys: n.Keys, Error: n.Error})
	}
	return p
}

func fromPBKeyring(p *rpcpb.KeyringResponse) *Keyring {
	k := &Keyring{Node: p.GetNode(), Pool: p.GetPool(), Op: p.GetOp(), Members: int(p.GetMembers()),
		Keys: make([]KeyringKey, 0, len(p.GetKeys())), NoAnswer: append([]string{}, p.GetNoAnswer()...), Complete: p.GetComplete()}
	for _, x := range p.GetKeys() {
		k.Keys = append(k.Keys, KeyringKey{Key: x.GetKey(), Installed: int(x.GetInstalled()), Primary: int(x.GetPrimary())})
	}
	for _, n := range p.GetNodes() {
		k.Nodes = append(k.Nodes, KeyringNode{Node: n.GetNode(), Keys: append([]string{}, n.GetKeys()...), Error: n.GetError()})
	}
	return k
}
