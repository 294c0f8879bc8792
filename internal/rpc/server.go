package rpc

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/once-dev/once/internal/logging"
)

// maxRequestBytes bounds an RPC answer's body: a job body is at most a few MiB.
const maxRequestBytes = 16 << 20

// NewHandler serves svc's status (HTTP/JSON) on its own ServeMux (never the
// global one). Extra routes (metrics, failpoints) may be added to the returned
// mux by the caller. Submissions travel on the submit stream (NewServer).
func NewHandler(svc Service, logger *slog.Logger) *http.ServeMux {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{svc: svc, log: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rpc/v1/status", h.status)
	return mux
}

type handler struct {
	svc Service
	log *slog.Logger
}

// status answers a manager's status. With ?leader=1 only the leader answers;
// another manager answers not_leader naming the leader, so a client's readiness
// probe follows it there.
func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	st, err := h.svc.Status(r.Context())
	if err == nil && r.URL.Query().Get("leader") == "1" && !st.IsLeader {
		err = &Error{Code: CodeNotLeader, Message: "not the leader", Leader: st.LeaderRPC}
	}
	h.reply(w, st, err)
}

func (h *handler) reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			h.log.Error("rpc handler failed", logging.KeyError, err)
			e = Errorf(CodeInternal, "%v", err)
		}
		writeError(w, e)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, Errorf(CodeInternal, "encode response: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, e *Error) {
	b, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus(e.Code))
	_, _ = w.Write(b)
}
