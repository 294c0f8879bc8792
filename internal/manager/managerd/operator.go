package managerd

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/ledger"
	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/membership"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// operator implements rpc.Operator: what oncectl's cluster and raft commands
// ask a manager (docs/oncectl.md).
type operator struct {
	m    *manager.Manager
	node string       // the manager's NodeID
	log  *slog.Logger // the manager's logger
	fed  *federation  // its gossip pools: the LAN pool nil until joined, the WAN pool nil when not federated
	// pilot is the autopilot checkQuorumWithout reads (autopilotOf the
	// manager in the daemon), nil until there is one.
	pilot func() autopilotView
}

// operatorTimeout bounds a change to the Raft configuration.
const operatorTimeout = 10 * time.Second

// errNotJoined answers a pool read before the manager joined its LAN pool.
var errNotJoined = rpc.Errorf(rpc.CodeUnavailable, "the manager has not joined its gossip pool yet")

func (o operator) Members(context.Context) (*rpcpb.MembersResponse, error) {
	p := o.fed.lan.Load()
	if p == nil {
		return nil, errNotJoined
	}
	out := &rpcpb.MembersResponse{Node: o.node}
	for _, mem := range p.Members() {
		out.Members = append(out.Members, &rpcpb.Member{
			Name: mem.Name, Addr: mem.Addr, Status: mem.State.String(),
			Role: string(mem.Meta.Role), Datacenter: mem.Meta.Datacenter, NodeId: mem.Meta.NodeID,
			RpcAddr: mem.Meta.RPCAddr, RaftAddr: mem.Meta.RaftAddr,
		})
	}
	return out, nil
}

// keyringTimeout bounds a pool-wide keyring operation: members that have not
// answered by then are listed as such.
const keyringTimeout = 5 * time.Second

// keyringOps are the keyring operations by their name in a KeyringRequest.
var keyringOps = map[string]membership.KeyringOp{
	"list": membership.KeyringList, "install": membership.KeyringInstall,
	"use": membership.KeyringUse, "remove": membership.KeyringRemove,
}

// Keyring runs a keyring operation on every member of the LAN or WAN pool
// through membership's pool-wide query, and counts the keys the members
// hold.
func (o operator) Keyring(ctx context.Context, req *rpcpb.KeyringRequest) (*rpcpb.KeyringResponse, error) {
	var p *membership.Pool
	pool := cmp.Or(req.GetPool(), rpc.PoolLAN)
	switch pool {
	case rpc.PoolLAN:
		p = o.fed.lan.Load()
	case rpc.PoolWAN:
		if p = o.fed.wan; p == nil {
			return nil, rpc.Errorf(rpc.CodeInvalid, "this manager is not in a WAN pool (MANAGER_WAN_GOSSIP_ADDR)")
		}
	default:
		return nil, rpc.Errorf(rpc.CodeInvalid, "pool %q: want lan or wan", pool)
	}
	if p == nil {
		return nil, errNotJoined
	}
	op, ok := keyringOps[req.GetOp()]
	if !ok {
		return nil, rpc.Errorf(rpc.CodeInvalid, "op %q: want list, install, use or remove", req.GetOp())
	}
	var key []byte
	if op != membership.KeyringList {
		var err error
		if key, err = membership.ParseSecretKey(req.GetKey()); err != nil {
			return nil, rpc.Errorf(rpc.CodeInvalid, "key: %v", err)
		}
	}
	qctx, cancel := context.WithTimeout(ctx, keyringTimeout)
	defer cancel()
	res, err := p.KeyringQuery(qctx, op, key)
	if errors.Is(err, membership.ErrNoEncryption) {
		return nil, rpc.Errorf(rpc.CodeInvalid, "the %s pool is not encrypted: start every member with a gossip key first (docs/operations.md)", pool)
	}
	if errors.Is(err, membership.ErrShutdown) {
		// The manager is stopping: nothing was applied, not even here; the
		// client asks another manager.
		return nil, rpc.Errorf(rpc.CodeUnavailable, "the %s gossip pool of this manager is shut down (the manager is stopping)", pool)
	}
	if err != nil {
		return nil, rpc.Errorf(rpc.CodeInvalid, "%v", err)
	}
	out := &rpcpb.KeyringResponse{Node: o.node, Pool: pool, Op: req.GetOp(), Members: int32(len(res.Nodes)),
		NoAnswer: res.NoAnswer, Complete: res.Complete()}
	counts := map[string]*rpcpb.KeyringKey{} // out.Keys's, by key
	for _, n := range res.Nodes {
		node := &rpcpb.KeyringNode{Node: n.Node, Error: n.Err}
		for i, k := range n.Keys {
			enc := base64.StdEncoding.EncodeToString(k)
			node.Keys = append(node.Keys, enc)
			c := counts[enc]
			if c == nil {
				c = &rpcpb.KeyringKey{Key: enc}
				counts[enc] = c
				out.Keys = append(out.Keys, c)
			}
			c.Installed++
			if i == 0 {
				c.Primary++
			}
		}
		out.Nodes = append(out.Nodes, node)
	}
	return out, nil
}

