// Package e2e tests once as real processes: gate and manager binaries started
// by tests/localcluster on loopback, killed with SIGKILL, paused, restarted.
// In-process tests are for speed; these are for truth. They are skipped with
// -short.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-dev/once/tests/localcluster"
)

var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if testing.Short() {
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "once-e2e-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := localcluster.Build(ctx, dir, false); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		binDir = dir
		return m.Run()
	}()
	os.Exit(code)
}

// startCluster starts a cluster for one test and stops it at the end; on failure
// it prints where the logs are and their tails.
func startCluster(t *testing.T, managers, gates int, tweak func(*localcluster.Options)) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("real-process test; skipped with -short")
	}
	opts := localcluster.Options{BinDir: binDir, BaseDir: t.TempDir(), Managers: managers, Gates: gates, Fast: true,
		Env: []string{"MANAGER_LOG_LEVEL=info", "GATE_LOG_LEVEL=info"}}
	if tweak != nil {
		tweak(&opts)
	}
	c, err := localcluster.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, n := range c.All() {
				b, _ := os.ReadFile(n.LogPath)
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("---- %s (%s) tail ----\n%s", n.Name, filepath.Base(n.LogPath), b)
			}
		}
	})
	return c
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
