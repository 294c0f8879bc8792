// Command manager runs a once manager: a member of its datacenter's Raft group
// holding the idempotency ledger. Configuration: flags and MANAGER_* /
// IDEMPOTENCY_* variables (docs/configuration.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/once-dev/once/internal/manager/managerd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal stops the manager gracefully; a second one, during
	// that stop, ends the process at once (the signals' default action).
	context.AfterFunc(ctx, stop)
	os.Exit(managerd.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}
