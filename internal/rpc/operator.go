package rpc

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"

	"github.com/once-dev/once/internal/logging"
)

// Operator routes, on a manager's RPC listener (oncectl's cluster, raft,
// snapshot and gossip commands, docs/oncectl.md). Every one needs an
// operator credential besides the cluster's (operatorauth.go); a caller
// without one is answered forbidden (403). Reads answer on any manager;
// changes to the Raft configuration answer on the leader only, and elsewhere
// not_leader naming the leader, as the other routes do.
const (
	OperatorMembersPath        = "/rpc/v1/operator/members"
	OperatorRemovePeerPath     = "/rpc/v1/operator/raft/remove-peer"
	OperatorTransferLeaderPath = "/rpc/v1/operator/raft/transfer-leader"
	// OperatorSnapshotPath: GET streams a snapshot archive of the leader's
	// ledger (application/x-tar); PUT restores one (leader only).
	OperatorSnapshotPath = "/rpc/v1/operator/snapshot"
	// OperatorKeyringPath: GET lists every pool member's gossip keys
	// (?pool=lan|wan); POST applies a KeyringRequest on every member.
	OperatorKeyringPath = "/rpc/v1/operator/keyring"
)

// Keyring pools and operations (KeyringRequest).
const (
	PoolLAN = "lan"
	PoolWAN = "wan"
)

// KeyringRequest is a pool-wide keyring change: Op is install, use or remove
// (list is the GET); Key is the base64 gossip key; Pool is lan (default: the
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

// Keyring is the answer of OperatorKeyringPath.
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
	// Snapshot writes a snapshot archive to w; nothing is written before the
	// snapshot is taken, so an error can still be answered as one.
	Snapshot(ctx context.Context, w io.Writer) error
	Restore(ctx context.Context, r io.Reader) error
	// Keyring runs a keyring operation (list, install, use, remove) on every
	// member of a gossip pool.
	Keyring(ctx context.Context, req KeyringRequest) (*Keyring, error)
}

// OperatorRoutes are the routes MountOperator registers (method and path),
// all behind the operator credential.
var OperatorRoutes = []string{
	"GET " + OperatorMembersPath,
	"GET " + OperatorSnapshotPath,
	"PUT " + OperatorSnapshotPath,
	"GET " + OperatorKeyringPath,
	"POST " + OperatorKeyringPath,
	"POST " + OperatorRemovePeerPath,
	"POST " + OperatorTransferLeaderPath,
}

// MountOperator registers the operator routes on mux; each answers only a
// caller auth allows (otherwise forbidden, 403).
func MountOperator(mux *http.ServeMux, op Operator, auth OperatorAuth, log *slog.Logger) {
	h := &handler{log: log}
	handle := func(pattern string, fn http.HandlerFunc) { mux.HandleFunc(pattern, auth.require(fn)) }
	handle("GET "+OperatorMembersPath, func(w http.ResponseWriter, r *http.Request) {
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
	handle("GET "+OperatorSnapshotPath, func(w http.ResponseWriter, r *http.Request) {
		sw := &lazyWriter{w: w, contentType: "application/x-tar"}
		if err := op.Snapshot(r.Context(), sw); err != nil {
			if sw.started {
				h.log.Error("snapshot archive cut short", logging.KeyError, err)
				return
			}
			h.reply(w, nil, err)
		}
	})
	handle("PUT "+OperatorSnapshotPath, func(w http.ResponseWriter, r *http.Request) {
		err := op.Restore(r.Context(), r.Body)
		h.reply(w, &PeerResult{Done: "restored"}, err)
	})
	handle("GET "+OperatorKeyringPath, func(w http.ResponseWriter, r *http.Request) {
		k, err := op.Keyring(r.Context(), KeyringRequest{Op: "list", Pool: r.URL.Query().Get("pool")})
		h.reply(w, k, err)
	})
	handle("POST "+OperatorKeyringPath, func(w http.ResponseWriter, r *http.Request) {
		var req KeyringRequest
		b, err := io.ReadAll(io.LimitReader(r.Body, 4<<10))
		if err == nil {
			err = json.Unmarshal(b, &req)
		}
		if err != nil {
			h.reply(w, nil, Errorf(CodeInvalid, `body: want {"op":"install|use|remove","key":"<base64>","pool":"lan|wan"}: %v`, err))
			return
		}
		if req.Op == "list" {
			h.reply(w, nil, Errorf(CodeInvalid, "op: list is GET %s", OperatorKeyringPath))
			return
		}
		k, err := op.Keyring(r.Context(), req)
		h.reply(w, k, err)
	})
	handle("POST "+OperatorRemovePeerPath, change(op.RemovePeer, true))
	handle("POST "+OperatorTransferLeaderPath, change(op.TransferLeader, false))
}

// lazyWriter sends the 200 and its content type with the first byte, so a
// failure before it can still be answered as an error.
type lazyWriter struct {
	w           http.ResponseWriter
	contentType string
	started     bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.Header().Set("Content-Type", l.contentType)
		l.w.WriteHeader(http.StatusOK)
	}
	return l.w.Write(p)
}
