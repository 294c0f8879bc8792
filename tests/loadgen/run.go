// Package loadgen is once's load generator for POST /v1/jobs: closed loop at a
// fixed concurrency, open loop at a fixed rate with latency measured from the
// scheduled send time (coordinated omission corrected, HdrHistogram), key
// generators for unique, duplicate and storm traffic, requests spread over
// several gates, and a Result per run that serialises to JSON and prints as a
// table. Run is the entry point for programs (the benchmark orchestrator); Main
// is the oncebench command.
//
// Only the HTTP contract (docs/api.md) is assumed of the gates.
package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// Run runs one load spec to its end and returns what it measured. The error
// is non-nil when the spec is invalid (a *SpecError, matching ErrInvalidSpec;
// nothing was sent) or when ctx ended the run early (the partial Result is
// returned with Interrupted set, and the error wraps ctx.Err()). Failed
// requests are measurements, not errors.
func Run(ctx context.Context, spec Spec) (Result, error) {
	s, err := spec.Normalize()
	if err != nil {
		return Result{}, err
	}
	r := newRun(s, s.Transport)
	switch {
	case s.Transport != nil:
	case plainHTTP(r.submit):
		r.fastHosts = fastHosts(r.submit)
		defer func() {
			for _, w := range r.workers {
				w.closeFast()
			}
		}()
	default: // https gates: net/http's TLS
		t := NewTransport(s.Concurrency)
		defer t.CloseIdleConnections()
		r.rt = t
	}
	if s.Open() {
		r.openLoop(ctx)
	} else {
		r.closedLoop(ctx)
	}
	res := r.result()
	if err := ctx.Err(); err != nil {
		res.Interrupted = true
		return res, fmt.Errorf("load run %q interrupted: %w", s.Name, err)
	}
	return res, nil
}

type run struct {
	spec      Spec
	rt        http.RoundTripper // the spec's Transport; nil: the fast path (fast.go)
	fastHosts []string          // the fast path: host:port per gate
	submit    []*url.URL        // POST URL per gate; read-only, shared by requests
	health    []string          // GET /healthz URL per gate
	body      []byte            // every request's body: immutable, shared
	getBody   func() (io.ReadCloser, error)
	nonces    []string // per worker
	stormKey  string
	auth      []string // Authorization header value, if any
	shards    []*shard
	tracker   *tracker
	workers   []*worker

	start   time.Time // set by begin before any request
	end     time.Duration
	issued  atomic.Int64 // closed loop: requests claimed
	dropped int64        // open loop: written by the scheduler only
	drops   []Bucket     // open loop: drops by scheduled second

	disruptWG  sync.WaitGroup
	disruptEnd context.CancelFunc
	disruptAt  atomic.Int64 // offset+1 in ns; 0: not called
	disruptErr atomic.Pointer[string]
}

var contentTypeJSON = []string{api.ContentTypeJSON}

func newRun(s Spec, rt http.RoundTripper) *run {
	r := &run{spec: s, rt: rt, tracker: newTracker()}
	for _, g := range s.Gates {
		g = strings.TrimRight(g, "/")
		u, _ := url.Parse(g + "/v1/jobs") // validated by Normalize
		r.submit = append(r.submit, u)
		r.health = append(r.health, g+"/healthz")
	}
	r.body = requestBody(s)
	r.getBody = r.newBody
	r.nonces = make([]string, s.Concurrency)
	for i := range r.nonces {
		r.nonces[i] = newNonce()
	}
	r.stormKey = stormKeyOf(s, r.nonces[0])
	if s.Token != "" {
		r.auth = []string{"Bearer " + s.Token}
	}
	nshards := min(s.Concurrency, 2*runtime.GOMAXPROCS(0))
	for range nshards {
		r.shards = append(r.shards, newShard(s.Open()))
	}
	for i := range s.Concurrency {
		r.workers = append(r.workers, &worker{
			r:     r,
			id:    i,
			keys:  newKeyStream(s, i, r.nonces[i], r.stormKey),
			shard: r.shards[i%nshards],
			tmpl: &http.Request{
				Method: http.MethodPost, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				ContentLength: int64(len(r.body)), GetBody: r.getBody,
			},
		})
	}
	return r
}

