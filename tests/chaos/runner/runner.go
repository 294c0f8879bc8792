// Package runner runs one chaos test of once end to end: it starts a real
// cluster (three managers, two gates, from prebuilt binaries) with the
// managers' failpoints on and fast Raft timings, drives the chaos workload
// through both gates while the nemesis kills, pauses and partitions processes,
// heals the cluster, waits until it is ready, and runs the checker through the
// public API. The history (JSON lines) and the summary are written into the
// run's directory, so that a failure can be checked again offline (Recheck).
//
// `make chaos` runs it through tests/cmd/oncechaos (Main); the short form of
// `make test` through tests/e2e.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/once-dev/once/pkg/api"
	"github.com/once-dev/once/pkg/client"
	"github.com/once-dev/once/tests/chaos/checker"
	"github.com/once-dev/once/tests/chaos/history"
	"github.com/once-dev/once/tests/chaos/nemesis"
	"github.com/once-dev/once/tests/chaos/workload"
	"github.com/once-dev/once/tests/localcluster"
)

// Files of a run directory.
const (
	HistoryFile = "history.jsonl" // every request and every nemesis step, one JSON object per line
	SummaryText = "summary.txt"   // Summary.String()
	SummaryJSON = "summary.json"  // Summary as JSON (faults, answers, violations with their history lines)
	TokensFile  = "tokens"        // the gates' token file: "<token> <tenant>" lines
	ClusterDir  = "cluster"       // the cluster's logs/ and data/ (localcluster layout)
)

// Tenants are the tenants of every run and their bearer tokens: clients are
// spread over them, so keys are scoped by tenant as in production.
var Tenants = map[string]string{"acme": "chaos-token-acme", "globex": "chaos-token-globex"}

// Defaults of Options.
const (
	DefaultClients           = 8
	DefaultDuplicateRate     = 0.3
	DefaultSnapshotThreshold = 1024
	DefaultTrailingLogs      = 512
	DefaultSettle            = 3 * time.Second
	DefaultStartTimeout      = 90 * time.Second
)

// Options configures a run. Zero values take the defaults.
type Options struct {
	// Duration is the workload's window: clients start submissions and the
	// nemesis injects faults for this long. Required.
	Duration time.Duration
	// Seed makes the fault schedule and the workload's choices reproducible;
	// 0 draws one (it is in the Summary).
	Seed uint64
	// Clients is the number of logical clients (default 8).
	Clients int
	// DuplicateRate is the fraction of submissions also sent through the other
	// gate (default 0.3; negative: none).
	DuplicateRate float64
	// BaseDir receives the run: history.jsonl, summary.txt, summary.json,
	// tokens and cluster/{logs,data}. It must not hold an earlier run.
	// Required.
	BaseDir string
	// BinDir holds the gate and manager binaries (make build). Required: Run
	// builds nothing.
	BinDir string
	// FaultInterval is the mean quiet time between faults (default
	// nemesis.DefaultTimings.Interval); Timings sets the other durations
	// (its Interval is overridden by FaultInterval when that is set).
	FaultInterval time.Duration
	Timings       nemesis.Timings
	// Faults are the kinds to inject (default nemesis.AllKinds).
	Faults []nemesis.Kind
	// Rounds, when positive, ends the run after that many rounds of faults
	// (each kind once per round) or at Duration, whichever comes first; the
	// workload then runs Settle more on the healed cluster and is stopped.
	Rounds int
	Settle time.Duration
	// SnapshotThreshold and TrailingLogs are given to the managers (defaults
	// 1024 and 512: low, so that restarts go through snapshot restore and a
	// follower that was down may need InstallSnapshot).
	SnapshotThreshold, TrailingLogs int
	// Env is added to every process's environment after the run's own
	// settings (so it overrides them).
	Env []string
	// Logf receives progress lines: one per fault, a periodic count of
	// requests, the phases. Nil: silent.
	Logf func(format string, args ...any)
	// Verbose also sends every nemesis step to Logf.
	Verbose bool
	// Workers, when positive, runs that many pkg/client workers per tenant
	// alongside the workload (per datacenter, through its own gates, in a
	// MultiDC run: a job naming both runs in each): they lease every job,
	// heartbeat, and complete it, through the faults; after the other rules
	// (and rule (h)'s wait for the outboxes), rule (i) waits up to
	// WorkersWait (default 2 minutes) plus the largest clock skew injected
	// (either way: see checkWorkers) for every job of every datacenter to
	// be run to an end, and the summary counts the redeliveries.
	Workers     int
	WorkersWait time.Duration
	// MultiDC runs two federated datacenters, dc1 and dc2, each with three
	// managers and two gates: every submission names both and goes through
	// any of the four gates; the nemesis injects its faults into dc1, and
	// the datacenters are disconnected in turn by a real WAN cut (the
	// network between them, every process running) and by an outage of
	// dc2 (every manager SIGSTOPped for a while). The check runs the rules
	// per datacenter and rule (h) across them.
	MultiDC bool
	// Datacenters is the number of datacenters of a MultiDC run, dc1 to
	// dcN (default 2, at most 3). With three, the submissions mix lists:
	// a third name every datacenter, a third a strict subset (two of
	// them, or dc3 alone), a third omit the list (the job runs in one
	// home datacenter, found through claims in the others); a client
	// retries through a gate of another datacenter after a timeout or a
	// 5xx, as pkg/client fails over; and rules (j) and (k) check where
	// each job was admitted and ran. With two, every submission names
	// both and retries go to the next gate, as before.
	Datacenters int
}

