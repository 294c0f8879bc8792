// Package console tests once's web console (internal/console, served by
// every gate at /ui/) in a real browser: Chromium driven by chromedp
// against a real local cluster (tests/localcluster). Without a Chromium
// binary the tests skip, except when the environment variable CI is set:
// then they fail. With ONCE_CONSOLE_SCREENSHOTS=1 they write the
// screenshots of docs/console.md into docs/console/.
package console

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/once-dev/once/tests/localcluster"
)

// binDir holds the gate and manager binaries built for the run.
var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		if testing.Short() {
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "once-console-bin-")
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
