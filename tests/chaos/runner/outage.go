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

// The faults between the datacenters of a MultiDC run, taken in turn:
const (
	// KindDatacenterOutage: every manager of the second datacenter
	// SIGSTOPped at once, then resumed.
	KindDatacenterOutage nemesis.Kind = "dc-outage"
	// KindWANCut: the network between the datacenters cut (RPC and WAN
	// gossip both ways), every process of both running, then healed
	// (localcluster.Federation.CutWAN).
	KindWANCut nemesis.Kind = "wan-cut"
)

// federationKinds are the faults between datacenters, in the order
// outages takes them.
var federationKinds = []nemesis.Kind{KindWANCut, KindDatacenterOutage}

// federationWait bounds how long a MultiDC check waits for the outboxes to
// bring every admitted job to every datacenter after the run (an outbox's
// backoff reaches one minute).
const federationWait = 3 * time.Minute

// outages disconnects the second datacenter of f from the first for twice
// the Timings' Partition time (longer than a MultiDC run's
// GATE_FORWARD_TIMEOUT_SECONDS, so gates answer 503 and the outboxes have
// work), at random intervals around five times the Timings' Interval (so
// the datacenters are together most of the time), until ctx ends, taking
// federationKinds in turn: a WAN cut, then an outage of every manager of
// the second datacenter (SIGSTOP). It returns how many of each it injected.
// Every step goes into the history as a nemesis op. After each one it heals
// (also when ctx ends) and waits, bounded, for the second datacenter to have
// a leader again.
func outages(ctx context.Context, f *localcluster.Federation, rec *history.Recorder, t nemesis.Timings, seed uint64,
	logf func(string, ...any)) map[nemesis.Kind]int {
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
	dc := f.DCs[1]
	rng := rand.New(rand.NewPCG(seed, 0xdc)) //nolint:gosec // a reproducible schedule, not a secret
	step := func(note string, fn func() error) {
		h := rec.Invoke(history.Op{Kind: history.KindNemesis, Client: "nemesis", Note: note})
		var out history.Outcome
		if err := fn(); err != nil {
			out.Err = err.Error()
		}
		rec.Complete(h, out)
		logf("%s %s", note, out.Err)
	}
	managers := func(fn func(*localcluster.Node) error) func() error {
		return func() error {
			var errs []error
			for _, m := range dc.Managers {
				errs = append(errs, fn(m))
			}
			return errors.Join(errs...)
		}
	}
	wan := func(fn func(*localcluster.Federation, context.Context) error) func() error {
		return func() error {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nemesis.DefaultRecoveryTimeout)
			defer cancel()
			return fn(f, wctx)
		}
	}
	n := map[nemesis.Kind]int{}
	for i := 0; ; i++ {
		wait := interval/2 + time.Duration(rng.Int64N(int64(interval)))
		select {
		case <-ctx.Done():
			return n
		case <-time.After(wait):
		}
		kind := federationKinds[i%len(federationKinds)]
		switch kind {
		case KindWANCut:
			step(string(kind)+": cut the network between the datacenters", wan((*localcluster.Federation).CutWAN))
		default:
			step(string(kind)+": SIGSTOP every manager of the second datacenter", managers((*localcluster.Node).Pause))
		}
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
		switch kind {
		case KindWANCut:
			step(string(kind)+": heal the network between the datacenters", wan((*localcluster.Federation).HealWAN))
		default:
			step(string(kind)+": SIGCONT every manager of the second datacenter", managers((*localcluster.Node).Resume))
		}
		n[kind]++
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nemesis.DefaultRecoveryTimeout)
		if _, err := dc.WaitLeader(wctx); err != nil {
			logf("%s: the second datacenter has no leader after the fault: %v", kind, err)
		}
		cancel()
	}
}