// RemovePeer removes a server from the Raft configuration, on the leader. It
// is meant for a manager that is gone for good (dead, or its machine
// replaced): a live manager in the pool would be added back by the autopilot;
// stop it with MANAGER_LEAVE_ON_TERMINATE=true instead (docs/operations.md).
func (o operator) RemovePeer(ctx context.Context, id string) (*rpcpb.PeerResult, error) {
	if err := o.m.CheckLeader(); err != nil {
		return nil, err
	}
	if _, err := o.server(id); err != nil {
		return nil, err
	}
	if err := o.checkQuorumWithout(id); err != nil {
		return nil, err
	}
	if err := o.m.Raft().RemoveServer(raft.ServerID(id), 0, operatorTimeout).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return nil, o.m.ApplyError(err) // nothing was appended
		}
		// The configuration change may have been appended, and may still
		// commit under the next leader: not a not_leader, which says
		// nothing was done, but unavailable, which the caller retries
		// knowing that the removal may have happened (rpc.Client.RemovePeer).
		return nil, rpc.Errorf(rpc.CodeUnavailable, "removing %s: %v (it may still be committed)", id, err)
	}
	_, leader := o.m.Raft().LeaderWithID()
	return &rpcpb.PeerResult{Done: "removed " + id, Leader: string(leader)}, nil
}

// checkQuorumWithout refuses to remove id when the voters left after it
// would not hold a quorum of healthy ones: Raft counts the new
// configuration's quorum from the moment the leader appends it, so such a
// removal (a live manager taken out while another is dead, or the leader
// while the last other voter is dead) can neither commit nor let any manager
// win an election after it: the datacenter would have no leader until the
// dead ones came back. A voter counts as healthy only if the autopilot's
// health (raft-autopilot's, recomputed every few seconds) says so and it is
// not unhealthy at this instant by what the leader knows (heartbeats failing
// past the threshold, not alive in the pool): a manager killed a moment ago
// is still healthy by the former. Before raft-autopilot's first view of a
// new leader's term, only the view at this instant counts; without an
// autopilot at all (before the membership starts), nothing is refused.
func (o operator) checkQuorumWithout(id string) error {
	ap := o.pilot()
	if ap == nil {
		return nil
	}
	var healthy map[string]bool // nil: no view yet
	if h := ap.Health(); h != nil {
		healthy = map[string]bool{}
		for _, s := range h.Servers {
			healthy[s.ID] = s.Healthy
		}
	}
	unhealthyNow := ap.UnhealthyNow()
	f := o.m.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return o.m.ApplyError(err)
	}
	var left, ok, notOK []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == id {
			continue
		}
		left = append(left, string(s.ID))
		switch why, now := unhealthyNow[s.ID]; {
		case now:
			notOK = append(notOK, string(s.ID)+" "+why)
		case healthy == nil || healthy[string(s.ID)]:
			ok = append(ok, string(s.ID))
		default:
			notOK = append(notOK, string(s.ID)+" unhealthy")
		}
	}
	if len(left) == 0 {
		return rpc.Errorf(rpc.CodeInvalid, "%s is the last voter: a group without voters has no leader", id)
	}
	if quorum := len(left)/2 + 1; len(ok) < quorum {
		okList := cmp.Or(strings.Join(ok, ","), "none")
		return rpc.Errorf(rpc.CodeInvalid, "removing %s would leave %d healthy voter(s) of %d (%s healthy; %s), fewer than the %d a quorum needs: "+
			"the group could neither commit the removal nor elect a leader until the others came back; remove the dead managers first (raft peers lists them)",
			id, len(ok), len(left), okList, strings.Join(notOK, ", "), quorum)
	}
	return nil
}

