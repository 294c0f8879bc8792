package localcluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMainBuilding is the TestMain of a package whose tests start real
// processes: it builds the gate and manager binaries once into a
// temporary directory, stores that directory in *binDir, runs the tests
// and removes it. With -short nothing is built (the tests skip). It
// returns the exit code for os.Exit.
func TestMainBuilding(m *testing.M, binDir *string) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "once-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := Build(ctx, dir, false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*binDir = dir
	return m.Run()
}

// StartForTest starts a cluster for one test and stops it when the test
// ends; when the test failed it logs the tail of every process's log. A
// real-process test is skipped with -short.
func StartForTest(t *testing.T, opts Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("real-process test; skipped with -short")
	}
	c, err := New(opts)
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
