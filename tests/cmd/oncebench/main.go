// Command oncebench is once's load generator: it runs named workloads against
// the gates' POST /v1/jobs, prints a table and writes a JSON report (see
// tests/loadgen). With -cluster it is `make bench`: it starts a local
// cluster itself, runs the benchmark workloads against it and stops it (see
// tests/benchrun).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/once-dev/once/tests/benchrun"
	"github.com/once-dev/once/tests/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var code int
	if benchrun.ClusterMode(os.Args[1:]) {
		code = benchrun.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	} else {
		code = loadgen.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	os.Exit(code)
}
