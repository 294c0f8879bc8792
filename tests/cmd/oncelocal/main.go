// Command oncelocal starts a local once cluster (what `make run` runs).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/once-dev/once/tests/localcluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(localcluster.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
