// Command oncemanager-faults is the real once manager (managerd.MainWith, the
// same configuration as cmd/manager) with failpoints, for tests and the chaos
// run only: its Raft stream layer can cut links, its clock can be shifted,
// and it can be told to hand over leadership, through /debug/failpoints on
// its RPC listener; with FAULTNET_WAN_FILE its links to other datacenters
// (RPC and WAN gossip) follow the WAN cut written in that file (see
// tests/faultnet). Product builds never contain it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager/managerd"
	"github.com/once-dev/once/tests/faultnet"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := faultnet.ManagerOptions()
	wan, stopWAN, err := faultnet.WANFromEnv(ctx, os.Environ())
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		os.Exit(config.ExitConfig)
	}
	if wan != nil {
		opts.Dial, opts.WrapWANTransport = wan.Dial, wan.Wrap
	}
	code := managerd.MainWith(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, opts)
	stop()
	stopWAN()
	os.Exit(code)
}
