package benchrun

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// ceilingBody is the bare handler's answer: a job-sized JSON body (about 300
// bytes, shaped like a gate's 201) that is the same for every request.
var ceilingBody = []byte(`{"job_id":"job-0123456789abcdef0123456789abcdef","status":"committed",` +
	`"type":"bench","payload":{"n":1,"note":"the ceiling workload: a bare net/http handler, no gate, no manager"},` +
	`"datacenters":["dc1"],"created_at":"2026-01-01T00:00:00Z","committed_at":"2026-01-01T00:00:00Z"}` + "\n")

// ceilingServer is a bare net/http server on loopback, in the oncebench
// process, that reads each request's body and answers 201 with ceilingBody:
// what the load generator and loopback HTTP reach on this machine with no
// once code in the path, the ceiling the other workloads are compared with.
type ceilingServer struct {
	srv  *http.Server
	url  string
	done chan struct{}
}

func startCeiling() (*ceilingServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // the load generator's /healthz check
			w.WriteHeader(http.StatusOK)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		hd := w.Header()
		hd.Set("Content-Type", "application/json")
		hd.Set(api.HeaderReplayed, "false")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(ceilingBody)
	})
	c := &ceilingServer{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second},
		url:  "http://" + ln.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(c.done)
		_ = c.srv.Serve(ln)
	}()
	return c, nil
}

func (c *ceilingServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.srv.Shutdown(ctx)
	<-c.done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// setCeilingRatios stamps every workload with its req/s as a fraction of the
// ceiling workload's of the same run (nothing when no ceiling ran).
func setCeilingRatios(rep *Report) {
	c := find(*rep, WCeiling)
	if c == nil || c.Load.RequestsPerSec <= 0 {
		return
	}
	rep.CeilingReqPerSec = c.Load.RequestsPerSec
	for i := range rep.Workloads {
		w := &rep.Workloads[i]
		if w.Load.Name != WCeiling {
			w.CeilingRatio = round(w.Load.RequestsPerSec/c.Load.RequestsPerSec, 3)
		}
	}
}

// isCeiling reports whether a workload runs against the bare handler.
func isCeiling(name string) bool { return strings.EqualFold(name, WCeiling) }
