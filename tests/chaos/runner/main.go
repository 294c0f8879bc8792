package runner

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/once-dev/once/tests/chaos/checker"
	"github.com/once-dev/once/tests/chaos/history"
	"github.com/once-dev/once/tests/chaos/nemesis"
	"github.com/once-dev/once/tests/localcluster"
)

// NewSeed draws a random non-zero seed.
func NewSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])>>1 + 1
}

// Main is tests/cmd/oncechaos: `make chaos`. It runs one chaos test (or, with
// -recheck, checks a saved run again), prints the summary on stdout and
// returns the exit code: 0 when the run completed with zero violations, 1 on
// any violation or error, 2 for bad flags.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("oncechaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: oncechaos [flags]            run a chaos test against a real local cluster
       oncechaos -recheck DIR [flags]  check a saved run again

`)
		fs.PrintDefaults()
	}
	duration := fs.Duration("duration", 10*time.Minute, "how long the workload and the nemesis run")
	seed := fs.Uint64("seed", 0, "seed of the fault schedule and the workload's choices (0: random; printed)")
	clients := fs.Int("clients", DefaultClients, "logical clients")
	dup := fs.Float64("dup", DefaultDuplicateRate, "fraction of submissions also sent through the other gate")
	dir := fs.String("dir", ".chaos", "directory under which each run gets its own directory (history, summary, logs, data)")
	bin := fs.String("bin", "bin", "directory holding the gate, manager, oncemanager-faults and oncegate-faults binaries (make build)")
	interval := fs.Duration("fault-interval", nemesis.DefaultTimings.Interval, "mean quiet time between two faults")
	faults := fs.String("faults", "all", "comma-separated fault kinds: "+kindNames(nemesis.AllKinds))
	rounds := fs.Int("rounds", 0, "stop after this many rounds of faults (every kind once per round); 0: run for -duration")
	workers := fs.Int("workers", 2, "pkg/client workers per tenant (per datacenter with -multidc) consuming the jobs through the faults; rule (i): every job run to an end; 0: none")
	verbose := fs.Bool("v", false, "print every nemesis step, not only one line per fault")
	multiDC := fs.Bool("multidc", false, "federated datacenters (dc1, dc2[, dc3]; 3 managers and 2 gates each): dc1 takes the faults, dc2 has outages; rules (h), (j), (k) checked across them")
	datacenters := fs.Int("datacenters", 2, "with -multidc: how many datacenters (2: every job names both; 3: jobs name all, a subset, or omit the list)")
	recheck := fs.String("recheck", "", "check the saved run in this directory again instead of running one")
	gate := fs.String("gate", "", "with -recheck: read the cluster through this gate URL (a cluster restarted from the run's data)")
	restart := fs.Bool("restart", false, "with -recheck: restart the run's cluster from its saved data directories and read through it")
	requireKeys := fs.Bool("require-keys", false, "with -recheck and a cluster: a key answered 201 must still have its entry (within the run's committed TTL)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "oncechaos: unexpected arguments %v\n", fs.Args())
		return 2
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, a...)...)
	}

	if *recheck != "" {
		res, err := Recheck(ctx, RecheckOptions{Dir: *recheck, GateURL: *gate, Restart: *restart, BinDir: *bin,
			RequireKeys: *requireKeys, Logf: logf})
		if err != nil {
			fmt.Fprintln(stderr, "oncechaos:", err)
			return 1
		}
		fmt.Fprintln(stdout, res.Summary())
		if !res.OK() {
			return 1
		}
		return 0
	}

	kinds, err := nemesis.ParseKinds(*faults)
	if err != nil {
		fmt.Fprintln(stderr, "oncechaos:", err)
		return 2
	}
	if *duration <= 0 || *clients <= 0 || *interval <= 0 || *rounds < 0 || *dup < 0 || *dup > 1 {
		fmt.Fprintln(stderr, "oncechaos: -duration, -clients and -fault-interval must be positive, -rounds not negative, -dup in [0, 1]")
		return 2
	}
	if *datacenters != 2 && (!*multiDC || *datacenters < 2 || *datacenters > MaxDatacenters) {
		fmt.Fprintf(stderr, "oncechaos: -datacenters needs -multidc and is 2 to %d\n", MaxDatacenters)
		return 2
	}
	ndc := 0
	if *multiDC {
		ndc = *datacenters
	}
	if *seed == 0 {
		*seed = NewSeed()
	}
	if *dup == 0 {
		*dup = -1 // Options: negative is none, zero is the default
	}
	runDir, err := filepath.Abs(filepath.Join(*dir, time.Now().UTC().Format("20060102-150405")+"-seed"+strconv.FormatUint(*seed, 10)))
	if err != nil {
		fmt.Fprintln(stderr, "oncechaos:", err)
		return 1
	}
	sum, err := Run(ctx, Options{
		Duration: *duration, Seed: *seed, Clients: *clients, DuplicateRate: *dup, BaseDir: runDir, BinDir: *bin,
		FaultInterval: *interval, Faults: kinds, Rounds: *rounds, Logf: logf, Verbose: *verbose, MultiDC: *multiDC,
		Workers: *workers, Datacenters: ndc,
	})
	if sum.Seed != 0 { // zero: the options were refused before anything ran
		fmt.Fprintln(stdout, sum.String())
	}
	if err != nil {
		fmt.Fprintln(stderr, "oncechaos:", err)
		return 1
	}
	if !sum.OK() {
		return 1
	}
	return 0
}

// RecheckOptions says how to check a saved run again.
type RecheckOptions struct {
	// Dir is the run's directory (history.jsonl, tokens, cluster/).
	Dir string
	// GateURL, when set, is a gate of a running cluster that holds the run's
	// data (see Restart): the full check reads through it.
	GateURL string
	// Restart starts the run's cluster again from its saved data directories
	// (binaries from BinDir), runs the full check through it, and stops it.
	Restart bool
	BinDir  string
	// RequireKeys is checker.Config.RequireKeys for a full check: set it only
	// within the run's committed TTL (an hour at least).
	RequireKeys bool
	Logf        func(format string, args ...any)
}

// Recheck checks a saved run again. Without a cluster (no GateURL, no
// Restart) it checks the rules that need only the recorded answers — (c),
// (d), (f) and (g) — with checker.CheckHistory; with one, all of them.
func Recheck(ctx context.Context, o RecheckOptions) (checker.Result, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	f, err := os.Open(filepath.Join(o.Dir, HistoryFile))
	if err != nil {
		return checker.Result{}, err
	}
	ops, err := history.ReadJSONL(f)
	f.Close()
	if err != nil {
		return checker.Result{}, err
	}
	gate := o.GateURL
	switch {
	case gate == "" && !o.Restart:
		o.Logf("checking %s against its recorded answers only (rules c, d, f, g)", o.Dir)
		return checker.CheckHistory(ops), nil
	case gate == "":
		c, err := restartSaved(ctx, o)
		if err != nil {
			return checker.Result{}, err
		}
		defer c.Stop()
		gate = c.GateURLs()[0]
	}
	o.Logf("checking %s through %s", o.Dir, gate)
	return checker.Check(ctx, checker.Config{GateURL: gate, Tokens: Tenants, RequireKeys: o.RequireKeys}, ops)
}

// restartSaved starts the cluster of a saved run from its data directories:
// the same names, data and token file, new ports.
func restartSaved(ctx context.Context, o RecheckOptions) (*localcluster.Cluster, error) {
	base := filepath.Join(o.Dir, ClusterDir)
	if _, err := os.Stat(filepath.Join(base, "data")); err != nil {
		return nil, fmt.Errorf("runner: no saved cluster to restart: %w", err)
	}
	c, err := localcluster.New(localcluster.Options{
		BinDir: o.BinDir, BaseDir: base, Managers: 3, Gates: 2, Fast: true,
		Env:     []string{"IDEMPOTENCY_COMMITTED_TTL_SECONDS=" + strconv.Itoa(int(maxCommittedTTL/time.Second)), "IDEMPOTENCY_MAX_ENTRIES=10000000"},
		GateEnv: []string{"GATE_TOKEN_FILE=" + filepath.Join(o.Dir, TokensFile)},
	})
	if err != nil {
		return nil, err
	}
	o.Logf("restarting the saved cluster from %s", base)
	sctx, cancel := context.WithTimeout(ctx, DefaultStartTimeout)
	defer cancel()
	if err := c.StartReady(sctx); err != nil {
		return nil, fmt.Errorf("runner: the saved cluster did not start: %w", err)
	}
	return c, nil
}
