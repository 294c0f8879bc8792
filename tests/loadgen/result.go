package loadgen

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Result is what one run measured. It is JSON-serialisable and round-trips.
type Result struct {
	Name string `json:"name"`
	Mode string `json:"mode"` // "closed" or "open"
	// Spec is the run's normalized spec (without Transport, OnDisrupt, Token).
	Spec Spec `json:"spec"`

	Start       time.Time `json:"start"`
	DurationSec float64   `json:"duration_s"` // first send (or schedule start) to last answer

	// Requests were sent: Answered got an HTTP response, the rest a transport
	// error (Errors). Dropped (open loop) were scheduled but never sent because
	// MaxOutstanding requests were already waiting.
	Requests       int64   `json:"requests"`
	Answered       int64   `json:"answered"`
	Dropped        int64   `json:"dropped"`
	RequestsPerSec float64 `json:"req_per_s"` // Requests / duration

	// Latency of the answered requests, from the intended send time: in open
	// loop the scheduled time, so a stall shows up in every request it delayed
	// (coordinated omission corrected). ServiceLatency (open loop only) is from
	// the actual send, for comparison.
	Latency        Latency  `json:"latency"`
	ServiceLatency *Latency `json:"service_latency,omitempty"`

	Status       map[int]int64     `json:"status"`                  // answers by HTTP status
	Codes        map[string]int64  `json:"codes,omitempty"`         // non-2xx answers by problem code ("(none)": not a problem body)
	Errors       map[string]int64  `json:"errors,omitempty"`        // transport errors by class (timeout, connection_refused, ...)
	ErrorSamples map[string]string `json:"error_samples,omitempty"` // one message per error class
	Replayed     int64             `json:"replayed"`                // answers with Idempotent-Replayed: true

	// Reused requests repeated a key sent earlier in the run (duplicates: the
	// generator's count; storm: all requests but one).
	Reused int64 `json:"reused"`
	// Keys is the number of distinct keys sent; KeysWithJobID of them got a
	// job_id in a 2xx answer. JobIDs is the number of distinct job_ids summed
	// over keys; MaxJobIDsPerKey must be 1 and KeysWithMultipleJobIDs 0, or the
	// gate created duplicate jobs (Examples shows some).
	Keys                   int64       `json:"keys"`
	KeysWithJobID          int64       `json:"keys_with_job_id"`
	JobIDs                 int64       `json:"job_ids"`
	MaxJobIDsPerKey        int64       `json:"max_job_ids_per_key"`
	KeysWithMultipleJobIDs int64       `json:"keys_with_multiple_job_ids"`
	Examples               []KeyJobIDs `json:"multiple_job_id_examples,omitempty"`

	// Timeline (Spec.Timeline) has one bucket per second of the run; Gap is
	// the longest time with no 2xx answer (from the start to the first, between
	// two, or from the last to the end).
	Timeline []Bucket `json:"timeline,omitempty"`
	Gap      *Gap     `json:"longest_gap,omitempty"`

	// DisruptedAtMS is when OnDisrupt was called, in ms from the start.
	DisruptedAtMS *float64 `json:"disrupted_at_ms,omitempty"`
	DisruptError  string   `json:"disrupt_error,omitempty"`
	// Interrupted is set when the caller's context ended the run early.
	Interrupted bool `json:"interrupted,omitempty"`
}

// OK is the number of 2xx answers.
func (r Result) OK() int64 {
	var n int64
	for st, c := range r.Status {
		if st >= 200 && st < 300 {
			n += c
		}
	}
	return n
}

// Latency summarises a latency histogram, in microseconds.
type Latency struct {
	Count  int64   `json:"count"`
	MeanUS float64 `json:"mean_us"`
	P50US  int64   `json:"p50_us"`
	P90US  int64   `json:"p90_us"`
	P99US  int64   `json:"p99_us"`
	P999US int64   `json:"p999_us"`
	MaxUS  int64   `json:"max_us"`
}

// Bucket is one second of a timeline, by completion time (drops by scheduled
// time).
type Bucket struct {
	Second       int   `json:"second"`
	OK           int64 `json:"ok"`     // 2xx answers
	Failed       int64 `json:"failed"` // non-2xx answers
	Errors       int64 `json:"errors"` // transport errors
	Dropped      int64 `json:"dropped,omitempty"`
	MaxLatencyUS int64 `json:"max_latency_us"`
}

// Gap is an interval with no successful answer.
type Gap struct {
	StartMS  float64 `json:"start_ms"` // from the run's start
	LengthMS float64 `json:"length_ms"`
}

// KeyJobIDs names a key that was answered with more than one job_id: the ids
// after the first one seen.
type KeyJobIDs struct {
	Key         string   `json:"key"`
	OtherJobIDs []string `json:"other_job_ids"`
}

// Histogram bounds: 1 µs to 10 min, 3 significant digits. Longer values are
// recorded as the maximum.
const (
	histMinUS = 1
	histMaxUS = int64(10 * time.Minute / time.Microsecond)
	histSig   = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMinUS, histMaxUS, histSig) }

func recordUS(h *hdrhistogram.Histogram, d time.Duration) {
	us := int64(d / time.Microsecond)
	us = min(max(us, 0), histMaxUS)
	_ = h.RecordValue(us) // in range by construction
}

func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Count:  h.TotalCount(),
		MeanUS: float64(int64(h.Mean()*10)) / 10,
		P50US:  h.ValueAtPercentile(50),
		P90US:  h.ValueAtPercentile(90),
		P99US:  h.ValueAtPercentile(99),
		P999US: h.ValueAtPercentile(99.9),
		MaxUS:  h.Max(),
	}
}
