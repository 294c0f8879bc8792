package loadgen

import (
	"context"
	"errors"
	"hash/maphash"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// outcome is what one request produced, handed to a recorder shard.
type outcome struct {
	intended, sent, done time.Duration // offsets from the run's start
	status               int           // 0: transport error
	replayed             bool
	code                 string // problem code of a non-2xx answer
	errClass, errMsg     string
}

// shard collects the outcomes of some workers. Workers are spread over a few
// shards so that recording is one uncontended lock per request and memory
// does not grow with the worker count.
type shard struct {
	mu        sync.Mutex
	lat, svc  *hdrhistogram.Histogram
	status    map[int]int64
	codes     map[string]int64
	errs      map[string]int64
	errSample map[string]string
	requests  int64
	answered  int64
	replayed  int64
	timeline  []Bucket
	okAt      []time.Duration // completion offsets of 2xx answers (timeline only)
}

func newShard(open bool) *shard {
	s := &shard{
		lat:       newHist(),
		status:    map[int]int64{},
		codes:     map[string]int64{},
		errs:      map[string]int64{},
		errSample: map[string]string{},
	}
	if open {
		s.svc = newHist()
	}
	return s
}

func (s *shard) record(o *outcome, timeline bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	var b *Bucket
	if timeline {
		b = bucketAt(&s.timeline, o.done)
	}
	if o.status == 0 {
		s.errs[o.errClass]++
		if _, ok := s.errSample[o.errClass]; !ok {
			s.errSample[o.errClass] = o.errMsg
		}
		if b != nil {
			b.Errors++
		}
		return
	}
	s.answered++
	s.status[o.status]++
	if o.replayed {
		s.replayed++
	}
	lat := o.done - o.intended
	recordUS(s.lat, lat)
	if s.svc != nil {
		recordUS(s.svc, o.done-o.sent)
	}
	ok := o.status >= 200 && o.status < 300
	if !ok {
		s.codes[o.code]++
	}
	if b != nil {
		if ok {
			b.OK++
			s.okAt = append(s.okAt, o.done)
		} else {
			b.Failed++
		}
		b.MaxLatencyUS = max(b.MaxLatencyUS, int64(lat/time.Microsecond))
	}
}

// bucketAt returns the timeline bucket of offset d, growing the timeline.
func bucketAt(tl *[]Bucket, d time.Duration) *Bucket {
	sec := max(int(d/time.Second), 0)
	for len(*tl) <= sec {
		*tl = append(*tl, Bucket{Second: len(*tl)})
	}
	return &(*tl)[sec]
}

// classify names a transport error's class.
func classify(err error) string {
	// net.Error and fasthttp's timeout error (which has no Temporary).
	var te interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, fasthttp.ErrDialTimeout), errors.As(err, &te) && te.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection_reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, fasthttp.ErrConnectionClosed):
		return "eof"
	default:
		return "other"
	}
}

// tracker counts the distinct job_ids answered for each key. It keeps a hash
// of the first job_id per key (16 bytes a key) and the strings of any further
// distinct ones, which should never exist.
type tracker struct {
	seed   maphash.Seed
	shards [64]trackerShard
}

type trackerShard struct {
	mu    sync.Mutex
	first map[uint64]uint64 // key index -> hash of its first job_id
	more  map[uint64]*extraIDs
}

type extraIDs struct {
	hashes []uint64
	ids    []string
}

func newTracker() *tracker {
	t := &tracker{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].first = map[uint64]uint64{}
	}
	return t
}

func (t *tracker) add(idx uint64, jobID []byte) {
	h := maphash.Bytes(t.seed, jobID)
	s := &t.shards[(idx^idx>>40)%uint64(len(t.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	first, ok := s.first[idx]
	if !ok {
		s.first[idx] = h
		return
	}
	if first == h {
		return
	}
	if s.more == nil {
		s.more = map[uint64]*extraIDs{}
	}
	x := s.more[idx]
	if x == nil {
		x = &extraIDs{}
		s.more[idx] = x
	}
	if !slices.Contains(x.hashes, h) {
		x.hashes = append(x.hashes, h)
		x.ids = append(x.ids, string(jobID))
	}
}

// maxExamples bounds Result.Examples.
const maxExamples = 10

// fill sets the job-id fields of r; keyName renders a key index.
func (t *tracker) fill(r *Result, keyName func(uint64) string) {
	for i := range t.shards {
		s := &t.shards[i]
		r.KeysWithJobID += int64(len(s.first))
		r.JobIDs += int64(len(s.first))
		if len(s.first) > 0 {
			r.MaxJobIDsPerKey = max(r.MaxJobIDsPerKey, 1)
		}
		for idx, x := range s.more {
			r.KeysWithMultipleJobIDs++
			r.JobIDs += int64(len(x.hashes))
			r.MaxJobIDsPerKey = max(r.MaxJobIDsPerKey, int64(1+len(x.hashes)))
			if len(r.Examples) < maxExamples {
				r.Examples = append(r.Examples, KeyJobIDs{Key: keyName(idx), OtherJobIDs: x.ids})
			}
		}
	}
	slices.SortFunc(r.Examples, func(a, b KeyJobIDs) int { return strings.Compare(a.Key, b.Key) })
}

// longestGap finds the longest interval in [0, end] containing no element of
// ok (sorted in place).
func longestGap(ok []time.Duration, end time.Duration) Gap {
	slices.Sort(ok)
	var best, bestAt, prev time.Duration
	for _, t := range ok {
		if t-prev > best {
			best, bestAt = t-prev, prev
		}
		prev = t
	}
	if end-prev > best {
		best, bestAt = end-prev, prev
	}
	return Gap{StartMS: ms(bestAt), LengthMS: ms(best)}
}

// ms renders a duration as milliseconds with microsecond precision.
func ms(d time.Duration) float64 {
	return float64(d/time.Microsecond) / 1000
}
