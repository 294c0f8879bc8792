// Package telemetry exports the metrics that hashicorp/raft, memberlist and
// raft-autopilot emit through hashicorp/go-metrics into the process's own
// Prometheus registry, as Consul does: a go-metrics Prometheus sink installed
// as the process-wide go-metrics sink at start.
//
// hashicorp/raft and memberlist emit through go-metrics' compat package, which
// sends to hashicorp/go-metrics only in builds with the hashicorpmetrics tag
// (and to armon/go-metrics otherwise). The Makefile builds with the tag; a
// build without it still runs, and Start reports ErrUntagged so the daemon can
// say that these series are missing.
package telemetry

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrUntagged is returned by Start in a build without the hashicorpmetrics
// tag: raft and memberlist then emit to armon/go-metrics, which nothing
// exports.
var ErrUntagged = errors.New("telemetry: built without the hashicorpmetrics tag: raft and memberlist metrics are not exported")

// expiration is how long a series that is no longer emitted stays in the
// sink (raft's per-peer replication series leave with the peer). It is
// Consul's default retention for the same sink.
const expiration = 60 * time.Second

// Export is Start for a daemon: in a build without the hashicorpmetrics tag
// it logs a warning that the raft and memberlist series are missing and goes
// on; any other failure is returned.
func Export(reg prometheus.Registerer, log *slog.Logger) (stop func(), err error) {
	stop, err = Start(reg)
	if errors.Is(err, ErrUntagged) {
		log.Warn(err.Error() + "; build with -tags hashicorpmetrics (the Makefile does)")
		return func() {}, nil
	}
	return stop, err
}
