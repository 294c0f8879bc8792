// Command oncectl is once's command-line tool for users and operators: submit
// and read jobs through the gates, and look at and change a datacenter's
// managers (docs/oncectl.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/once-dev/once/internal/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
