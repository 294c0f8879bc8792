package benchrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
	"github.com/once-dev/once/tests/loadgen"
)

// The workers workload: jobs submitted and consumed at once, end to end.
// Producers submit new jobs for the workload's duration; workers lease them
// (long poll, up to workerBatch at a time) and complete each lease's jobs in one request; the run ends
// when every job submitted has been completed. Its "requests" are completed
// jobs, its rate completed jobs per second, its latency from a job's
// submission to its completion being acknowledged.
const (
	workerProducers = 32
	workerWorkers   = 8
	workerBatch     = 16
	workerJobType   = "bench-work"
)

// runWorkers runs the workers workload against the gates of spec.
func runWorkers(ctx context.Context, spec loadgen.Spec) (loadgen.Result, error) {
	res := loadgen.Result{Name: spec.Name, Mode: "closed", Spec: spec, Start: time.Now(), Status: map[int]int64{}}
	opts := client.Options{MaxAttempts: 20, InitialBackoff: 10 * time.Millisecond, MaxBackoff: time.Second, AttemptTimeout: 10 * time.Second}
	c, err := client.New(spec.Gates, opts)
	if err != nil {
		return res, err
	}
	var run [8]byte
	_, _ = rand.Read(run[:])
	prefix := "bw-" + hex.EncodeToString(run[:])

	var submittedAt sync.Map // job id → time.Time
	var submitted, completed, failures atomic.Int64
	var histMu sync.Mutex
	hist := hdrhistogram.New(1, 60_000_000, 3)
	produceDone := make(chan struct{})
	pctx, stopProducing := context.WithTimeout(ctx, time.Duration(spec.Duration))
	defer stopProducing()

	var producers sync.WaitGroup
	for p := range workerProducers {
		producers.Go(func() {
			for i := 0; pctx.Err() == nil; i++ {
				at := time.Now()
				r, err := c.SubmitWithKey(ctx, fmt.Sprintf("%s-%d-%d", prefix, p, i), api.JobRequest{Type: workerJobType, Payload: json.RawMessage(`{"n":1}`)})
				if err != nil {
					failures.Add(1)
					continue
				}
				submittedAt.Store(r.Job.JobID, at)
				submitted.Add(1)
			}
		})
	}
	go func() {
		producers.Wait()
		close(produceDone)
	}()

	wctx, stopWorking := context.WithCancel(ctx)
	defer stopWorking()
	var last atomic.Int64 // unix nanos of the last completion
	var workers sync.WaitGroup
	for range workerWorkers {
		workers.Go(func() {
			for wctx.Err() == nil {
				leases, err := c.Lease(wctx, client.LeaseOptions{Types: []string{workerJobType}, MaxJobs: workerBatch, LeaseFor: 30 * time.Second, Wait: time.Second})
				if err != nil {
					if wctx.Err() == nil {
						failures.Add(1)
					}
					continue
				}
				if len(leases) == 0 {
					continue
				}
				// The lease's jobs finish together (they do no work), so
				// their completions go in one request (POST
				// /v1/completions), as pkg/client's worker loop groups the
				// completions that finish while one is in flight.
				items := make([]client.Completion, len(leases))
				for i, l := range leases {
					items[i] = client.Completion{JobID: l.Job.JobID, LeaseID: l.LeaseID}
				}
				results, err := c.CompleteMany(wctx, items)
				if err != nil {
					failures.Add(int64(len(items)))
					continue
				}
				now := time.Now()
				for i, r := range results {
					if r.Err != nil {
						failures.Add(1)
						continue
					}
					last.Store(max(last.Load(), now.UnixNano()))
					completed.Add(1)
					if at, ok := submittedAt.Load(leases[i].Job.JobID); ok {
						histMu.Lock()
						_ = hist.RecordValue(min(now.Sub(at.(time.Time)).Microseconds(), 60_000_000))
						histMu.Unlock()
					}
				}
			}
		})
	}
	// Every submitted job completed, or a minute after the producers stop.
	<-produceDone
	drain := time.Now().Add(time.Minute)
	for completed.Load() < submitted.Load() && time.Now().Before(drain) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	stopWorking()
	workers.Wait()

	n := completed.Load()
	end := time.Unix(0, last.Load())
	if n == 0 {
		end = time.Now()
	}
	res.DurationSec = end.Sub(res.Start).Seconds()
	res.Requests, res.Answered, res.Keys = n, n, submitted.Load()
	res.Status[200] = n
	res.MaxJobIDsPerKey = 1 // every key was submitted once, and answered with one job ID
	if f := failures.Load(); f > 0 {
		res.Errors = map[string]int64{"worker_or_submit_call": f}
	}
	if res.DurationSec > 0 {
		res.RequestsPerSec = float64(n) / res.DurationSec
	}
	if hist.TotalCount() > 0 {
		res.Latency = loadgen.Latency{Count: hist.TotalCount(), MeanUS: float64(int64(hist.Mean()*10)) / 10,
			P50US: hist.ValueAtPercentile(50), P90US: hist.ValueAtPercentile(90), P99US: hist.ValueAtPercentile(99),
			P999US: hist.ValueAtPercentile(99.9), MaxUS: hist.Max()}
	}
	if n < submitted.Load() {
		return res, fmt.Errorf("workers: %d of %d submitted jobs completed", n, submitted.Load())
	}
	return res, nil
}
