package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// KeyMode says which Idempotency-Key each request carries.
type KeyMode string

// The key modes.
const (
	// KeysUnique gives every request a new structured key
	// bench-<worker>:<seq>:<nonce>.
	KeysUnique KeyMode = "unique"
	// KeysDuplicates makes a fraction (Spec.DuplicateRatio) of the requests reuse
	// a key the same worker sent recently (one of its last Spec.RecentKeys keys),
	// with the identical body, so the gate must replay; the rest are new keys.
	// A worker sends one request at a time, so the reused key's first request
	// has been answered: this exercises replays of committed entries (storm
	// covers concurrent duplicates of a pending one).
	KeysDuplicates KeyMode = "duplicates"
	// KeysStorm sends one key, with one body, in every request of the run. In
	// closed-loop mode the workers are released together, so the first
	// Concurrency requests hit the gate at once: exactly one job may result.
	KeysStorm KeyMode = "storm"
)

// Spread says how requests are spread over the gates.
type Spread string

// The spreads.
const (
	// SpreadRoundRobin sends each worker's successive requests to successive
	// gates (worker w's j-th request goes to gate (w+j) mod len(Gates)).
	SpreadRoundRobin Spread = "round-robin"
	// SpreadPerWorker pins worker w to gate w mod len(Gates).
	SpreadPerWorker Spread = "per-worker"
)

// Defaults applied by Spec.Normalize to fields left zero.
const (
	DefaultConcurrency     = 16
	DefaultOpenConcurrency = 64
	DefaultDuration        = 10 * time.Second
	DefaultDuplicateRatio  = 0.9
	DefaultRecentKeys      = 128
	DefaultPayloadBytes    = 64
	DefaultTimeout         = 30 * time.Second
	DefaultClientPrefix    = "bench"
	DefaultJobType         = "bench"

	// MaxPayloadBytes bounds Spec.PayloadBytes (a gate refuses far less).
	MaxPayloadBytes = 64 << 20
)

// ErrInvalidSpec is matched (errors.Is) by every error Spec.Validate returns.
var ErrInvalidSpec = errors.New("invalid load spec")

// SpecError is a Spec field that failed validation: the field's JSON name (which
// is also the oncebench flag's name where one exists), the value and what is
// accepted.
type SpecError struct {
	Field string
	Value string
	Want  string
	Err   error // underlying cause, if any
}

func (e *SpecError) Error() string {
	msg := fmt.Sprintf("invalid %s %q: want %s", e.Field, e.Value, e.Want)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap lets errors.Is match ErrInvalidSpec and the cause.
func (e *SpecError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalidSpec, e.Err}
	}
	return []error{ErrInvalidSpec}
}

// Duration is a time.Duration that reads and writes JSON as a Go duration string
// ("1.5s"); it also reads a JSON number as nanoseconds.
type Duration time.Duration

// MarshalJSON writes the duration as a string such as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration: want a string such as \"10s\" or integer nanoseconds, got %s", b)
	}
	*d = Duration(n)
	return nil
}

