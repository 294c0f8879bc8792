// Package benchrun is `make bench`: it starts a local once cluster as real
// processes (tests/localcluster: three managers, two gates), runs the
// benchmark workloads against it with tests/loadgen, measures the cluster
// around each workload (Raft entries per submission from the managers' commit
// index, fsyncs from their log-batch counters, CPU and RSS from /proc, the
// gates' counters), kills the manager leader in the failover workload, stops
// the cluster, prints a table and writes a JSON report.
//
// It is the oncebench command's cluster subcommand; Run is the entry point for
// programs and tests.
package benchrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/tests/loadgen"
	"github.com/once-dev/once/tests/localcluster"
)

// Options configures a benchmark run. Zero values take the defaults noted.
type Options struct {
	// BinDir holds the gate and manager binaries (default "bin").
	BinDir string
	// Build compiles cmd/gate and cmd/manager into BinDir first, from the
	// module that contains the working directory.
	Build bool
	// BaseDir receives the cluster's logs/ and data/ (default: a new
	// bench-results/cluster-<time> directory). Data is removed at the end
	// unless KeepData; logs stay.
	BaseDir  string
	KeepData bool

	Managers, Gates int // default 3 and 2

	// Workloads to run, in order (default DefaultWorkloads).
	Workloads []string
	// Duration of each closed-loop workload (default 5s).
	Duration time.Duration
	// FailoverDuration is the failover run's length; the leader is killed
	// halfway (default 10s).
	FailoverDuration time.Duration
	// FailoverRate is the failover run's open-loop rate; 0: half the best
	// 2xx rate of the unique workloads that ran before it.
	FailoverRate float64
	// StormSize is the storm's number of concurrent requests (default 1000).
	StormSize int
	// Warmup is an unrecorded unique-key run before the workloads (default
	// 1s; negative: none).
	Warmup time.Duration

	// Env, ManagerEnv and GateEnv are added to the processes' environments
	// after the benchmark's own settings (benchEnv), so they win.
	Env, ManagerEnv, GateEnv []string
	// Fast uses localcluster's short Raft and gossip timings.
	Fast bool

	// ProfileDir, when set, receives a CPU profile of each manager (the
	// leader and the followers), of each gate (if it serves /debug/pprof) and of the load generator for
	// every workload but the storm: <dir>/<workload>-<node>.pprof. The
	// managers are started with MANAGER_PPROF=true, the gates with
	// GATE_PPROF=true.
	ProfileDir string

	// Progress receives one line per step (default: discarded).
	Progress io.Writer
}

// benchEnv are the settings every benchmark cluster runs with: room for every
// submission of a run in the ledgers, the gates' caches and the job table, so
// a workload measures the path and not the bounds. The TTLs stay at their
// defaults (nothing expires during a run).
var benchEnv = []string{
	"IDEMPOTENCY_LEDGER_MAX_ENTRIES=20000000",
	"MANAGER_MAX_QUEUED_JOBS=20000000",
	"IDEMPOTENCY_MAX_ENTRIES=1000000",
	"MANAGER_LOG_LEVEL=warn",
	"GATE_LOG_LEVEL=warn",
}