// requestBody renders the one body of a run: the job type, a payload of
// exactly PayloadBytes bytes ({"pad":"xxx…"}, or {} below 10 bytes) and the
// datacenters. All requests share it, so a reused key always carries the
// identical body.
func requestBody(s Spec) []byte {
	var b bytes.Buffer
	b.WriteString(`{"type":"`)
	b.WriteString(s.JobType)
	b.WriteString(`","payload":`)
	if n := s.PayloadBytes - len(`{"pad":""}`); n >= 0 {
		b.WriteString(`{"pad":"`)
		b.Write(bytes.Repeat([]byte{'x'}, n))
		b.WriteString(`"}`)
	} else {
		b.WriteString(`{}`)
	}
	if len(s.Datacenters) > 0 {
		dcs, _ := json.Marshal(s.Datacenters)
		b.WriteString(`,"datacenters":`)
		b.Write(dcs)
	}
	b.WriteString(`}`)
	return b.Bytes()
}

// begin marks the start of the measured run and arms the disruption.
func (r *run) begin(ctx context.Context) {
	r.start = time.Now()
	dctx, cancel := context.WithCancel(ctx)
	r.disruptEnd = cancel
	fn := r.spec.OnDisrupt
	if fn == nil {
		return
	}
	r.disruptWG.Add(1)
	go func() {
		defer r.disruptWG.Done()
		t := time.NewTimer(time.Duration(r.spec.DisruptAt))
		defer t.Stop()
		select {
		case <-t.C:
		case <-dctx.Done():
			return
		}
		r.disruptAt.Store(int64(time.Since(r.start)) + 1)
		if err := fn(dctx); err != nil {
			msg := err.Error()
			r.disruptErr.Store(&msg)
		}
	}()
}

// finish records the end of the run and waits for the disruption.
func (r *run) finish() {
	r.end = time.Since(r.start)
	r.disruptEnd()
	r.disruptWG.Wait()
}

// closedLoop: every worker sends its next request when the previous one is
// answered. The workers are started (and warmed up) first and released
// together.
func (r *run) closedLoop(ctx context.Context) {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	s := r.spec
	for _, w := range r.workers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			if s.Warmup {
				w.warmup(ctx)
			}
			ready.Done()
			<-release
			for ctx.Err() == nil {
				if s.Requests > 0 && r.issued.Add(1) > s.Requests {
					return
				}
				now := time.Since(r.start)
				if s.Duration > 0 && now >= time.Duration(s.Duration) {
					return
				}
				w.send(ctx, now)
			}
		}()
	}
	ready.Wait()
	r.begin(ctx)
	close(release)
	done.Wait()
	r.finish()
}

// openLoop: a scheduler puts request i on the queue at start + i/Rate, on
// that timetable whatever the answers do; Concurrency workers send from the
// queue. Latency is measured from the scheduled time, so time spent queued
// behind a slow target counts. When MaxOutstanding requests are scheduled and
// unanswered, the next ones are dropped (and counted) instead of queued.
func (r *run) openLoop(ctx context.Context) {
	s := r.spec
	queue := make(chan time.Duration, s.MaxOutstanding)
	var outstanding atomic.Int64
	var ready, done sync.WaitGroup
	for _, w := range r.workers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			if s.Warmup {
				w.warmup(ctx)
			}
			ready.Done()
			for at := range queue {
				if ctx.Err() == nil {
					w.send(ctx, at)
				}
				outstanding.Add(-1)
			}
		}()
	}
	ready.Wait()
	r.begin(ctx)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	perSecond := float64(time.Second) / s.Rate
schedule:
	for i := int64(0); s.Requests == 0 || i < s.Requests; i++ {
		at := time.Duration(float64(i) * perSecond)
		if s.Duration > 0 && at >= time.Duration(s.Duration) {
			break
		}
		if wait := at - time.Since(r.start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break schedule
			}
		} else if ctx.Err() != nil {
			break
		}
		// Only the scheduler increments, so the check cannot be overtaken.
		if outstanding.Load() >= int64(s.MaxOutstanding) {
			r.dropped++
			if s.Timeline {
				bucketAt(&r.drops, at).Dropped++
			}
			continue
		}
		outstanding.Add(1)
		queue <- at // never blocks: capacity MaxOutstanding
	}
	timer.Stop()
	close(queue)
	done.Wait()
	r.finish()
}

