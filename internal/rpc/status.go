package rpc

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/once-dev/once/internal/logging"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// A manager's status: the Manager service's Status method, for gates'
// readiness, oncectl and operators' tools, and the same document as JSON
// over HTTP/1.1 (GET /rpc/v1/status) for curl. Both carry the public
// ManagerStatus (rpc.Status) as its JSON, so the status is defined once.

// Status serves Service.Status; with leader_only, a manager that is not the
// leader answers not_leader naming the leader.
func (sv *service) Status(ctx context.Context, p *rpcpb.StatusRequest) (*rpcpb.StatusResponse, error) {
	b, err := sv.s.statusJSON(ctx, p.GetLeaderOnly())
	return &rpcpb.StatusResponse{Json: b}, sv.s.callStatus("status", err)
}

// statusJSON is the manager's status as JSON, or not_leader when leaderOnly
// and the manager is not the leader.
func (s *Server) statusJSON(ctx context.Context, leaderOnly bool) ([]byte, error) {
	st, err := s.svc.Status(ctx)
	if err != nil {
		return nil, err
	}
	if leaderOnly && !st.IsLeader {
		return nil, &Error{Code: CodeNotLeader, Message: "not the leader", Leader: st.LeaderRPC}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, Errorf(CodeInternal, "encode status: %v", err)
	}
	return b, nil
}

// serveStatusHTTP answers GET /rpc/v1/status: this manager's status; 503
// with the Error's JSON (asError's) when it cannot be read.
func (s *Server) serveStatusHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := s.statusJSON(r.Context(), false)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, asError(err, func(err error) { s.log.Error("status failed", logging.KeyError, err) }))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// writeError answers e's JSON with code.
func writeError(w http.ResponseWriter, code int, e *Error) {
	b, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// Status returns the status of whichever manager answers (the leader when
// it is known), with the retries of every call.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	// Any manager answers: its answer proves it the leader only when it
	// says so.
	var st *Status
	err := c.retry(ctx, "status", false, func(addr string) (err error) {
		st, err = c.StatusOf(ctx, addr)
		if err == nil && st.IsLeader {
			c.setLeader(addr)
		}
		return err
	})
	return st, err
}

// LeaderStatus returns the leader's status: it succeeds only when a leader
// answers, which is what a gate's readiness means.
func (c *Client) LeaderStatus(ctx context.Context) (*Status, error) {
	return decodeStatus(unary(c, ctx, "status", 0, rpcpb.ManagerClient.Status, &rpcpb.StatusRequest{LeaderOnly: true}, readLimit))
}

// StatusOf returns one manager's own status, wherever it stands; no retries.
func (c *Client) StatusOf(ctx context.Context, addr string) (*Status, error) {
	return decodeStatus(unaryAt(c, ctx, addr, "status", 0, rpcpb.ManagerClient.Status, &rpcpb.StatusRequest{}, readLimit))
}

// decodeStatus decodes a Status method's answer.
func decodeStatus(p *rpcpb.StatusResponse, err error) (*Status, error) {
	if err != nil {
		return nil, err
	}
	var st Status
	if err := json.Unmarshal(p.GetJson(), &st); err != nil {
		return nil, Errorf(CodeInternal, "decode status: %v", err)
	}
	return &st, nil
}