func (o *Options) setDefaults() {
	if o.BinDir == "" {
		o.BinDir = "bin"
	}
	if o.Managers == 0 {
		o.Managers = 3
	}
	if o.Gates == 0 {
		o.Gates = 2
	}
	if len(o.Workloads) == 0 {
		o.Workloads = DefaultWorkloads
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.FailoverDuration == 0 {
		o.FailoverDuration = 10 * time.Second
	}
	if o.StormSize == 0 {
		o.StormSize = 1000
	}
	if o.Warmup == 0 {
		o.Warmup = time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Report is the JSON document of a run.
type Report struct {
	Generated time.Time        `json:"generated"`
	Command   []string         `json:"command,omitempty"`
	Machine   Machine          `json:"machine"`
	Cluster   ClusterInfo      `json:"cluster"`
	Workloads []WorkloadResult `json:"workloads"`
	// CeilingReqPerSec is the ceiling workload's rate, when it ran.
	CeilingReqPerSec float64  `json:"ceiling_req_per_s,omitempty"`
	Targets          []Target `json:"targets"`
	// Error is set when the run stopped early; Workloads holds what finished.
	Error string `json:"error,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUModel   string `json:"cpu_model"`
	NumCPU     int    `json:"num_cpu"`
	MemBytes   int64  `json:"mem_bytes"`
	Kernel     string `json:"kernel"`
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	LoadBefore string `json:"loadavg_before"`
	LoadAfter  string `json:"loadavg_after"`
	// OtherCPUCores is the mean CPU used by processes outside the benchmark
	// during the workloads (cores); Shared is set when it exceeded 0.1 core.
	OtherCPUCores float64 `json:"other_cpu_cores"`
	Shared        bool    `json:"shared"`
}

// ClusterInfo describes the cluster under test.
type ClusterInfo struct {
	Managers          int      `json:"managers"`
	Gates             int      `json:"gates"`
	Fast              bool     `json:"fast_timings"`
	ElectionTimeoutMS float64  `json:"election_timeout_ms"`
	Env               []string `json:"env"`
	ManagerEnv        []string `json:"manager_env,omitempty"`
	GateEnv           []string `json:"gate_env,omitempty"`
	BaseDir           string   `json:"base_dir"`
	DataDirsOn        string   `json:"data_dirs_on,omitempty"` // file system type of the data directory
}

// WorkloadResult is one workload: what the clients saw and what the cluster did.
type WorkloadResult struct {
	Description string         `json:"description"`
	Load        loadgen.Result `json:"load"`
	Cluster     ClusterStats   `json:"cluster"`
	// RateBasis says where an open-loop rate came from.
	RateBasis string `json:"rate_basis,omitempty"`
	// CeilingRatio is Load.RequestsPerSec over the ceiling workload's of the
	// same run (absent when no ceiling ran, and on the ceiling itself).
	CeilingRatio float64 `json:"ceiling_ratio,omitempty"`
}

// ErrBinaries is returned when the gate or manager binary is missing.
var ErrBinaries = errors.New("gate or manager binary missing")

// Run runs the benchmark and returns its report. The error is non-nil when
// the cluster could not be started or a workload could not run; the report
// then holds what was measured before.
func Run(ctx context.Context, o Options) (rep Report, err error) {
	o.setDefaults()
	if err := checkWorkloads(o.Workloads); err != nil {
		return rep, err
	}
	say := func(format string, a ...any) { fmt.Fprintf(o.Progress, "oncebench: "+format+"\n", a...) }

	if o.Build {
		say("building gate and manager into %s", o.BinDir)
		if err := localcluster.Build(ctx, o.BinDir, false); err != nil {
			return rep, fmt.Errorf("-build: %w", err)
		}
	}
	for _, b := range []string{"gate", "manager"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return rep, fmt.Errorf("%w: %v (run make build, or pass -build)", ErrBinaries, err)
		}
	}
	if o.BaseDir == "" {
		o.BaseDir = filepath.Join("bench-results", "cluster-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	base, err := filepath.Abs(o.BaseDir)
	if err != nil {
		return rep, err
	}
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return rep, err
		}
		o.ManagerEnv = append([]string{"MANAGER_PPROF=true"}, o.ManagerEnv...)
		o.GateEnv = append([]string{"GATE_PPROF=true"}, o.GateEnv...)
	}
	env := append(append([]string{}, benchEnv...), o.Env...)
	rep = Report{
		Generated: time.Now().UTC().Round(time.Second),
		Machine: Machine{CPUModel: cpuModel(), NumCPU: runtime.NumCPU(), MemBytes: memTotal(), Kernel: kernelRelease(),
			GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, LoadBefore: loadAvg()},
		Cluster: ClusterInfo{Managers: o.Managers, Gates: o.Gates, Fast: o.Fast,
			ElectionTimeoutMS: float64(electionTimeout(o).Milliseconds()),
			Env:               env, ManagerEnv: o.ManagerEnv, GateEnv: o.GateEnv, BaseDir: base, DataDirsOn: fsType(base)},
	}
	defer func() {
		rep.Machine.LoadAfter = loadAvg()
		setCeilingRatios(&rep)
		rep.Targets = Evaluate(rep)
		if err != nil {
			rep.Error = err.Error()
		}
	}()

	c, err := localcluster.New(localcluster.Options{BinDir: o.BinDir, BaseDir: base, Managers: o.Managers, Gates: o.Gates,
		Env: env, ManagerEnv: o.ManagerEnv, GateEnv: o.GateEnv, Fast: o.Fast})
	if err != nil {
		return rep, err
	}
	say("starting %d managers and %d gates (logs: %s)", o.Managers, o.Gates, filepath.Join(base, "logs"))
	readyCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	err = c.StartReady(readyCtx)
	cancel()
	if err != nil {
		return rep, err
	}
	defer func() {
		say("stopping the cluster")
		c.Stop()
		if !o.KeepData {
			_ = os.RemoveAll(filepath.Join(base, "data"))
		}
	}()
	p := newProber(c)
	defer p.close()

	gates := c.GateURLs()
	if o.Warmup > 0 {
		say("warm-up: %s of unique keys, not recorded", o.Warmup)
		res, err := loadgen.Run(ctx, loadgen.Spec{Name: "warmup", Gates: gates, Keys: loadgen.KeysUnique,
			Concurrency: 32, Duration: loadgen.Duration(o.Warmup), ClientPrefix: "warmup"})
		if err != nil {
			return rep, err
		}
		if res.OK() == 0 {
			return rep, fmt.Errorf("warm-up: no request succeeded (status %v, errors %v %v; logs in %s)",
				res.Status, res.Codes, res.ErrorSamples, filepath.Join(base, "logs"))
		}
	}

	var other, otherWin float64
	for _, name := range o.Workloads {
		var basis string
		rate := 0.0
		if name == WFailover {
			rate, basis = failoverRate(o.FailoverRate, rep.Workloads)
		}
		spec, err := workloadSpec(name, o, rate)
		if err != nil {
			return rep, err
		}
		spec.Gates = gates
		var ceil *ceilingServer
		if isCeiling(name) {
			if ceil, err = startCeiling(); err != nil {
				return rep, fmt.Errorf("%s: %w", name, err)
			}
			spec.Gates = []string{ceil.url}
		}
		spec.ClientPrefix = strings.ReplaceAll(name, "-", "")
		say("running %s: %s", name, spec.Description)
		if ceil != nil {
			p.ceilingPID = ceil.pid()
		}
		w, err := runWorkload(ctx, c, p, spec, o)
		p.ceilingPID = 0
		if ceil != nil {
			err = errors.Join(err, ceil.close())
		}
		w.RateBasis = basis
		if err != nil {
			return rep, fmt.Errorf("%s: %w", name, err)
		}
		rep.Workloads = append(rep.Workloads, w)
		other += w.Cluster.CPUCores.Other * w.Cluster.WindowSec
		otherWin += w.Cluster.WindowSec
		l := w.Load.Latency
		say("  %s: %.0f req/s, p50 %.2f p99 %.2f p99.9 %.2f ms, %d 2xx of %d, %.2f Raft entries/submission",
			name, w.Load.RequestsPerSec, ms(l.P50US), ms(l.P99US), ms(l.P999US), w.Load.OK(), w.Load.Requests,
			w.Cluster.EntriesPerSubmission)
	}
	if otherWin > 0 {
		rep.Machine.OtherCPUCores = round(other/otherWin, 2)
		rep.Machine.Shared = rep.Machine.OtherCPUCores > 0.1
	}
	return rep, nil
}

// runWorkload runs one load spec with the measurements around it.
func runWorkload(ctx context.Context, c *localcluster.Cluster, p *prober, spec loadgen.Spec, o Options) (WorkloadResult, error) {
	w := WorkloadResult{Description: spec.Description}
	var fo *FailoverStats
	var killedMu sync.Mutex
	killed := map[string]*rpc.Status{}
	var killedNode *localcluster.Node

	smp := startSampler(c)
	if spec.Disrupt == loadgen.DisruptKillLeader {
		fo = &FailoverStats{ElectionTimeoutMS: float64(electionTimeout(o).Milliseconds())}
		spec.OnDisrupt = func(ctx context.Context) error {
			// A leader election may be under way at this instant (a slow
			// machine can cost a leader its lease): kill whoever leads next.
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			leader, err := c.WaitLeader(wctx)
			cancel()
			if err != nil {
				fo.Error = err.Error()
				return err
			}
			st, _ := p.status(ctx, leader) // its last counters
			smp.sampleNode(leader)
			if err := leader.Kill(); err != nil {
				fo.Error = err.Error()
				return err
			}
			at := time.Now()
			killedMu.Lock()
			killed[leader.Name], killedNode = st, leader
			killedMu.Unlock()
			fo.Killed = leader.Name
			// The election is measured to its end even when it outlasts the
			// load (ctx ends with the run): a busy machine may take longer to
			// elect than the run has left.
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			nl, err := c.WaitLeader(ectx)
			if err != nil {
				fo.Error = "no new leader: " + err.Error()
				return err
			}
			fo.NewLeader, fo.NewLeaderAfterMS = nl.Name, ms(time.Since(at).Microseconds())
			return nil
		}
	}

	var profWG sync.WaitGroup
	var profiles []string
	var profMu sync.Mutex
	profErr := func(err error) {
		profMu.Lock()
		defer profMu.Unlock()
		w.Cluster.Problems = append(w.Cluster.Problems, "profile: "+err.Error())
	}
	stopSelf := func() {}
	if o.ProfileDir != "" && spec.Keys != loadgen.KeysStorm {
		secs := max(int(time.Duration(spec.Duration).Seconds())-1, 1)
		// Every manager: the followers apply every entry too, and their
		// share of a submission's CPU is as large as the leader's.
		targets := append(slices.Clone(c.Managers), c.Gates...)
		for _, n := range targets {
			path := filepath.Join(o.ProfileDir, spec.Name+"-"+n.Name+".pprof")
			profWG.Go(func() {
				if err := fetchProfile(ctx, c, n, secs, path); err != nil {
					profErr(fmt.Errorf("%s: %w", n.Name, err))
					return
				}
				profMu.Lock()
				profiles = append(profiles, path)
				profMu.Unlock()
			})
		}
		path := filepath.Join(o.ProfileDir, spec.Name+"-loadgen.pprof")
		if f, err := os.Create(path); err != nil {
			profErr(err)
		} else if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			profErr(err)
		} else {
			stopSelf = func() {
				pprof.StopCPUProfile()
				f.Close()
				profMu.Lock()
				profiles = append(profiles, path)
				profMu.Unlock()
			}
		}
	}

	before := p.snapshot(ctx)
	var res loadgen.Result
	var err error
	if spec.Name == WWorkers {
		res, err = runWorkers(ctx, spec)
	} else {
		res, err = loadgen.Run(ctx, spec)
	}
	stopSelf()
	smp.finish()
	after := p.snapshot(ctx)
	profWG.Wait()
	if err != nil {
		return w, err
	}
	w.Load = res
	problems := w.Cluster.Problems
	killedMu.Lock()
	w.Cluster = compute(c, before, after, smp, res.Requests, res.Answered, res.Keys, killed)
	kn := killedNode
	killedMu.Unlock()
	w.Cluster.Problems = append(problems, w.Cluster.Problems...)
	w.Cluster.Profiles = profiles
	if fo != nil {
		if res.DisruptedAtMS != nil {
			fo.KilledAtMS = *res.DisruptedAtMS
		}
		if res.Gap != nil {
			fo.GapMS = res.Gap.LengthMS
			if fo.ElectionTimeoutMS > 0 {
				fo.GapElections = round(fo.GapMS/fo.ElectionTimeoutMS, 2)
			}
		}
		fo.DuplicateKeys = res.KeysWithMultipleJobIDs
		w.Cluster.Failover = fo
	}
	if kn != nil {
		// Bring the cluster back to full strength for whatever runs next.
		if err := kn.Start(); err != nil {
			w.Cluster.Problems = append(w.Cluster.Problems, "restarting "+kn.Name+": "+err.Error())
		}
	}
	return w, nil
}

// fetchProfile saves a CPU profile of secs seconds from a process's
// /debug/pprof/profile.
func fetchProfile(ctx context.Context, c *localcluster.Cluster, n *localcluster.Node, secs int, path string) error {
	url := c.NodeURL(n, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: time.Duration(secs+30) * time.Second, Transport: c.HTTPClient().Transport}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d (pprof not served?)", url, resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ms(us int64) float64 { return float64(us) / 1000 }