// String formats the duration as time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// Spec describes one load run. It is plain data (JSON-serialisable) apart from
// Transport and OnDisrupt, so workload lists can live in files; Workloads returns
// the built-in ones. Zero fields take the defaults documented on each field
// (Normalize applies them).
//
// The mode follows from Rate: Rate == 0 is closed-loop (Concurrency workers, each
// sends its next request when the previous one is answered); Rate > 0 is
// open-loop (requests scheduled every 1/Rate s on a fixed timetable, sent by
// Concurrency workers, latency measured from the scheduled time).
type Spec struct {
	// Name labels the run in tables and JSON; default: the key mode.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`

	// Gates are the gates' base URLs, e.g. http://127.0.0.1:8080. Required.
	Gates  []string `json:"gates,omitempty"`
	Spread Spread   `json:"spread,omitempty"` // default round-robin

	Keys           KeyMode `json:"keys,omitempty"`            // default unique
	DuplicateRatio float64 `json:"dup_ratio,omitempty"`       // duplicates: fraction of requests that reuse a key; default 0.9
	RecentKeys     int     `json:"recent_keys,omitempty"`     // duplicates: how many recent keys per worker may be reused; default 128
	ClientPrefix   string  `json:"client_prefix,omitempty"`   // client_id is <prefix>-<worker>; default "bench"
	Concurrency    int     `json:"concurrency,omitempty"`     // workers (= connections per gate at most); default 16 closed, 64 open
	Rate           float64 `json:"rate,omitempty"`            // requests per second; > 0 selects open-loop
	MaxOutstanding int     `json:"max_outstanding,omitempty"` // open-loop: scheduled but unanswered requests before new ones are dropped; default max(Concurrency, one second of Rate)

	// Duration and Requests bound the run; it ends at whichever comes first.
	// Both zero: Duration defaults to 10s (storm: Requests defaults to
	// Concurrency, one request per worker).
	Duration Duration `json:"duration,omitempty"`
	Requests int64    `json:"requests,omitempty"`

	PayloadBytes int      `json:"payload_bytes,omitempty"` // size of the JSON payload value; default 64 (below 10: payload {})
	JobType      string   `json:"type,omitempty"`          // job type; default "bench"
	Datacenters  []string `json:"datacenters,omitempty"`   // sent in the body when set
	Token        string   `json:"-"`                       // Authorization: Bearer token; never serialised
	Timeout      Duration `json:"timeout,omitempty"`       // per request; default 30s

	// Warmup makes each closed-loop worker open its connection (GET /healthz on
	// its first gate) before the workers are released together.
	Warmup bool `json:"warmup,omitempty"`
	// Timeline records per-second buckets and the longest gap with no 2xx answer.
	Timeline bool `json:"timeline,omitempty"`

	// Disrupt names a fault for an orchestrator to inject (e.g. "kill-leader")
	// DisruptAt after the run starts. The load generator itself only calls
	// OnDisrupt, if set, at that time (in its own goroutine, with a context that
	// ends with the run) and records when it did.
	Disrupt   string                          `json:"disrupt,omitempty"`
	DisruptAt Duration                        `json:"disrupt_at,omitempty"`
	OnDisrupt func(ctx context.Context) error `json:"-"`

	// Transport, when set, sends the requests through net/http (RoundTrip
	// is called directly: no redirects are followed, no cookies kept); tests
	// use it to put a handler in place of the network. Nil: Run sends them
	// with fasthttp, one connection pool per gate, which costs the generator
	// far less CPU per request (fast.go).
	Transport http.RoundTripper `json:"-"`
}

// Open reports whether the spec is open-loop (Rate > 0).
func (s Spec) Open() bool { return s.Rate > 0 }

// Mode is "open" or "closed".
func (s Spec) Mode() string {
	if s.Open() {
		return "open"
	}
	return "closed"
}

// Normalize returns the spec with defaults applied to zero fields, validated.
func (s Spec) Normalize() (Spec, error) {
	if s.Keys == "" {
		s.Keys = KeysUnique
	}
	if s.Name == "" {
		s.Name = string(s.Keys)
	}
	if s.Spread == "" {
		s.Spread = SpreadRoundRobin
	}
	if s.Keys == KeysDuplicates {
		if s.DuplicateRatio == 0 {
			s.DuplicateRatio = DefaultDuplicateRatio
		}
		if s.RecentKeys == 0 {
			s.RecentKeys = DefaultRecentKeys
		}
	}
	if s.ClientPrefix == "" {
		s.ClientPrefix = DefaultClientPrefix
	}
	if s.Concurrency == 0 {
		s.Concurrency = DefaultConcurrency
		if s.Open() {
			s.Concurrency = DefaultOpenConcurrency
		}
	}
	if s.Open() && s.MaxOutstanding == 0 {
		s.MaxOutstanding = max(s.Concurrency, int(math.Min(math.Ceil(s.Rate), 1<<20)))
	}
	if s.Duration == 0 && s.Requests == 0 {
		if s.Keys == KeysStorm && !s.Open() && s.Concurrency > 0 {
			s.Requests = int64(s.Concurrency)
		} else {
			s.Duration = Duration(DefaultDuration)
		}
	}
	if s.PayloadBytes == 0 {
		s.PayloadBytes = DefaultPayloadBytes
	}
	if s.JobType == "" {
		s.JobType = DefaultJobType
	}
	if s.Timeout == 0 {
		s.Timeout = Duration(DefaultTimeout)
	}
	return s, s.Validate()
}