// worker sends requests one at a time with its own key stream and buffer.
type worker struct {
	r      *run
	id     int
	keys   *keyStream
	shard  *shard
	next   int // round-robin position
	reused int64
	buf    bytes.Buffer
	tmpl   *http.Request // POST template: method, length, GetBody
	fast   fastConn      // the fast path
}

func (w *worker) gate() int {
	n := len(w.r.submit)
	if w.r.spec.Spread == SpreadPerWorker {
		return w.id % n
	}
	g := (w.id + w.next) % n
	w.next = (w.next + 1) % n
	return g
}

// warmup opens the worker's connection to its first gate.
func (w *worker) warmup(ctx context.Context) {
	g := w.id % len(w.r.health) // the gate of its first request either way
	if w.r.fastHosts != nil {
		w.warmupFast(g)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(w.r.spec.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.r.health[g], nil)
	if err != nil {
		return
	}
	if resp, err := w.r.rt.RoundTrip(req); err == nil {
		w.buf.Reset()
		_, _ = w.buf.ReadFrom(resp.Body)
		resp.Body.Close()
	}
}

// send submits one job and records the outcome. intended is when the request
// should have been sent (offset from the run's start).
func (w *worker) send(ctx context.Context, intended time.Duration) {
	r := w.r
	if r.fastHosts != nil {
		w.sendFast(ctx, intended)
		return
	}
	key, idx, reused := w.keys.Next()
	if reused {
		w.reused++
	}
	u := r.submit[w.gate()]
	o := outcome{intended: intended, sent: time.Since(r.start)}

	rctx, cancel := context.WithTimeout(ctx, time.Duration(r.spec.Timeout))
	defer cancel()
	// Built by hand and sent with RoundTrip rather than http.NewRequest and
	// Client.Do: the URL is parsed once per run and no header map is cloned.
	// The transport may still read the header and body after RoundTrip
	// returns, so neither is reused.
	req := w.tmpl.WithContext(rctx)
	req.URL, req.Host = u, u.Host
	req.Header = http.Header{api.HeaderIdempotencyKey: {key}, "Content-Type": contentTypeJSON}
	if r.auth != nil {
		req.Header[api.HeaderAuthorization] = r.auth
	}
	req.Body, _ = r.newBody()
	resp, err := r.rt.RoundTrip(req)
	if err == nil {
		w.buf.Reset()
		_, err = w.buf.ReadFrom(resp.Body)
		resp.Body.Close()
	}
	o.done = time.Since(r.start)
	if err != nil {
		w.finish(ctx, &o, idx, err, 0, false, nil)
		return
	}
	v := resp.Header[api.HeaderReplayed] // canonical, as the client stores it
	w.finish(ctx, &o, idx, nil, resp.StatusCode, len(v) > 0 && v[0] == "true", w.buf.Bytes())
}

// finish records one request's outcome, from either path (net/http or the
// fast path): a transport error, or the answer's status, replay header and
// body (the job_id of a 2xx is tracked per key, the problem code of any other).
func (w *worker) finish(ctx context.Context, o *outcome, idx uint64, err error, status int, replayed bool, body []byte) {
	r := w.r
	if err != nil {
		if ctx.Err() != nil {
			return // the run was interrupted: not a measurement
		}
		o.errClass, o.errMsg = classify(err), err.Error()
		w.shard.record(o, r.spec.Timeline)
		return
	}
	o.status, o.replayed = status, replayed
	if o.status >= 200 && o.status < 300 {
		if id := jobID(body); len(id) > 0 {
			r.tracker.add(idx, id)
		}
	} else {
		o.code = problemCode(body)
	}
	w.shard.record(o, r.spec.Timeline)
}

// newBody returns a reader over the run's shared body bytes. It must be
// io.NopCloser(*bytes.Reader): net/http recognises that as in-memory and
// sends the headers and a small body in one write instead of flushing the
// headers first (a second syscall and packet per request).
func (r *run) newBody() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(r.body)), nil
}

var jobIDField = []byte(`"job_id":"`)

