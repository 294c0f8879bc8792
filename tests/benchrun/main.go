package benchrun

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/once-dev/once/internal/config"
)

// Exit codes of Main.
const (
	ExitOK     = 0
	ExitFailed = 1 // the cluster did not start, a workload could not run, or the report could not be written
	ExitUsage  = 2
)

// Main is `oncebench cluster` (make bench): it starts a local cluster, runs the
// benchmark workloads, stops the cluster, prints the table on stdout and
// writes the JSON report (-out). Progress goes to stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, path, code, ok := parseOptions("cluster", args, stderr)
	if !ok {
		return code
	}
	rep, runErr := Run(ctx, o)
	rep.Command = append([]string{"oncebench", "cluster"}, args...)
	return finish(rep, len(rep.Workloads) > 0, runErr, path, stdout, stderr, func(w io.Writer) error { return WriteTable(w, rep) })
}

// PeersMain is `oncebench peers` (make bench-peers): the peer workloads
// against a local once cluster, then against etcd (bin/oncepeer-etcd: three
// members and two fronts), one after the other; it prints once ÷ etcd per
// workload and writes the JSON report.
func PeersMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, path, code, ok := parseOptions("peers", args, stderr)
	if !ok {
		return code
	}
	rep, runErr := RunPeers(ctx, o)
	rep.Command = append([]string{"oncebench", "peers"}, args...)
	return finish(rep, len(rep.Rows) > 0, runErr, path, stdout, stderr, func(w io.Writer) error { return WritePeersTable(w, rep) })
}

// finish prints the table (when the run measured something or succeeded),
// writes the JSON report to path (if any) and returns the exit code.
func finish(rep any, measured bool, runErr error, path string, stdout, stderr io.Writer, table func(io.Writer) error) int {
	code := ExitOK
	if runErr != nil {
		fmt.Fprintf(stderr, "oncebench: %v\n", runErr)
		code = ExitFailed
	}
	if measured || runErr == nil {
		fmt.Fprintln(stdout)
		if err := table(stdout); err != nil {
			fmt.Fprintf(stderr, "oncebench: %v\n", err)
			code = ExitFailed
		}
	}
	if path != "" {
		if err := writeJSON(path, rep); err != nil {
			fmt.Fprintf(stderr, "oncebench: -out: %v\n", err)
			return ExitFailed
		}
		fmt.Fprintf(stderr, "oncebench: report written to %s\n", path)
	}
	return code
}

// parseOptions reads the flags both subcommands share. ok is false when
// the caller should return code (help, or a usage error).
func parseOptions(sub string, args []string, stderr io.Writer) (o Options, path string, code int, ok bool) {
	fs := flag.NewFlagSet("oncebench "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	defaults := DefaultWorkloads
	if sub == "peers" {
		defaults = PeerWorkloads
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: oncebench %s [-bin bin] [-build] [-out bench-results/] [-workloads %s] [flags]\n\n", sub, strings.Join(defaults, ","))
		fmt.Fprintf(stderr, "Starts %d managers and %d gates on 127.0.0.1, runs the workloads, stops the cluster, prints a table and writes a JSON report.\n", 3, 2)
		if sub == "peers" {
			fmt.Fprintf(stderr, "Then starts etcd (%s in -bin: 3 members, 2 fronts), runs the same workloads against it, and prints once ÷ etcd.\n", PeerBinary)
		}
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.BinDir, "bin", "bin", "directory holding the gate and manager binaries")
	fs.BoolVar(&o.Build, "build", false, "build cmd/gate and cmd/manager into -bin first (from the module containing the working directory)")
	fs.StringVar(&o.BaseDir, "dir", "", "directory for the cluster's logs/ and data/ (default bench-results/cluster-<time>)")
	fs.BoolVar(&o.KeepData, "keep-data", false, "keep the managers' data directories after the run")
	out := fs.String("out", "", "write the JSON report to this file; a directory (existing, or ending in /) gets <UTC time>.json")
	workloads := fs.String("workloads", strings.Join(defaults, ","), "comma-separated workloads, run in this order")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "length of each closed-loop workload")
	fs.DurationVar(&o.FailoverDuration, "failover-duration", 10*time.Second, "length of the failover workload (the leader is killed halfway)")
	fs.Float64Var(&o.FailoverRate, "failover-rate", 0, "failover open-loop rate in req/s (0: half the best unique rate of this run)")
	fs.IntVar(&o.StormSize, "storm", 1000, "concurrent requests of the storm")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "unrecorded warm-up before the workloads (negative: none)")
	fs.IntVar(&o.Managers, "managers", 3, "number of managers")
	fs.IntVar(&o.Gates, "gates", 2, "number of gates")
	fs.BoolVar(&o.Fast, "fast", false, "short Raft timings (election timeout 500ms) as in the end-to-end tests")
	fs.StringVar(&o.ProfileDir, "profile", "", "directory for CPU profiles of every manager, the gates and the load generator during each workload")
	env := multiFlag{}
	fs.Var(&env, "env", "NAME=value added to every process's environment (repeatable), e.g. -env MANAGER_RAFT_MAX_APPEND_ENTRIES=1024")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, "", ExitOK, false
		}
		return o, "", ExitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "oncebench: unexpected argument %q\n", fs.Arg(0))
		return o, "", ExitUsage, false
	}
	o.Env = env
	o.Workloads = config.SplitList(*workloads)
	if err := checkWorkloads(o.Workloads); err != nil {
		fmt.Fprintf(stderr, "oncebench: -workloads: %v\n", err)
		return o, "", ExitUsage, false
	}
	for _, e := range o.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			fmt.Fprintf(stderr, "oncebench: -env %q: want NAME=value\n", e)
			return o, "", ExitUsage, false
		}
	}
	if o.Duration <= 0 || o.FailoverDuration <= 0 || o.StormSize < 1 || o.FailoverRate < 0 || o.Managers < 1 || o.Gates < 1 {
		fmt.Fprintln(stderr, "oncebench: -duration, -failover-duration, -storm, -managers and -gates must be positive, -failover-rate not negative")
		return o, "", ExitUsage, false
	}
	path, err := outPath(*out, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "oncebench: -out: %v\n", err)
		return o, "", ExitFailed, false
	}
	o.Progress = stderr
	return o, path, ExitOK, true
}

// outPath resolves -out: a directory (existing, or named with a trailing
// slash) receives <UTC time>.json.
func outPath(out string, now time.Time) (string, error) {
	if out == "" {
		return "", nil
	}
	dir := strings.HasSuffix(out, "/") || strings.HasSuffix(out, string(os.PathSeparator))
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		dir = true
	}
	if dir {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return "", err
		}
		return filepath.Join(out, now.UTC().Format("20060102T150405Z")+".json"), nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	return out, nil
}

// writeJSON writes the report atomically (a temporary file renamed).
func writeJSON(path string, rep any) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".oncebench-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	enc := json.NewEncoder(tmp)
	enc.SetIndent("", "  ")
	err = enc.Encode(rep)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	return err
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
