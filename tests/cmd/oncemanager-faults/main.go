// Command oncemanager-faults is the real once manager (internal/manager, the
// same configuration as cmd/manager) with failpoints, for tests and the chaos
// run only: its Raft stream layer can cut links, its clock can be shifted, and
// it can be told to hand over leadership, through /debug/failpoints on its
// RPC listener (see tests/faultnet). Product builds never contain it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/tests/faultnet"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(manager.MainWith(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, faultnet.ManagerOptions()))
}
