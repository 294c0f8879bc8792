package gate

import (
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"golang.org/x/sync/semaphore"

	"github.com/once-dev/once/pkg/api"
)

// Bodies in flight (GATE_MAX_IN_FLIGHT_BODY_BYTES): the bytes of request
// bodies the gate holds at once are bounded. An authenticated request with
// a body reserves its bytes before its handler runs and releases them when
// it has been answered; a request that finds the bound full is refused, 503
// unavailable with Retry-After, before anything is read, forwarded or
// cached, so the client's retry with the same key is deduplicated as usual.
// A full bound refuses: it never drops a request in flight nor grows.
//
// What a request reserves is its Content-Length when it declares one (a
// body longer than GATE_MAX_BODY_BYTES reserves nothing: it is answered
// 413 unread); a body of unknown length (chunked) reserves
// GATE_MAX_BODY_BYTES, and gives back what it did not use once it has been
// read to its end. A request without a body (GET, a worker's long poll of
// POST /v1/leases with no body) reserves nothing and is never refused: the
// bound is of bytes, not of requests. The bound is at least
// GATE_MAX_BODY_BYTES, so one request of the largest body always fits.
type inflightBodies struct {
	sem      *semaphore.Weighted
	reserved atomic.Int64 // bytes reserved now (the metric's gauge)
	refused  atomic.Uint64
	maxBody  int64
}

func newInflightBodies(bound, maxBody int64) *inflightBodies {
	return &inflightBodies{sem: semaphore.NewWeighted(bound), maxBody: maxBody}
}

// reserve reserves the bytes r's body may hold, which done gives back (n
// and body); ok is false when the bound is full. A body of unknown length
// is wrapped (body) so that what it does not use goes back when it ends;
// its reservation is then the wrapper's, and n is 0.
func (b *inflightBodies) reserve(r *http.Request) (n int64, body *reservedBody, ok bool) {
	switch {
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || r.ContentLength > b.maxBody:
		return 0, nil, true
	case r.ContentLength > 0:
		n = r.ContentLength
	default: // unknown length
		n = b.maxBody
	}
	if !b.sem.TryAcquire(n) {
		b.refused.Add(1)
		return 0, nil, false
	}
	b.reserved.Add(n)
	if r.ContentLength > 0 {
		return n, nil, true
	}
	body = &reservedBody{ReadCloser: r.Body, b: b, held: n}
	r.Body = body
	return 0, body, true
}

// release gives back n bytes reserved.
func (b *inflightBodies) release(n int64) {
	if n > 0 {
		b.reserved.Add(-n)
		b.sem.Release(n)
	}
}

// reservedBody is a body of unknown length, read under a reservation of
// GATE_MAX_BODY_BYTES: at its end (io.EOF) it gives back what it did not
// use, and the rest when the request has been answered (done).
type reservedBody struct {
	io.ReadCloser
	b    *inflightBodies
	read int64
	held int64 // reserved and not yet given back
}

func (rb *reservedBody) Read(p []byte) (int, error) {
	n, err := rb.ReadCloser.Read(p)
	rb.read += int64(n)
	if err == io.EOF && rb.held > rb.read {
		rb.b.release(rb.held - rb.read)
		rb.held = rb.read
	}
	return n, err
}

// done gives back what a request reserved (reserve's n and body) once it
// has been answered. net/http does not read a body after its handler
// returns, so done and a body's Read never run at once.
func (b *inflightBodies) done(n int64, body *reservedBody) {
	b.release(n)
	if body != nil {
		b.release(body.held)
		body.held = 0
	}
}

// refuseBody answers a request that found the bound full: 503 unavailable
// with Retry-After, nothing read, forwarded or cached.
func (g *Gate) refuseBody(w http.ResponseWriter) {
	g.retryLater(w, http.StatusServiceUnavailable, api.CodeUnavailable,
		"the gate holds its bound of request bodies in flight ("+EnvMaxInFlightBodyBytes+"="+
			strconv.FormatInt(g.cfg.MaxInFlightBodyBytes, 10)+" bytes); retry later (with the same Idempotency-Key)")
}
