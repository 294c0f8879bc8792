//go:build !hashicorpmetrics

package telemetry

import "github.com/prometheus/client_golang/prometheus"

// Start reports ErrUntagged: in this build raft and memberlist emit to
// armon/go-metrics, which is not exported. stop does nothing.
func Start(prometheus.Registerer) (stop func(), err error) {
	return func() {}, ErrUntagged
}
