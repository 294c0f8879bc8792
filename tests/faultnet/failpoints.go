package faultnet

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/manager/managerd"
)

// Clock is a wall clock shifted by an offset that can change at any time: a
// manager's clock skew. Its readings carry no monotonic reading (a real clock
// step moves the wall clock, and every duration the manager derives from
// Now moves with it).
type Clock struct {
	offset atomic.Int64 // nanoseconds
}

// Now returns the wall clock plus the offset.
func (c *Clock) Now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.offset.Load()))
}

// SetOffset shifts the clock by d from the real wall clock (negative: behind).
func (c *Clock) SetOffset(d time.Duration) { c.offset.Store(int64(d)) }

// Offset returns the current offset.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// ManagerOptions returns the options that run the real manager with the
// failpoints: its Raft stream layer wrapped by a Layer, its clock a Clock,
// and the /debug/failpoints endpoints (Mount) on its RPC listener.
func ManagerOptions() managerd.Options {
	var layer *Layer
	clock := &Clock{}
	return managerd.Options{
		WrapStreamLayer: func(s raft.StreamLayer) raft.StreamLayer {
			layer = Wrap(s)
			return layer
		},
		Now: clock.Now,
		Mount: func(mux *http.ServeMux, m *manager.Manager) {
			Mount(mux, m, layer, clock)
		},
	}
}

// Mount adds the fault-injection endpoints to a manager's RPC mux:
//
//	PUT  /debug/failpoints/partition {"block": ["raft-addr", ...]}  cuts Raft links ([] heals)
//	GET  /debug/failpoints/partition                                 the blocked links
//	PUT  /debug/failpoints/clock {"offset": "10m"}                   shifts the clock ("-90s", "0s")
//	GET  /debug/failpoints/clock                                     the offset
//	POST /debug/failpoints/leader {"id": "manager2"}                 the leader hands leadership to that voter
//
// layer may be nil (no partition endpoints), clock too (no clock endpoints).
func Mount(mux *http.ServeMux, m *manager.Manager, layer *Layer, clock *Clock) {
	if layer != nil {
		partition := func(w http.ResponseWriter) { writeJSON(w, http.StatusOK, map[string]any{"block": layer.Blocked()}) }
		mux.HandleFunc("PUT /debug/failpoints/partition", func(w http.ResponseWriter, r *http.Request) {
			var body struct {
				Block []string `json:"block"`
			}
			if err := decode(r, &body); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": `body must be {"block": [addresses]}`})
				return
			}
			layer.Block(body.Block)
			partition(w)
		})
		mux.HandleFunc("GET /debug/failpoints/partition", func(w http.ResponseWriter, r *http.Request) { partition(w) })
	}
	if clock != nil {
		offset := func(w http.ResponseWriter) {
			writeJSON(w, http.StatusOK, map[string]string{"offset": clock.Offset().String()})
		}
		mux.HandleFunc("PUT /debug/failpoints/clock", func(w http.ResponseWriter, r *http.Request) {
			var body struct {
				Offset string `json:"offset"`
			}
			err := decode(r, &body)
			var d time.Duration
			if err == nil {
				d, err = time.ParseDuration(body.Offset)
			}
			if err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": `body must be {"offset": "<Go duration, e.g. 10m or -90s>"}`})
				return
			}
			clock.SetOffset(d)
			offset(w)
		})
		mux.HandleFunc("GET /debug/failpoints/clock", func(w http.ResponseWriter, r *http.Request) { offset(w) })
	}
	mux.HandleFunc("POST /debug/failpoints/leader", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ID string `json:"id"`
		}
		if err := decode(r, &body); err != nil || body.ID == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": `body must be {"id": "<voter's node id>"}`})
			return
		}
		if err := transferLeadership(m.Raft(), body.ID); err != nil {
			writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"leader": body.ID})
	})
}

// transferLeadership asks r, which must lead, to hand leadership to the voter
// id (raft's LeadershipTransferToServer).
func transferLeadership(r *raft.Raft, id string) error {
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id && s.Suffrage == raft.Voter {
			return r.LeadershipTransferToServer(s.ID, s.Address).Error()
		}
	}
	return fmt.Errorf("%s is not a voter", id)
}

func decode(r *http.Request, v any) error {
	return json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(v)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
