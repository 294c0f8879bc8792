//go:build hashicorpmetrics

package telemetry

import (
	"context"
	"fmt"
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	gmprometheus "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// mu makes Start and its stop one at a time: the go-metrics sink is one per
// process. current is the sink installed last (nil after its stop).
var (
	mu      sync.Mutex
	current *gmprometheus.PrometheusSink
)

// Start registers a go-metrics Prometheus sink on reg and makes it the
// process-wide go-metrics sink, so raft's (raft_commitTime,
// raft_state_leader, raft_replication_appendEntries_rpc, ...) and
// memberlist's (memberlist_gossip, memberlist_msg_alive, ...) series appear on
// the process's /metrics. Series are named as go-metrics keys joined with
// underscores, with no service or host prefix.
//
// stop unregisters the sink, stops its cleanup and, unless a later Start has
// replaced it, puts the discarding sink back. A process runs one daemon and
// calls Start once; a second Start (two daemons in one test process)
// replaces the first's sink, whose stop then leaves the second's in place.
func Start(reg prometheus.Registerer) (stop func(), err error) {
	mu.Lock()
	defer mu.Unlock()
	sink, err := gmprometheus.NewPrometheusSinkFrom(gmprometheus.PrometheusOpts{
		Name:       "once_gometrics",
		Registerer: reg,
		Expiration: expiration,
	})
	if err != nil {
		return nil, fmt.Errorf("telemetry: register the go-metrics sink: %w", err)
	}
	conf := quiet()
	if _, err := gometrics.NewGlobal(conf, sink); err != nil {
		reg.Unregister(sink)
		return nil, fmt.Errorf("telemetry: install the go-metrics sink: %w", err)
	}
	current = sink
	ctx, cancel := context.WithCancel(context.Background())
	sink.RunBackgroundCleanup(ctx)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		cancel()
		// A sink another Start replaced is no longer the process's: the
		// one installed since stays (two daemons in one process, in tests).
		if current == sink {
			_, _ = gometrics.NewGlobal(quiet(), &gometrics.BlackholeSink{})
			current = nil
		}
		reg.Unregister(sink)
	}, nil
}

// quiet is go-metrics' configuration without the parts that do not fit a
// Prometheus registry: no service or host name folded into every key, and no
// runtime sampler (its goroutine cannot be stopped, and the registry has the
// Go collector already).
func quiet() *gometrics.Config {
	return &gometrics.Config{
		TimerGranularity: time.Millisecond, // raft documents its timers in milliseconds
		ProfileInterval:  0,
		FilterDefault:    true,
	}
}
