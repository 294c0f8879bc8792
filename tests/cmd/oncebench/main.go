// Command oncebench is once's load generator, with two subcommands (stdlib
// flag sets; they replaced an argv pre-scan for -cluster):
//
//	oncebench cluster [flags]   make bench: starts a local cluster
//	                            (tests/localcluster), runs the benchmark
//	                            workloads against it, stops it (tests/benchrun)
//	oncebench peers [flags]     make bench-peers: the peer workloads against
//	                            once, then against etcd (bin/oncepeer-etcd),
//	                            and once ÷ etcd (tests/benchrun)
//	oncebench load -gates URLs  runs named workloads against running gates
//	                            (tests/loadgen)
//
// Each prints a table and writes a JSON report; `oncebench <subcommand> -h`
// lists its flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/once-dev/once/tests/benchrun"
	"github.com/once-dev/once/tests/loadgen"
)

func main() {
	benchrun.ServeCeilingIfChild() // make bench's ceiling server is this binary in a child process
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitUsage is the exit code of a missing or unknown subcommand (the
// subcommands' own ExitUsage).
const exitUsage = 2

var subcommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) int{
	"cluster": benchrun.Main,
	"peers":   benchrun.PeersMain,
	"load":    loadgen.Main,
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	usage := func() {
		fmt.Fprint(stderr, `usage: oncebench <subcommand> [flags]

  cluster   start a local cluster, run the benchmark workloads, stop it (make bench)
  peers     the same workloads against once and then etcd, and once ÷ etcd (make bench-peers)
  load      run workloads against running gates (-gates URLs)

oncebench <subcommand> -h lists the subcommand's flags.
`)
	}
	if len(args) == 0 {
		usage()
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage()
		return 0
	}
	cmd, ok := subcommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "oncebench: unknown subcommand %q\n", args[0])
		usage()
		return exitUsage
	}
	return cmd(ctx, args[1:], stdout, stderr)
}
