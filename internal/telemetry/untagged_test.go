//go:build !hashicorpmetrics

package telemetry

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestStartUntagged(t *testing.T) {
	if _, err := Start(prometheus.NewRegistry()); !errors.Is(err, ErrUntagged) {
		t.Fatalf("Start = %v, want ErrUntagged", err)
	}
}
