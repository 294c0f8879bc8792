package loadgen

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/once-dev/once/pkg/api"
)

// The fast path sends a run's requests when the spec names no Transport:
// every worker keeps its own keep-alive connection to each gate and writes and
// reads on its own goroutine, with a fasthttp.Request and fasthttp.Response
// (github.com/valyala/fasthttp: the HTTP/1.1 writer and parser) reused for
// every request. net/http's client hands every request to two goroutines per
// connection (persistConn's read and write loops) and allocates a header
// map, a context and a response per request: on loopback that made the
// generator costlier per request than the bare server it was measuring. One
// connection per worker and no pool is wrk's model; with no background
// goroutine nothing outlives the run.

// fastConn is a worker's reusable request and response, and its
// connections, one per gate (nil until first used or after an error).
type fastConn struct {
	req   fasthttp.Request
	resp  fasthttp.Response
	conns []*gateConn
}

type gateConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

const (
	fastDialTimeout = 5 * time.Second
	fastBufferSize  = 32 << 10
)

// plainHTTP reports whether every gate is served over plain HTTP, which the
// fast path speaks (https gates go through net/http and its TLS).
func plainHTTP(submit []*url.URL) bool {
	for _, u := range submit {
		if u.Scheme != "http" {
			return false
		}
	}
	return true
}

// fastHosts returns the host:port of each gate's URL.
func fastHosts(submit []*url.URL) []string {
	hosts := make([]string, len(submit))
	for i, u := range submit {
		hosts[i] = u.Host
	}
	return hosts
}

// do sends req to gate g on the worker's connection and reads resp, within
// timeout. A connection that the gate closed while it sat idle (the write
// goes through, the read finds EOF or a reset before any answer) is redialed
// and the request sent once more, as net/http does for a request that
// carries an Idempotency-Key; any other error closes the connection and is
// the request's outcome.
func (w *worker) do(g int, req *fasthttp.Request, resp *fasthttp.Response, timeout time.Duration) error {
	fc := &w.fast
	if fc.conns == nil {
		fc.conns = make([]*gateConn, len(w.r.fastHosts))
	}
	deadline := time.Now().Add(timeout)
	for attempt := 0; ; attempt++ {
		gc := fc.conns[g]
		reused := gc != nil
		if gc == nil {
			c, err := net.DialTimeout("tcp", w.r.fastHosts[g], min(fastDialTimeout, time.Until(deadline)))
			if err != nil {
				return err
			}
			gc = &gateConn{c: c, br: bufio.NewReaderSize(c, fastBufferSize), bw: bufio.NewWriterSize(c, fastBufferSize)}
			fc.conns[g] = gc
		}
		err := gc.c.SetDeadline(deadline)
		if err == nil {
			err = req.Write(gc.bw)
		}
		if err == nil {
			err = gc.bw.Flush()
		}
		if err == nil {
			err = resp.Read(gc.br)
		}
		if err == nil && !resp.ConnectionClose() {
			return nil
		}
		gc.c.Close()
		fc.conns[g] = nil
		if err == nil {
			return nil // answered; the gate closes the connection
		}
		if reused && attempt == 0 && staleConn(err) {
			resp.Reset()
			continue
		}
		return err
	}
}

// staleConn reports an error that a keep-alive connection closed by the peer
// gives on its next use.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, fasthttp.ErrConnectionClosed)
}

// closeFast closes the worker's connections.
func (w *worker) closeFast() {
	for i, gc := range w.fast.conns {
		if gc != nil {
			gc.c.Close()
			w.fast.conns[i] = nil
		}
	}
}

// sendFast is send on the fast path.
func (w *worker) sendFast(ctx context.Context, intended time.Duration) {
	r := w.r
	key, idx, reused := w.keys.Next()
	if reused {
		w.reused++
	}
	g := w.gate()
	o := outcome{intended: intended, sent: time.Since(r.start)}

	req, resp := &w.fast.req, &w.fast.resp
	req.Reset()
	resp.Reset()
	req.SetRequestURI(r.submit[g].String())
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType(api.ContentTypeJSON)
	req.Header.Set(api.HeaderIdempotencyKey, key)
	if r.auth != nil {
		req.Header.Set(api.HeaderAuthorization, r.auth[0])
	}
	req.SetBodyRaw(r.body) // not copied: the run's body is immutable
	err := w.do(g, req, resp, time.Duration(r.spec.Timeout))
	o.done = time.Since(r.start)
	if err != nil {
		w.finish(ctx, &o, idx, err, 0, false, nil)
		return
	}
	w.finish(ctx, &o, idx, nil, resp.StatusCode(), string(resp.Header.Peek(api.HeaderReplayed)) == "true", resp.Body())
}

// warmupFast opens the worker's connection to gate g with a GET /healthz.
func (w *worker) warmupFast(g int) {
	req, resp := &w.fast.req, &w.fast.resp
	req.Reset()
	resp.Reset()
	req.SetRequestURI(w.r.health[g])
	_ = w.do(g, req, resp, time.Duration(w.r.spec.Timeout))
}