// MaxDatacenters bounds Options.Datacenters.
const MaxDatacenters = 3

// datacenterNames are the names of the n datacenters of a MultiDC run.
func datacenterNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "dc" + strconv.Itoa(i+1)
	}
	return names
}

// datacenterSets are the lists a submission of a run of three or more
// datacenters draws from (workload.Config.DatacenterSets): every
// datacenter, each pair, the last datacenter alone (a job forwarded only
// to another datacenter than most gates'), and an omitted list, weighed so
// that a third name all, a third a subset and a third none.
func datacenterSets(names []string) [][]string {
	var subsets [][]string
	for i := range names {
		for j := i + 1; j < len(names); j++ {
			subsets = append(subsets, []string{names[i], names[j]})
		}
	}
	subsets = append(subsets, []string{names[len(names)-1]})
	var sets [][]string
	for range subsets {
		sets = append(sets, names, nil)
	}
	return append(sets, subsets...)
}

func (o *Options) validate() error {
	switch {
	case o.Duration <= 0:
		return errors.New("runner: Duration must be positive")
	case o.BaseDir == "":
		return errors.New("runner: BaseDir is required")
	case o.BinDir == "":
		return errors.New("runner: BinDir is required (make build puts the binaries in bin/)")
	case o.Clients < 0 || o.Rounds < 0 || o.FaultInterval < 0 || o.Settle < 0 || o.SnapshotThreshold < 0 || o.TrailingLogs < 0:
		return errors.New("runner: Clients, Rounds, FaultInterval, Settle, SnapshotThreshold and TrailingLogs must not be negative")
	case o.DuplicateRate > 1:
		return fmt.Errorf("runner: DuplicateRate %v is above 1", o.DuplicateRate)
	case o.Datacenters != 0 && !o.MultiDC:
		return errors.New("runner: Datacenters needs MultiDC")
	case o.MultiDC && o.Datacenters != 0 && (o.Datacenters < 2 || o.Datacenters > MaxDatacenters):
		return fmt.Errorf("runner: Datacenters %d: a MultiDC run has 2 to %d", o.Datacenters, MaxDatacenters)
	}
	if o.MultiDC && o.Datacenters == 0 {
		o.Datacenters = 2
	}
	for _, b := range []string{"gate", "manager"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("runner: BinDir %s: %w (run make build)", o.BinDir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(o.BaseDir, HistoryFile)); err == nil {
		return fmt.Errorf("runner: %s already holds a run; use a new directory", o.BaseDir)
	}
	if o.Seed == 0 {
		o.Seed = NewSeed()
	}
	if o.Clients == 0 {
		o.Clients = DefaultClients
	}
	switch {
	case o.DuplicateRate == 0:
		o.DuplicateRate = DefaultDuplicateRate
	case o.DuplicateRate < 0:
		o.DuplicateRate = 0
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	if o.SnapshotThreshold == 0 {
		o.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if o.TrailingLogs == 0 {
		o.TrailingLogs = DefaultTrailingLogs
	}
	if o.FaultInterval > 0 {
		o.Timings.Interval = o.FaultInterval
	}
	if len(o.Faults) == 0 {
		o.Faults = nemesis.AllKinds
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return nil
}

// maxCommittedTTL is the longest IDEMPOTENCY_COMMITTED_TTL_SECONDS a run uses:
// the managers' default MANAGER_JOB_RETENTION_SECONDS, which must not be
// shorter.
const maxCommittedTTL = 24 * time.Hour

// committedTTL is the IDEMPOTENCY_COMMITTED_TTL_SECONDS of a run: long enough
// that every entry outlives the run and its check, so the checker can require
// every key answered 201 to still have its entry (checker.Config.RequireKeys),
// which requireKeys reports.
func committedTTL(d time.Duration) (ttl time.Duration, requireKeys bool) {
	want := 2*d + 30*time.Minute
	return min(max(want, time.Hour), maxCommittedTTL), want <= maxCommittedTTL
}

// Run runs one chaos test as Options say and returns its Summary. Violations
// are in the Summary, not in the error; the error says that the run itself
// went wrong: the cluster did not start or recover, a process exited on its
// own, the checker could not read the cluster, a file could not be written.
// Whatever happens after the cluster started, Run stops every process before
// it returns and writes what it has into BaseDir.
func Run(ctx context.Context, o Options) (sum Summary, err error) {
	if err := o.validate(); err != nil {
		return Summary{}, err
	}
	logf := o.Logf
	sum = Summary{Seed: o.Seed, Dir: o.BaseDir, Duration: o.Duration, Clients: o.Clients, Faults: map[nemesis.Kind]int{}}
	began := time.Now()
	defer func() {
		sum.Elapsed = time.Since(began)
		if err != nil {
			sum.Errors = append(sum.Errors, err.Error())
		}
		if werr := sum.write(o.BaseDir); werr != nil {
			err = errors.Join(err, werr)
		}
	}()

	if err := os.MkdirAll(o.BaseDir, 0o755); err != nil {
		return sum, err
	}
	tokens := filepath.Join(o.BaseDir, TokensFile)
	if err := writeTokens(tokens); err != nil {
		return sum, err
	}
	ttl, requireKeys := committedTTL(o.Duration)
	base := localcluster.Options{
		BinDir: o.BinDir, BaseDir: filepath.Join(o.BaseDir, ClusterDir), Managers: 3, Gates: 2,
		Failpoints: true, Fast: true,
		Env: append([]string{
			"MANAGER_LOG_LEVEL=info", "GATE_LOG_LEVEL=info",
			"IDEMPOTENCY_COMMITTED_TTL_SECONDS=" + strconv.Itoa(int(ttl/time.Second)),
			"IDEMPOTENCY_MAX_ENTRIES=10000000",
		}, o.Env...),
		ManagerEnv: []string{
			"MANAGER_RAFT_SNAPSHOT_THRESHOLD=" + strconv.Itoa(o.SnapshotThreshold),
			"MANAGER_RAFT_TRAILING_LOGS=" + strconv.Itoa(o.TrailingLogs),
		},
		GateEnv:   []string{"GATE_TOKEN_FILE=" + tokens},
		GateToken: Tenants[sortedKeys(Tenants)[0]],
	}
	var (
		dcs   []*localcluster.Cluster // dcs[0] takes the nemesis's faults
		start func(context.Context) error
		stop  func()
		names []string // the datacenters of a MultiDC run
		fed   *localcluster.Federation
	)
	wcfg := workload.Config{Tokens: Tenants, Clients: o.Clients, Duration: o.Duration,
		DuplicateRate: o.DuplicateRate, Seed: o.Seed}
	if o.MultiDC {
		// A forward gives up before an outage ends: jobs admitted in one
		// datacenter only, for the outboxes to carry, and (with the short
		// pending wait of a run of three datacenters, below) 503s, retried
		// by the clients. With the default pending wait the gate's deadline
		// is 33 s and a disconnection ends in client timeouts instead.
		base.GateEnv = append(base.GateEnv, "GATE_FORWARD_TIMEOUT_SECONDS=3")
		names = datacenterNames(o.Datacenters)
		if len(names) > 2 {
			// A gate's deadline for a submission is the forward timeout
			// plus the pending wait (30 s by default): with the default, a
			// gate facing a cut-off datacenter holds the request past the
			// clients' 5 s timeout until the cut heals, and never answers
			// 503 (the first three-datacenter run, 3 minutes: 142 timeouts, no
			// 503). A 1 s wait, in every process of the run so the managers'
			// settings agree, makes it 4 s: gates answer 503 during a
			// disconnection and the clients fail over on it. Set before
			// the processes are laid out; Env given to the run overrides it.
			base.Env = append([]string{"IDEMPOTENCY_PENDING_WAIT_TIMEOUT=1"}, base.Env...)
		}
		var specs []localcluster.DatacenterSpec
		for _, dc := range names {
			specs = append(specs, localcluster.DatacenterSpec{Name: dc, Managers: 3, Gates: 2})
		}
		f, err := localcluster.NewFederation(base, specs)
		if err != nil {
			return sum, err
		}
		dcs, start, stop, fed = f.DCs, f.StartReady, f.Stop, f
		if len(names) == 2 {
			wcfg.Datacenters = names
		} else {
			wcfg.DatacenterSets = datacenterSets(names)
			for i, dc := range f.DCs {
				for range dc.GateURLs() {
					wcfg.GateDatacenters = append(wcfg.GateDatacenters, names[i])
				}
			}
		}
		logf("starting %d datacenters (%v), each with 3 managers and 2 gates; logs under %s", len(names), names, base.BaseDir)
	} else {
		c, err := localcluster.New(base)
		if err != nil {
			return sum, err
		}
		dcs, start, stop = []*localcluster.Cluster{c}, c.StartReady, c.Stop
		logf("starting 3 managers and 2 gates; logs in %s", filepath.Join(o.BaseDir, ClusterDir, "logs"))
	}
	c := dcs[0]
	var gateURLs []string
	for _, dc := range dcs {
		gateURLs = append(gateURLs, dc.GateURLs()...)
	}
	logf("seed %d (reproduce the schedule with -seed %d); run directory %s", o.Seed, o.Seed, o.BaseDir)
	sctx, cancel := context.WithTimeout(ctx, DefaultStartTimeout)
	err = start(sctx)
	cancel()
	if err != nil {
		return sum, fmt.Errorf("runner: the cluster did not start: %w", err)
	}
	defer stop()

	rec := history.NewRecorder()
	sum.Start = rec.Start()
	wcfg.GateURLs = gateURLs
	w, err := workload.New(wcfg)
	if err != nil {
		return sum, err
	}
	ncfg := nemesis.Config{
		Seed: o.Seed, Kinds: o.Faults, Timings: o.Timings, Rounds: o.Rounds, Recorder: rec,
		OnEvent: func(e nemesis.Event) { logf("fault %s", e) },
	}
	if o.Verbose {
		ncfg.Logf = func(format string, args ...any) { logf("nemesis "+format, args...) }
	}
	nem, err := nemesis.New(c, ncfg)
	if err != nil {
		return sum, err
	}

	logf("running the workload (%d clients, %d gates) and the nemesis (%v) for %v", o.Clients, len(gateURLs), kindNames(o.Faults), o.Duration)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	nctx, ncancel := context.WithTimeout(ctx, o.Duration)
	defer ncancel()
	type wres struct {
		st  workload.Stats
		err error
	}
	wdone := make(chan wres, 1)
	go func() {
		st, err := w.Run(wctx, rec)
		wdone <- wres{st, err}
	}()
	ndone := make(chan error, 1)
	go func() { ndone <- nem.Run(nctx) }()
	outagesDone := make(chan map[nemesis.Kind]int, 1)
	if o.MultiDC {
		go func() { outagesDone <- outages(nctx, fed, rec, o.Timings, o.Seed, logf) }()
	} else {
		outagesDone <- nil
	}

	// Workers consume each datacenter's copy of the jobs through its own
	// gates (a job naming two datacenters runs in each), each
	// datacenter's runs counted apart.
	runs := make([]checker.Runs, len(dcs))
	var stops []func()
	if o.Workers > 0 {
		for i, dc := range dcs {
			stops = append(stops, startWorkers(ctx, dc.GateURLs(), o.Workers, &runs[i], o.Seed+uint64(i), logf))
		}
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()

	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	var nerr error
	var wr wres
	nemesisDone, workloadDone := false, false
	var settle <-chan time.Time
	for !nemesisDone || !workloadDone {
		select {
		case nerr = <-ndone:
			nemesisDone = true
			switch {
			case nerr != nil:
				logf("nemesis: %v; stopping the workload", nerr)
				wcancel()
			case !workloadDone && o.Rounds > 0 && time.Since(rec.Start()) < o.Duration:
				logf("%d rounds of faults done; the workload runs %v more on the healed cluster", o.Rounds, o.Settle)
				t := time.NewTimer(o.Settle)
				defer t.Stop()
				settle = t.C
			default:
				logf("faults over; the cluster is healed; waiting for the submissions in flight")
			}
		case wr = <-wdone:
			workloadDone = true
			sum.Ran = time.Since(rec.Start())
			if !nemesisDone {
				// The workload ends at Duration, like the nemesis, unless
				// ctx ended: then the nemesis is ending too.
				ncancel()
			}
		case <-settle:
			wcancel()
		case <-progress.C:
			logf("[%7.1fs] %d requests, %d faults", time.Since(rec.Start()).Seconds(), rec.Len(), len(nem.Events()))
		}
	}
	ncancel()
	for k, n := range <-outagesDone {
		if n > 0 {
			sum.Faults[k] = n
		}
	}
	sum.Workload = wr.st
	sum.Events = nem.Events()
	sum.PortClashes = nem.PortClashes()
	for _, e := range sum.Events {
		sum.Faults[e.Kind]++
	}
	ops := rec.Ops()
	sum.countAnswers(ops)
	if err := writeHistory(filepath.Join(o.BaseDir, HistoryFile), ops); err != nil {
		return sum, err
	}
	if wr.err != nil {
		return sum, wr.err
	}
	if err := ctx.Err(); err != nil {
		// Interrupted (Ctrl-C, a test's deadline): the history is saved; the
		// check is left to oncechaos -recheck.
		return sum, fmt.Errorf("runner: interrupted after %v: %w", time.Since(rec.Start()).Round(time.Second), err)
	}

	// The nemesis healed the cluster when it stopped; make sure of it before
	// reading (also after a nemesis error: a check is still worth having).
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), nemesis.DefaultRecoveryTimeout)
	herr := nem.Heal(hctx)
	hcancel()
	sum.PortClashes = nem.PortClashes()
	if herr != nil {
		nerr = errors.Join(nerr, herr)
	}
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Minute)
	defer ccancel()
	if !o.MultiDC {
		logf("checking %d requests through %s", sum.Requests, c.GateURLs()[0])
		cfg := checker.Config{GateURL: c.GateURLs()[0], Tokens: Tenants, RequireKeys: requireKeys, Start: rec.Start()}
		res, cerr := checker.Check(cctx, cfg, ops)
		if cerr == nil && o.Workers > 0 {
			cerr = checkWorkers(cctx, &sum, &res, []checker.Config{cfg}, runs, o.WorkersWait, logf)
		}
		if cerr == nil {
			sum.Check = &res
		}
		return sum, errors.Join(nerr, cerr)
	}
	// Where every key's job belongs, and rules (h), (j) and (k) across the
	// datacenters, giving the outboxes time to finish; then every
	// datacenter against the rules, through one of its own gates, for the
	// keys whose job belongs there.
	// The counts: the history's, and the cluster's summed over the
	// datacenters.
	res := checker.Result{Checked: checker.CheckHistory(ops).Checked}
	var cfgs []checker.Config
	for i, dc := range dcs {
		cfgs = append(cfgs, checker.Config{GateURL: dc.GateURLs()[0], Tokens: Tenants, RequireKeys: requireKeys, Datacenter: names[i]})
	}
	logf("checking where every key's job is in %v (waiting up to %v for the outboxes)", names, federationWait)
	fr, places, cerr := checker.CheckFederationPlaces(cctx, cfgs, ops, federationWait)
	if cerr != nil {
		return sum, errors.Join(nerr, cerr)
	}
	sum.Homes = places.Homes()
	for i := range cfgs {
		cfgs[i].Places = places
		logf("checking %d requests in %s through %s", sum.Requests, names[i], cfgs[i].GateURL)
		r, cerr := checker.Check(cctx, cfgs[i], ops)
		if cerr != nil {
			return sum, errors.Join(nerr, fmt.Errorf("checking %s: %w", names[i], cerr))
		}
		for _, v := range r.Violations {
			v.Detail = names[i] + ": " + v.Detail
			res.Violations = append(res.Violations, v)
		}
		c := &res.Checked
		c.JobsListed += r.Checked.JobsListed
		c.JobsFetched += r.Checked.JobsFetched
		c.JobsNotFound += r.Checked.JobsNotFound
		c.KeysFound += r.Checked.KeysFound
		c.KeysNotFound += r.Checked.KeysNotFound
	}
	res.Violations = append(res.Violations, fr.Violations...)
	if o.Workers > 0 {
		// After the outboxes: the jobs they carried must run too; and each
		// job where it was admitted, nowhere else.
		if cerr := checkWorkers(cctx, &sum, &res, cfgs, runs, o.WorkersWait, logf); cerr != nil {
			return sum, errors.Join(nerr, cerr)
		}
		rp := make([]*checker.Runs, len(runs))
		for i := range runs {
			rp[i] = &runs[i]
		}
		res.Violations = append(res.Violations, checker.CheckRunPlaces(places, names, rp, ops).Violations...)
	}
	sum.Check = &res
	return sum, nerr
}

// checkWorkers checks rule (i) in each datacenter of cfgs (its runs[i]),
// adding the violations (named by datacenter in a multi-datacenter run) to
// res and the counts of every datacenter to sum.Workers. It waits up to
// wait (default 2 minutes) plus the largest clock skew injected: a leader
// whose clock jumped forward may stamp leases with it before its group's
// view notices (docs/ledger.md, "Ledger time"); ledger time then stands
// still until real time catches up, and so do those leases: a lease whose
// holder never learnt of it ends only then. Delivery is delayed by the
// skew, not lost. A backward skew counts too: its removal is a forward jump
// of the same size (a multi-datacenter run found a manager set 8m48s back,
// made leader the moment its clock was restored, whose stamps ran ~4.5
// minutes ahead until its view caught up; managers now correct their view
// for steps of their own clock, docs/ledger.md, and the wait stays as a
// bound).
func checkWorkers(ctx context.Context, sum *Summary, res *checker.Result, cfgs []checker.Config, runs []checker.Runs, wait time.Duration, logf func(string, ...any)) error {
	wait = workersWait(wait, sum.Events)
	var all checker.WorkerCounts
	for i, cfg := range cfgs {
		where := ""
		if cfg.Datacenter != "" {
			where = " in " + cfg.Datacenter
		}
		logf("checking that the workers ran every job to an end%s (waiting up to %v)", where, wait)
		wres, wc, err := checker.CheckWorkers(ctx, cfg, &runs[i], wait)
		if err != nil {
			return fmt.Errorf("checking the workers%s: %w", where, err)
		}
		for _, v := range wres.Violations {
			if cfg.Datacenter != "" {
				v.Detail = cfg.Datacenter + ": " + v.Detail
			}
			res.Violations = append(res.Violations, v)
		}
		all.Jobs += wc.Jobs
		all.Runs += wc.Runs
		all.Redeliveries += wc.Redeliveries
	}
	sum.Workers = &all
	return nil
}

// workersWait is how long rule (i) waits: wait (default 2 minutes) plus the
// largest clock skew of events, forward or back (checkWorkers).
func workersWait(wait time.Duration, events []nemesis.Event) time.Duration {
	if wait <= 0 {
		wait = 2 * time.Minute
	}
	var skew time.Duration
	for _, e := range events {
		skew = max(skew, e.Skew, -e.Skew)
	}
	return wait + skew
}

func kindNames(kinds []nemesis.Kind) string {
	s := ""
	for i, k := range kinds {
		if i > 0 {
			s += ","
		}
		s += string(k)
	}
	return s
}

func writeTokens(path string) error {
	var b []byte
	for _, t := range sortedKeys(Tenants) {
		b = append(b, Tenants[t]+" "+t+"\n"...)
	}
	return os.WriteFile(path, b, 0o600)
}

func writeHistory(path string, ops []history.Op) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := history.WriteJSONL(f, ops); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// write saves the summary as text and JSON.
func (s *Summary) write(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return nil // nothing was created: nothing to write into
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return errors.Join(
		os.WriteFile(filepath.Join(dir, SummaryJSON), append(b, '\n'), 0o644),
		os.WriteFile(filepath.Join(dir, SummaryText), []byte(s.String()+"\n"), 0o644),
	)
}

// startWorkers runs n pkg/client workers per tenant against the gates until
// the returned stop is called: each handler records its run, and the
// attempt it runs, in runs and completes the job after a few milliseconds
// (drawn from seed) with a result naming the attempt; their transport
// (completionsSeen) records in runs each completion answered recorded.
func startWorkers(ctx context.Context, gates []string, n int, runs *checker.Runs, seed uint64, logf func(string, ...any)) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, tenant := range sortedKeys(Tenants) {
		for w := range n {
			c, err := client.New(gates, client.Options{Token: Tenants[tenant], MaxAttempts: 1000, MaxBackoff: time.Second, AttemptTimeout: 5 * time.Second,
				HTTPClient: &http.Client{Transport: completionsSeen{next: client.NewTransport(), runs: runs}}})
			if err != nil {
				logf("worker %s/%d: %v", tenant, w, err)
				continue
			}
			rng := rand.New(rand.NewPCG(seed, uint64(i*n+w)))
			var mu sync.Mutex
			wg.Go(func() {
				err := c.Run(wctx, client.WorkerOptions{Concurrency: 4, LeaseFor: 5 * time.Second, Wait: 2 * time.Second,
					Worker: fmt.Sprintf("chaos-%s-%d", tenant, w)},
					func(ctx context.Context, job api.Job, attempt int) (any, error) {
						runs.AddAttempt(job.JobID, attempt)
						mu.Lock()
						d := time.Duration(rng.IntN(10)) * time.Millisecond
						mu.Unlock()
						select {
						case <-ctx.Done():
							return nil, ctx.Err()
						case <-time.After(d):
						}
						return map[string]any{"ok": true, "attempt": attempt}, nil
					})
				if err != nil {
					logf("worker %s/%d stopped: %v", tenant, w, err)
				}
			})
		}
	}
	return func() {
		cancel()
		wg.Wait()
	}
}
