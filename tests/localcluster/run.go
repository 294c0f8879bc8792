package localcluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Main is `make run`: it starts a local single-datacenter cluster (three managers,
// two gates on 127.0.0.1:8080 and :8081 by default) from prebuilt binaries,
// waits until the gates are ready, prints a curl line that works, and stops
// every process cleanly when ctx ends (Ctrl-C).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("oncelocal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", ".run", "directory for logs/ and data/ (kept between runs: the cluster restarts from it)")
	bin := fs.String("bin", "bin", "directory holding the gate and manager binaries")
	managers := fs.Int("managers", 3, "number of managers")
	gatePorts := fs.String("gate-ports", "8080,8081", "comma-separated HTTP ports of the gates")
	logs := fs.Bool("logs", false, "stream every process's log to the terminal instead of the status screen")
	quiet := fs.Bool("quiet", false, "print the summary only, no status lines (and no logs)")
	insecure := fs.Bool("insecure", false, "run without a credential (MANAGER_INSECURE, GATE_INSECURE): plain RPC, Raft and gossip, the operator commands open to anyone; the summary says so. The default generates a cluster secret and an operator secret in -dir")
	fresh := fs.Bool("fresh", false, "remove the directory's previous data before starting")
	multidc := fs.Bool("multidc", false, "two datacenters, federated: dc1 (gates on -gate-ports) and dc2 (gates on -dc2-gate-ports), each with -managers managers")
	dc2GatePorts := fs.String("dc2-gate-ports", "8180,8181", "with -multidc: comma-separated HTTP ports of dc2's gates")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ports, ok := parsePorts(stderr, "-gate-ports", *gatePorts)
	if !ok {
		return 2
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(stderr, "oncelocal:", err)
		return 1
	}
	if *fresh {
		if err := os.RemoveAll(abs); err != nil {
			fmt.Fprintln(stderr, "oncelocal:", err)
			return 1
		}
	}
	opts := Options{BinDir: *bin, BaseDir: abs, Managers: *managers, Gates: len(ports), GatePorts: ports, Insecure: *insecure}
	if *logs {
		opts.Stdout = stdout
	}
	if *multidc {
		ports2, ok := parsePorts(stderr, "-dc2-gate-ports", *dc2GatePorts)
		if !ok {
			return 2
		}
		return runFederation(ctx, opts, []DatacenterSpec{
			{Name: "dc1", Managers: *managers, Gates: len(ports), GatePorts: ports},
			{Name: "dc2", Managers: *managers, Gates: len(ports2), GatePorts: ports2},
		}, stdout, stderr)
	}
	c, err := New(opts)
	if err != nil {
		fmt.Fprintln(stderr, "oncelocal:", err)
		return 1
	}
	readyCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = c.StartReady(readyCtx)
	cancel()
	if err != nil {
		fmt.Fprintln(stderr, "oncelocal:", err)
		return 1
	}
	defer c.Stop()
	c.WriteSummary(stdout, *logs)
	if *logs || *quiet {
		<-ctx.Done()
	} else {
		c.WatchStatus(ctx, stdout, time.Second)
	}
	fmt.Fprintln(stdout, "\nstopping...")
	return 0
}

// port is the port of the node's HTTP address.
func (n *Node) port() string {
	_, p, err := net.SplitHostPort(n.HTTPAddr)
	if err != nil {
		return n.HTTPAddr
	}
	return p
}

// parsePorts reads a comma-separated list of ports, or reports the flag.
func parsePorts(stderr io.Writer, flagName, list string) ([]int, bool) {
	var ports []int
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(p, "%d", &n); err != nil || n <= 0 || n > 65535 {
			fmt.Fprintf(stderr, "oncelocal: invalid %s %q: want ports from 1 to 65535\n", flagName, list)
			return nil, false
		}
		ports = append(ports, n)
	}
	return ports, true
}

// runFederation is `make run-multidc`: the datacenters of specs, federated,
// until ctx ends.
func runFederation(ctx context.Context, base Options, specs []DatacenterSpec, stdout, stderr io.Writer) int {
	f, err := NewFederation(base, specs)
	if err != nil {
		fmt.Fprintln(stderr, "oncelocal:", err)
		return 1
	}
	readyCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	err = f.StartReady(readyCtx)
	cancel()
	if err != nil {
		fmt.Fprintln(stderr, "oncelocal:", err)
		return 1
	}
	defer f.Stop()
	fmt.Fprintf(stdout, "\nonce is running: %d datacenters. Logs and data under %s\n", len(f.DCs), base.BaseDir)
	for _, c := range f.DCs {
		fmt.Fprintf(stdout, "  %s: %d managers, gates %v\n", c.opts.Datacenter, len(c.Managers), c.GateURLs())
	}
	fmt.Fprintf(stdout, `Try (a job in both datacenters; send it again through a dc2 gate for the same job_id):
  curl -si -XPOST localhost:%s/v1/jobs -H 'Idempotency-Key: host1.dc1:12345:1:0123456789abcdef' -d '{"type":"demo","payload":{"n":1},"datacenters":["dc1","dc2"]}'
Press Ctrl-C to stop.

`, f.DCs[0].Gates[0].port())
	<-ctx.Done()
	fmt.Fprintln(stdout, "\nstopping...")
	return 0
}
