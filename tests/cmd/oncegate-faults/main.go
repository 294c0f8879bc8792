// Command oncegate-faults is the real once gate (internal/gate, the same
// configuration as cmd/gate) whose connections to managers of other
// datacenters follow the WAN cut written in FAULTNET_WAN_FILE (see
// tests/faultnet), for tests and the chaos run only. Product builds never
// contain it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/once-dev/once/internal/gate"
	"github.com/once-dev/once/tests/faultnet"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var opts gate.Options
	wan, stopWAN, err := faultnet.WANFromEnv(ctx, os.Environ())
	if err != nil {
		fmt.Fprintf(os.Stderr, "gate: %v\n", err)
		os.Exit(gate.ExitConfig)
	}
	if wan != nil {
		opts.Dial = wan.Dial
	}
	code := gate.MainWith(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, opts)
	stop()
	stopWAN()
	os.Exit(code)
}
