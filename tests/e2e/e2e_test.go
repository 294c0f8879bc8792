// Package e2e tests once as real processes: gate and manager binaries started
// by tests/localcluster on loopback, killed with SIGKILL, paused, restarted.
// In-process tests are for speed; these are for truth. They are skipped with
// -short.
package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/once-dev/once/tests/localcluster"
)

var binDir string

func TestMain(m *testing.M) { os.Exit(localcluster.TestMainBuilding(m, &binDir)) }

// startCluster starts a cluster for one test and stops it at the end; on failure
// it prints where the logs are and their tails.
func startCluster(t *testing.T, managers, gates int, tweak func(*localcluster.Options)) *localcluster.Cluster {
	t.Helper()
	opts := localcluster.Options{BinDir: binDir, BaseDir: t.TempDir(), Managers: managers, Gates: gates, Fast: true,
		Env: []string{"MANAGER_LOG_LEVEL=info", "GATE_LOG_LEVEL=info"}}
	if tweak != nil {
		tweak(&opts)
	}
	return localcluster.StartForTest(t, opts)
}

// left is the time until ctx's deadline (a test's ctxFor): how long a
// testutil.WaitFor inside that test may wait.
func left(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return time.Minute
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
