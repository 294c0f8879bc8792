// Package console tests once's web console (internal/console, served by
// every gate at /ui/) in a real browser: Chromium driven by chromedp
// against a real local cluster (tests/localcluster). Without a Chromium
// binary on PATH the tests fail. With ONCE_CONSOLE_SCREENSHOTS=1 they write the
// screenshots of docs/console.md into docs/console/.
package console

import (
	"os"
	"testing"

	"github.com/once-dev/once/tests/localcluster"
)

// binDir holds the gate and manager binaries built for the run.
var binDir string

func TestMain(m *testing.M) { os.Exit(localcluster.TestMainBuilding(m, &binDir)) }