// ForgetDatacenter stops the outbox carrying submissions to dc, a
// datacenter taken out of the federation for good (manager.Manager.
// ForgetDatacenter), and answers how many it forgot. A datacenter with a
// manager alive in the WAN pool is refused: it still answers, or will, and
// its jobs would be lost to it for nothing. The datacenters of the
// federation view are the ones the manager knows: a name that is none of
// them, and that the outbox owes nothing, is refused (not_found).
func (o operator) ForgetDatacenter(ctx context.Context, dc string) (*rpcpb.ForgetDatacenterResult, error) {
	// This datacenter's own managers are alive: the manager refuses it as
	// this datacenter.
	if o.fed.wan != nil && dc != o.m.Config().Datacenter {
		if alive := o.fed.wan.Managers(dc); len(alive) > 0 {
			names := make([]string, len(alive))
			for i, mem := range alive {
				names[i] = mem.Meta.NodeID
			}
			return nil, rpc.Errorf(rpc.CodeInvalid, "datacenter %s has %d manager(s) alive in the WAN pool (%s): take it out of the federation first "+
				"(stop its managers: a manager leaves the WAN pool as it stops, and one that cannot is found dead by the pool), then forget it",
				dc, len(alive), strings.Join(names, ","))
		}
	}
	known := slices.Collect(maps.Keys(o.fed.datacenters()))
	n, err := o.m.ForgetDatacenter(ctx, dc, known)
	if err != nil {
		return nil, err
	}
	return &rpcpb.ForgetDatacenterResult{Datacenter: dc, Pairs: int32(n)}, nil
}

// autopilotView is what checkQuorumWithout reads of the manager's autopilot
// (*autopilot.Autopilot): raft-autopilot's last health, and the servers
// unhealthy at this instant.
type autopilotView interface {
	Health() *api.AutopilotHealth
	UnhealthyNow() map[raft.ServerID]string
}

// autopilotOf is the autopilot of m, nil until its membership starts.
func autopilotOf(m *manager.Manager) func() autopilotView {
	return func() autopilotView {
		if ap := m.Autopilot(); ap != nil {
			return ap
		}
		return nil // not a typed nil
	}
}

// TransferLeader hands leadership to id, or to the most up-to-date voter when
// id is empty, and waits until a leader is known again.
func (o operator) TransferLeader(ctx context.Context, id string) (*rpcpb.PeerResult, error) {
	if err := o.m.CheckLeader(); err != nil {
		return nil, err
	}
	var f raft.Future
	if id == "" {
		f = o.m.Raft().LeadershipTransfer()
	} else {
		srv, err := o.server(id)
		if err != nil {
			return nil, err
		}
		if srv.ID == raft.ServerID(o.node) {
			return nil, rpc.Errorf(rpc.CodeInvalid, "%s already leads", id)
		}
		if srv.Suffrage != raft.Voter {
			return nil, rpc.Errorf(rpc.CodeInvalid, "%s is not a voter", id)
		}
		f = o.m.Raft().LeadershipTransferToServer(srv.ID, srv.Address)
	}
	if err := f.Error(); err != nil {
		return nil, rpc.Errorf(rpc.CodeUnavailable, "leadership transfer: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, operatorTimeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, leader := o.m.Raft().LeaderWithID(); leader != "" && string(leader) != o.node {
			return &rpcpb.PeerResult{Done: "leadership transferred", Leader: string(leader)}, nil
		}
		select {
		case <-ctx.Done():
			return &rpcpb.PeerResult{Done: "leadership transfer started; no new leader known yet"}, nil
		case <-t.C:
		}
	}
}

