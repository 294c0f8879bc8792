package rpc

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
)

// Operator routes, on a manager's RPC listener (oncectl's cluster and raft
// commands, docs/oncectl.md). Reads answer on any manager; changes to the
// Raft configuration answer on the leader only, and elsewhere not_leader
// naming the leader, as the other routes do.
const (
	OperatorMembersPath        = "/rpc/v1/operator/members"
	OperatorRemovePeerPath     = "/rpc/v1/operator/raft/remove-peer"
	OperatorTransferLeaderPath = "/rpc/v1/operator/raft/transfer-leader"
)

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

// Members is the answer of OperatorMembersPath.
type Members struct {
	Node    string   `json:"node"` // the manager that answered
	Members []Member `json:"members"`
}

// PeerRequest names a Raft server (remove-peer; transfer-leader, where an
// empty ID lets Raft pick the most up-to-date voter).
type PeerRequest struct {
	ID string `json:"id"`
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
}

// MountOperator registers the operator routes on mux.
func MountOperator(mux *http.ServeMux, op Operator, log *slog.Logger) {
	h := &handler{log: log}
	mux.HandleFunc("GET "+OperatorMembersPath, func(w http.ResponseWriter, r *http.Request) {
		m, err := op.Members(r.Context())
		h.reply(w, m, err)
	})
	change := func(do func(context.Context, string) (*PeerResult, error), idRequired bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var req PeerRequest
			b, err := io.ReadAll(io.LimitReader(r.Body, 4<<10))
			if err == nil && len(b) > 0 {
				err = json.Unmarshal(b, &req)
			}
			if err != nil {
				h.reply(w, nil, Errorf(CodeInvalid, "body: want {\"id\":\"<server id>\"}: %v", err))
				return
			}
			if idRequired && req.ID == "" {
				h.reply(w, nil, Errorf(CodeInvalid, "id: the Raft server ID to act on is required"))
				return
			}
			res, err := do(r.Context(), req.ID)
			h.reply(w, res, err)
		}
	}
	mux.HandleFunc("POST "+OperatorRemovePeerPath, change(op.RemovePeer, true))
	mux.HandleFunc("POST "+OperatorTransferLeaderPath, change(op.TransferLeader, false))
}