// Validate checks a normalized spec. Every error is a *SpecError matching
// ErrInvalidSpec.
func (s Spec) Validate() error {
	bad := func(field, value, want string, err error) error {
		return &SpecError{Field: field, Value: value, Want: want, Err: err}
	}
	if len(s.Gates) == 0 {
		return bad("gates", "", "at least one gate URL such as http://127.0.0.1:8080", nil)
	}
	for _, g := range s.Gates {
		u, err := url.Parse(g)
		if err != nil {
			return bad("gates", g, "an http:// or https:// URL", err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return bad("gates", g, "an http:// or https:// URL with a host and no query", nil)
		}
	}
	switch s.Spread {
	case SpreadRoundRobin, SpreadPerWorker:
	default:
		return bad("spread", string(s.Spread), `"round-robin" or "per-worker"`, nil)
	}
	switch s.Keys {
	case KeysUnique, KeysDuplicates, KeysStorm:
	default:
		return bad("keys", string(s.Keys), `"unique", "duplicates" or "storm"`, nil)
	}
	if !(s.DuplicateRatio >= 0 && s.DuplicateRatio <= 1) {
		return bad("dup_ratio", fmt.Sprint(s.DuplicateRatio), "a fraction from 0 to 1", nil)
	}
	if s.Keys == KeysDuplicates && s.RecentKeys < 1 {
		return bad("recent_keys", fmt.Sprint(s.RecentKeys), "at least 1", nil)
	}
	if !validClientPrefix(s.ClientPrefix) {
		return bad("client_prefix", s.ClientPrefix, "1 to 100 characters of A-Z a-z 0-9 . _ - @", nil)
	}
	if s.Concurrency < 1 || s.Concurrency > 1<<20 {
		return bad("concurrency", fmt.Sprint(s.Concurrency), "an integer from 1 to 1048576", nil)
	}
	if !(s.Rate >= 0) || math.IsInf(s.Rate, 0) || s.Rate > 1e9 {
		return bad("rate", fmt.Sprint(s.Rate), "requests per second from 0 (closed loop) to 1e9", nil)
	}
	if s.Open() && s.MaxOutstanding < 1 {
		return bad("max_outstanding", fmt.Sprint(s.MaxOutstanding), "at least 1", nil)
	}
	if s.Duration < 0 {
		return bad("duration", s.Duration.String(), "a positive duration", nil)
	}
	if s.Requests < 0 {
		return bad("requests", fmt.Sprint(s.Requests), "a positive count", nil)
	}
	if s.Duration == 0 && s.Requests == 0 {
		return bad("duration", "0", "a duration or a request count to bound the run", nil)
	}
	if s.PayloadBytes < 0 || s.PayloadBytes > MaxPayloadBytes {
		return bad("payload_bytes", fmt.Sprint(s.PayloadBytes), fmt.Sprintf("from 0 to %d", MaxPayloadBytes), nil)
	}
	if s.JobType == "" || strings.ContainsAny(s.JobType, "\"\\") {
		return bad("type", s.JobType, "a job type such as bench", nil)
	}
	for _, dc := range s.Datacenters {
		if dc == "" || strings.ContainsAny(dc, "\"\\") {
			return bad("datacenters", dc, "datacenter names such as dc1", nil)
		}
	}
	if s.Timeout <= 0 {
		return bad("timeout", s.Timeout.String(), "a positive duration", nil)
	}
	if s.DisruptAt < 0 {
		return bad("disrupt_at", s.DisruptAt.String(), "a positive duration", nil)
	}
	return nil
}

func validClientPrefix(p string) bool {
	if len(p) == 0 || len(p) > 100 {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '-', c == '@':
		default:
			return false
		}
	}
	return true
}
