package manager

import "sync"

// Peer is what a manager of the datacenter advertises in membership.
type Peer struct {
	// RPCAddr is its RPC address, named in "not leader" answers ("": not
	// known).
	RPCAddr string
}

// Peers is a manager's directory of the managers of its datacenter
// (Deps.Peers). A manager it does not know has no known address; a manager
// missing from it knows itself.
type Peers interface {
	Peer(nodeID string) (Peer, bool)
}

// PeerTable is a Peers its owner keeps up to date: the daemon from its
// membership pool, a test by hand. It is safe for concurrent use; the zero
// value is an empty table.
type PeerTable struct {
	mu    sync.RWMutex
	peers map[string]Peer
}

// Set records what the manager nodeID advertises.
func (t *PeerTable) Set(nodeID string, p Peer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peers == nil {
		t.peers = map[string]Peer{}
	}
	t.peers[nodeID] = p
}

// Delete forgets the manager nodeID.
func (t *PeerTable) Delete(nodeID string) {
	t.mu.Lock()
	delete(t.peers, nodeID)
	t.mu.Unlock()
}

// Peer implements Peers.
func (t *PeerTable) Peer(nodeID string) (Peer, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	p, ok := t.peers[nodeID]
	return p, ok
}

// peerRPC is the RPC address of the manager nodeID: from Deps.Peers, else
// this manager's own when nodeID is its own ("": not known).
func (m *Manager) peerRPC(nodeID string) string {
	if m.deps.Peers != nil {
		if p, ok := m.deps.Peers.Peer(nodeID); ok {
			return p.RPCAddr
		}
	}
	if nodeID == m.cfg.NodeID {
		return m.cfg.RPCAdvertise
	}
	return ""
}
