// Package history records what the chaos workload did and what it was told:
// one Op per HTTP request, stamped with monotonic invoke and complete times
// relative to the recorder's start. A Recorder is safe for concurrent use by any
// number of clients. A history is exported and imported as JSON lines (one Op per
// line), so a failing run can be saved and checked again later.
//
// An Op is written in two steps, as in Jepsen: Invoke when the request is about
// to be sent, Complete when its answer (or its failure) is known. An Op that was
// never completed, like one that failed in transport or timed out, is
// indeterminate: it may or may not have taken effect.
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// Kind says what an Op is. The checker looks at KindSubmit only; other kinds
// (the nemesis's faults) are kept so that a saved history shows them in order.
type Kind string

// Kinds of operations.
const (
	// KindSubmit is one POST /v1/jobs attempt.
	KindSubmit Kind = "submit"
	// KindNemesis is a fault injected by the nemesis (kill, pause, partition,
	// heal); Note says which.
	KindNemesis Kind = "nemesis"
)

// Op is one operation of the history: the request as sent and, once Done, its
// outcome. Ops are values; the Recorder hands out copies and nobody mutates the
// slices they point to.
type Op struct {
	// Index is the Op's position in the history, assigned at Invoke (the order
	// in which operations began).
	Index int  `json:"index"`
	Kind  Kind `json:"kind"`
	// Client is the logical client's id (the client_id part of the key).
	Client string `json:"client"`
	// Gate is the base URL the request went to.
	Gate string `json:"gate,omitempty"`
	// Tenant is the tenant the request was sent as ("default" without tokens).
	Tenant string `json:"tenant,omitempty"`
	// Key is the Idempotency-Key header value as sent.
	Key string `json:"key,omitempty"`
	// Seq is the key's sequence number.
	Seq uint64 `json:"seq,omitempty"`
	// Attempt counts the attempts of one submission path, from 1.
	Attempt int `json:"attempt,omitempty"`
	// Dup marks the deliberate duplicate path of a submission (sent through a
	// different gate than the primary path).
	Dup bool `json:"dup,omitempty"`
	// Type, Payload and Datacenters are the request body's fields as sent.
	Type        string          `json:"type,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Datacenters []string        `json:"datacenters,omitempty"`
	// Note describes a nemesis operation.
	Note string `json:"note,omitempty"`

	// Invoke and Complete are monotonic offsets from the recorder's start.
	Invoke   time.Duration `json:"invoke_ns"`
	Complete time.Duration `json:"complete_ns,omitempty"`
	// Done is set by Complete. An Op that is not Done is indeterminate.
	Done bool `json:"done"`

	Outcome
}

// Outcome is what a request was answered, or how it failed.
type Outcome struct {
	// Status is the HTTP status; 0 when no response arrived.
	Status int `json:"status,omitempty"`
	// Code is the problem body's code member (error answers).
	Code string `json:"code,omitempty"`
	// JobID is the job_id of a job body (201 and its replays).
	JobID string `json:"job_id,omitempty"`
	// Replayed is the Idempotent-Replayed header as received ("true", "false"
	// or empty when absent).
	Replayed string `json:"replayed,omitempty"`
	// RetryAfter is the Retry-After header as received.
	RetryAfter string `json:"retry_after,omitempty"`
	// ExpiresAt is the Idempotency-Expires-At header as received: when the
	// key's stored outcome expires, the same on every replay of it.
	ExpiresAt string `json:"expires_at,omitempty"`
	// BodyHash is the hex SHA-256 of the response body bytes.
	BodyHash string `json:"body_sha256,omitempty"`
	// Err is the transport error (connection refused, reset, timeout, a body
	// cut short). A request with Err set is indeterminate.
	Err string `json:"error,omitempty"`
	// Timeout is set when Err is a timeout.
	Timeout bool `json:"timeout,omitempty"`
}

// Class sorts outcomes by what they prove about the submission.
type Class uint8

// Classes of outcomes.
const (
	// Indeterminate: no definite answer (transport error, timeout, 5xx,
	// 409 request_in_progress, not completed). The submission may or may not
	// have created its job, now or later.
	Indeterminate Class = iota
	// Committed: 201, the job exists (an original or a replay).
	Committed
	// Rejected: 422 or 429 with code job_rejected (an original or a replay).
	Rejected
	// Failed: any other definite answer (a 4xx the workload should not get,
	// 409 idempotency_key_expired). It created nothing.
	Failed
)

func (c Class) String() string {
	switch c {
	case Indeterminate:
		return "indeterminate"
	case Committed:
		return "committed"
	case Rejected:
		return "rejected"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Class of the outcome. Done is not known here; see Op.Class.
func (o Outcome) Class() Class {
	switch {
	case o.Err != "" || o.Status == 0:
		return Indeterminate
	case o.Status == http.StatusCreated:
		return Committed
	case (o.Status == http.StatusUnprocessableEntity || o.Status == http.StatusTooManyRequests) &&
		o.Code == string(api.CodeJobRejected):
		return Rejected
	case o.Retryable():
		return Indeterminate
	case o.Status >= 500:
		return Indeterminate
	}
	return Failed
}

// Retryable reports whether the same request should be sent again: the answer
// was not definite (transport error, timeout, 503 and other gateway errors,
// 409 request_in_progress, a 429 that is not an admission rejection).
func (o Outcome) Retryable() bool {
	if o.Err != "" || o.Status == 0 {
		return true
	}
	switch o.Status {
	case http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return o.Code == string(api.CodeRequestInProgress)
	case http.StatusTooManyRequests:
		return o.Code != string(api.CodeJobRejected)
	}
	return false
}

// Class of the Op: Indeterminate until it is Done.
func (op Op) Class() Class {
	if !op.Done {
		return Indeterminate
	}
	return op.Outcome.Class()
}

// String renders the Op as its JSON line (without the newline).
func (op Op) String() string {
	b, err := json.Marshal(op)
	if err != nil {
		return fmt.Sprintf("op %d: %v", op.Index, err)
	}
	return string(b)
}

// Recorder collects a history. The zero value is not usable; call NewRecorder.
type Recorder struct {
	start time.Time

	mu  sync.Mutex
	ops []Op
}

// NewRecorder starts a history now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Start is the wall-clock time the recorder was created (to correlate a history
// with process logs). Offsets in Ops are monotonic from this instant.
func (r *Recorder) Start() time.Time { return r.start }

// Now is the monotonic offset from the recorder's start.
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// Invoke records the start of op, stamping its Index and Invoke time, and
// returns the handle to pass to Complete. The Index, Invoke, Complete, Done and
// Outcome fields of op are overwritten; an empty Kind becomes KindSubmit.
func (r *Recorder) Invoke(op Op) int {
	if op.Kind == "" {
		op.Kind = KindSubmit
	}
	op.Complete, op.Done, op.Outcome = 0, false, Outcome{}
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Index = len(r.ops)
	op.Invoke = time.Since(r.start)
	r.ops = append(r.ops, op)
	return op.Index
}

// Complete records the outcome of the Op with handle h. Completing an Op twice,
// or one that was never invoked, is a bug in the caller and panics.
func (r *Recorder) Complete(h int, out Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h < 0 || h >= len(r.ops) {
		panic(fmt.Sprintf("history: Complete of unknown op %d", h))
	}
	op := &r.ops[h]
	if op.Done {
		panic(fmt.Sprintf("history: op %d completed twice", h))
	}
	op.Complete = time.Since(r.start)
	op.Done = true
	op.Outcome = out
}

// Len is the number of Ops invoked so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Ops returns a copy of the history in invocation order, including Ops still in
// flight (not Done).
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// WriteJSONL writes the history to w, one Op per line.
func (r *Recorder) WriteJSONL(w io.Writer) error { return WriteJSONL(w, r.Ops()) }

// WriteJSONL writes ops to w as JSON lines.
func WriteJSONL(w io.Writer, ops []Op) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for i := range ops {
		if err := enc.Encode(&ops[i]); err != nil {
			return fmt.Errorf("history: writing op %d: %w", ops[i].Index, err)
		}
	}
	return bw.Flush()
}

// ErrFormat marks a history that cannot be read back.
var ErrFormat = errors.New("history: malformed history")

// ReadJSONL reads a history written by WriteJSONL and returns its Ops sorted by
// Index. Unknown fields and kinds, and submit ops without a key, are
// rejected, so a history from an incompatible version fails loudly instead of
// being checked wrongly (the checker would skip such ops).
func ReadJSONL(r io.Reader) ([]Op, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var ops []Op
	for line := 1; ; line++ {
		var op Op
		err := dec.Decode(&op)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %w", ErrFormat, line, err)
		}
		switch {
		case op.Kind == "":
			return nil, fmt.Errorf("%w: record %d: no kind", ErrFormat, line)
		case op.Kind != KindSubmit && op.Kind != KindNemesis:
			// The checker looks at submit ops only: a kind it does not
			// know would drop its ops from the check unseen.
			return nil, fmt.Errorf("%w: record %d: unknown kind %q", ErrFormat, line, op.Kind)
		case op.Kind == KindSubmit && op.Key == "":
			return nil, fmt.Errorf("%w: record %d: a submit without a key", ErrFormat, line)
		}
		ops = append(ops, op)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Index < ops[j].Index })
	for i := 1; i < len(ops); i++ {
		if ops[i].Index == ops[i-1].Index {
			return nil, fmt.Errorf("%w: index %d appears twice", ErrFormat, ops[i].Index)
		}
	}
	return ops, nil
}