// server is the Raft configuration's server id, or CodeNotFound.
func (o operator) server(id string) (raft.Server, error) {
	if s, ok := o.m.RaftServer(id); ok {
		return s, nil
	}
	return raft.Server{}, rpc.Errorf(rpc.CodeNotFound, "no server %q in the Raft configuration", id)
}

// maxRestoreBytes bounds the ledger state a restore reads.
const maxRestoreBytes = 8 << 30

// Snapshot writes an archive of a snapshot taken on the leader to w.
func (o operator) Snapshot(ctx context.Context, w io.Writer) error {
	if err := o.m.CheckLeader(); err != nil {
		return err
	}
	f := o.m.Raft().Snapshot()
	if err := f.Error(); err != nil {
		return rpc.Errorf(rpc.CodeUnavailable, "taking a snapshot: %v", err)
	}
	meta, rc, err := f.Open()
	if err != nil {
		return rpc.Errorf(rpc.CodeInternal, "opening the snapshot: %v", err)
	}
	defer rc.Close()
	if err := writeArchive(w, &archiveMeta{SnapshotMeta: *meta, Datacenter: o.m.Config().Datacenter}, rc); err != nil {
		return rpc.Errorf(rpc.CodeInternal, "writing the archive: %v", err)
	}
	return nil
}

// Restore replaces the datacenter's ledger with an archive's, on the leader
// (raft.Restore: the leader takes the state and sends it to the followers as
// a snapshot). It is for disaster recovery; everything admitted after the
// archive was taken is gone.
func (o operator) Restore(ctx context.Context, r io.Reader) error {
	if err := o.m.CheckLeader(); err != nil {
		return err
	}
	meta, state, err := readArchive(r, maxRestoreBytes)
	if err != nil {
		return rpc.Errorf(rpc.CodeInvalid, "%v", err)
	}
	// Every datacenter runs its own ledger: another's would run its jobs
	// a second time here, under this datacenter's name.
	if dc := o.m.Config().Datacenter; meta.Datacenter != "" && meta.Datacenter != dc {
		return rpc.Errorf(rpc.CodeInvalid, "%v: it holds the ledger of datacenter %s, and this is %s", ErrBadArchive, meta.Datacenter, dc)
	}
	// raft.Restore stores the state as the newest snapshot before the ledger
	// reads it, and panics when the ledger refuses it: a state this build
	// does not read (a newer build's format, a damaged one under good
	// checksums) would crash the leader and leave it a snapshot it cannot
	// start from. Decode it into a throwaway ledger first.
	if err := ledger.New(ledger.Options{}).Restore(io.NopCloser(bytes.NewReader(state))); err != nil {
		return rpc.Errorf(rpc.CodeInvalid, "%v: state.bin: %v", ErrBadArchive, err)
	}
	// A caller that gave up while the archive was read and checked (its
	// --timeout passed) has reported the restore failed: it must not then
	// happen. raft.Restore itself cannot be called off once started.
	if err := ctx.Err(); err != nil {
		return rpc.Errorf(rpc.CodeUnavailable, "restore not started: the caller left before the archive was checked: %v", err)
	}
	if err := o.m.RestoreLedger(&meta.SnapshotMeta, bytes.NewReader(state), time.Minute); err != nil {
		if errors.Is(err, manager.ErrRestoreUnconfirmed) {
			// Not unavailable, which the caller retries by sending the
			// archive again: a second restore, if the first one took,
			// would erase what was admitted after it.
			o.log.Warn("ledger restored from a snapshot archive on this leader, not confirmed", logging.KeyIndex, meta.Index,
				logging.KeyBytes, len(state), logging.KeyError, err)
			return rpc.Errorf(rpc.CodeInternal, "restore not confirmed: the archive was installed on %s, which could not confirm it (%v): "+
				"the restore may or may not have taken effect; do not send the archive again before checking the ledger (oncectl job list)", o.node, err)
		}
		return rpc.Errorf(rpc.CodeUnavailable, "restore not started: %v", err)
	}
	o.log.Warn("ledger restored from a snapshot archive", logging.KeyIndex, meta.Index, logging.KeyBytes, len(state))
	return nil
}
