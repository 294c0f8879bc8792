// Command gate serves once's HTTP API: clients submit jobs with an
// Idempotency-Key, and every retry gets the first answer. Settings come from
// flags and GATE_* / IDEMPOTENCY_* variables (gate -h lists them;
// docs/configuration.md explains them). SIGINT or SIGTERM shuts it down
// gracefully.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/once-dev/once/internal/gate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal stops the gate gracefully; a second one, during that
	// stop, ends the process at once (the signals' default action).
	context.AfterFunc(ctx, stop)
	os.Exit(gate.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}
