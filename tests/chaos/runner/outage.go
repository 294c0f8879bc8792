package runner

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/once-dev/once/tests/chaos/history"
	"github.com/once-dev/once/tests/chaos/nemesis"
	"github.com/once-dev/once/tests/localcluster"
)

// KindDatacenterOutage is the fault of a MultiDC run's second datacenter:
// every one of its managers SIGSTOPped at once, then resumed.
const KindDatacenterOutage nemesis.Kind = "dc-outage"

// federationWait bounds how long a MultiDC check waits for the outboxes to
// bring every admitted job to every datacenter after the run (an outbox's
// backoff reaches one minute).
const federationWait = 3 * time.Minute

// outages stops every manager of dc (SIGSTOP) for twice the Timings'
// Partition time (longer than a MultiDC run's GATE_FORWARD_TIMEOUT_SECONDS,
// so gates answer 503 and the outboxes have work), at random intervals
// around five times the Timings' Interval (so the datacenter is up most of
// the time), until ctx ends,
// and returns how many it injected. Every step goes into the history as a
// nemesis op. After each outage it resumes every manager (also when ctx
// ends) and waits, bounded, for dc to have a leader again.
func outages(ctx context.Context, dc *localcluster.Cluster, rec *history.Recorder, t nemesis.Timings, seed uint64,
	logf func(string, ...any)) int {
	d := nemesis.DefaultTimings
	interval, hold := t.Interval, t.Partition
	if interval <= 0 {
		interval = d.Interval
	}
	interval *= 5
	if hold <= 0 {
		hold = d.Partition
	}
	hold *= 2
	rng := rand.New(rand.NewPCG(seed, 0xdc)) //nolint:gosec // a reproducible schedule, not a secret
	step := func(note string, fn func(*localcluster.Node) error) {
		h := rec.Invoke(history.Op{Kind: history.KindNemesis, Client: "nemesis", Note: note})
		var errs []error
		for _, m := range dc.Managers {
			errs = append(errs, fn(m))
		}
		var out history.Outcome
		if err := errors.Join(errs...); err != nil {
			out.Err = err.Error()
		}
		rec.Complete(h, out)
		logf("%s %s", note, out.Err)
	}
	n := 0
	for {
		wait := interval/2 + time.Duration(rng.Int64N(int64(interval)))
		select {
		case <-ctx.Done():
			return n
		case <-time.After(wait):
		}
		step(string(KindDatacenterOutage)+": SIGSTOP every manager of the second datacenter", (*localcluster.Node).Pause)
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
		step(string(KindDatacenterOutage)+": SIGCONT every manager of the second datacenter", (*localcluster.Node).Resume)
		n++
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nemesis.DefaultRecoveryTimeout)
		if _, err := dc.WaitLeader(wctx); err != nil {
			logf("%s: the second datacenter has no leader after the outage: %v", KindDatacenterOutage, err)
		}
		cancel()
	}
}