// jobID finds the job_id of a job body without decoding all of it (a gate
// renders it with encoding/json, job_id first); it falls back to decoding.
func jobID(body []byte) []byte {
	if i := bytes.Index(body, jobIDField); i >= 0 {
		rest := body[i+len(jobIDField):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 && bytes.IndexByte(rest[:j], '\\') < 0 {
			return rest[:j]
		}
	}
	var v struct {
		JobID string `json:"job_id"`
	}
	if json.Unmarshal(body, &v) != nil {
		return nil
	}
	return []byte(v.JobID)
}

// NoCode is the code counted for a non-2xx answer that is not a problem
// body with a code (a contract violation).
const NoCode = "(none)"

func problemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(body, &p) != nil || p.Code == "" {
		return NoCode
	}
	return p.Code
}

// result merges the shards into a Result. The workers have all returned.
func (r *run) result() Result {
	s := r.spec
	spec := clone(s)
	spec.Transport, spec.OnDisrupt, spec.Token = nil, nil, ""
	res := Result{
		Name:        s.Name,
		Mode:        s.Mode(),
		Spec:        spec,
		Start:       r.start.Round(0).UTC(),
		DurationSec: r.end.Seconds(),
		Dropped:     r.dropped,
		Status:      map[int]int64{},
	}
	lat := newHist()
	svc := newHist()
	codes, errs, samples := map[string]int64{}, map[string]int64{}, map[string]string{}
	var timeline []Bucket
	var okAt []time.Duration
	for _, sh := range r.shards {
		lat.Merge(sh.lat)
		if sh.svc != nil {
			svc.Merge(sh.svc)
		}
		res.Requests += sh.requests
		res.Answered += sh.answered
		res.Replayed += sh.replayed
		for k, v := range sh.status {
			res.Status[k] += v
		}
		for k, v := range sh.codes {
			codes[k] += v
		}
		for k, v := range sh.errs {
			errs[k] += v
			if _, ok := samples[k]; !ok {
				samples[k] = sh.errSample[k]
			}
		}
		for _, b := range sh.timeline {
			t := bucketAt(&timeline, time.Duration(b.Second)*time.Second)
			t.OK += b.OK
			t.Failed += b.Failed
			t.Errors += b.Errors
			t.MaxLatencyUS = max(t.MaxLatencyUS, b.MaxLatencyUS)
		}
		okAt = append(okAt, sh.okAt...)
	}
	res.Latency = summarize(lat)
	if s.Open() {
		l := summarize(svc)
		res.ServiceLatency = &l
	}
	res.Codes = nilIfEmpty(codes)
	res.Errors = nilIfEmpty(errs)
	if len(samples) > 0 {
		res.ErrorSamples = samples
	}
	if r.end > 0 {
		res.RequestsPerSec = float64(int64(float64(res.Requests)/r.end.Seconds()*10)) / 10
	}

	for _, w := range r.workers {
		res.Reused += w.reused
		res.Keys += int64(w.keys.keysSent())
	}
	if s.Keys == KeysStorm && res.Requests > 0 {
		res.Keys = 1
		res.Reused = res.Requests - 1
	}
	r.tracker.fill(&res, r.keyName)

	if s.Timeline {
		for _, d := range r.drops {
			bucketAt(&timeline, time.Duration(d.Second)*time.Second).Dropped += d.Dropped
		}
		if r.end > 0 {
			bucketAt(&timeline, r.end-1) // cover the whole run
		}
		res.Timeline = timeline
		g := longestGap(okAt, r.end)
		res.Gap = &g
	}
	if at := r.disruptAt.Load(); at > 0 {
		v := ms(time.Duration(at - 1))
		res.DisruptedAtMS = &v
	}
	if p := r.disruptErr.Load(); p != nil {
		res.DisruptError = *p
	}
	return res
}

// keyName renders a tracker key index as the key that was sent.
func (r *run) keyName(idx uint64) string {
	if r.spec.Keys == KeysStorm {
		return r.stormKey
	}
	stream, seq := idx>>40, idx&(1<<40-1)
	return r.spec.ClientPrefix + "-" + strconv.FormatUint(stream, 10) + ":" +
		strconv.FormatUint(seq, 10) + ":" + r.nonces[stream]
}

func nilIfEmpty(m map[string]int64) map[string]int64 {
	if len(m) == 0 {
		return nil
	}
	return m
}
