// Command oncechaos runs once's chaos test (`make chaos`): a real local cluster
// of three managers and two gates, the chaos workload through both gates, a
// nemesis that kills, pauses and partitions processes, and the checker after
// the cluster heals. It prints a summary and exits 1 on any violation or error.
// See tests/chaos/runner and docs/testing.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/once-dev/once/tests/chaos/runner"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runner.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
