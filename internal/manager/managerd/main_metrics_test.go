//go:build hashicorpmetrics

package managerd

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/testutil"
)

// TestMainExportsRaftMetrics runs a one-manager cluster through Main and reads
// its /metrics: raft's commit time and its leader-change counter are there,
// next to the manager's own series (internal/telemetry).
func TestMainExportsRaftMetrics(t *testing.T) {
	env, rpcAddr := soloManagerEnv(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	logs := &testutil.Buffer{}
	go func() { exit <- Main(ctx, nil, env, io.Discard, logs) }()
	defer func() {
		cancel()
		if code := <-exit; code != config.ExitOK {
			t.Errorf("exit %d after shutdown; log:\n%s", code, logs.String())
		}
	}()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var page string
	testutil.WaitFor(t, 60*time.Second, func() (bool, string) {
		select {
		case code := <-exit:
			exit <- code
			t.Fatalf("Main exited %d; log:\n%s", code, logs.String())
		default:
		}
		resp, err := client.Get("http://" + rpcAddr + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		page = string(b)
		// The leader's first entry (its no-op) commits once it is leader.
		return strings.Contains(page, "once_manager_is_leader 1") && strings.Contains(page, "raft_commitTime_count"),
			"no leader with a committed entry yet"
	})
	for _, series := range []string{
		"raft_commitTime_count",  // summary: time from dispatch to commit
		"raft_state_leader",      // counter: times this server became leader
		"raft_state_candidate",   // counter: elections it started
		"once_manager_is_leader", // the manager's own series, same registry
	} {
		if !strings.Contains(page, "\n"+series) {
			t.Errorf("/metrics has no %s", series)
		}
	}
}
