package benchrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/once-dev/once/tests/loadgen"
	"github.com/once-dev/once/tests/localcluster"
)

func TestMain(m *testing.M) {
	ServeCeilingIfChild() // TestCeiling starts this binary as the ceiling server
	goleak.VerifyTestMain(m)
}

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	// The command name holds spaces and a ')': fields count from the last ')'.
	line := []byte("4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 100 1000000 500 18446744073709551615\n")
	got, err := parseProcStat(line)
	if err != nil || got != 325 {
		t.Errorf("parseProcStat = %d, %v; want 325 ticks", got, err)
	}
	if _, err := parseProcStat([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a short line was accepted")
	}
	// This process's own line parses.
	if _, err := procCPU(0); err != nil {
		t.Errorf("procCPU(self): %v", err)
	}
}

func TestParseProcStatus(t *testing.T) {
	t.Parallel()
	b := []byte("Name:\tmanager\nVmPeak:\t 1000 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t9\n")
	rss, hwm, err := parseProcStatus(b)
	if err != nil || rss != 10<<20 || hwm != 20<<20 {
		t.Errorf("parseProcStatus = %d %d %v; want 10 MiB, 20 MiB", rss, hwm, err)
	}
	if _, _, err := parseProcStatus([]byte("Name:\tx\n")); err == nil {
		t.Error("a status without VmRSS was accepted")
	}
	if rss, _, err := procMem(0); err != nil || rss <= 0 {
		t.Errorf("procMem(self) = %d, %v", rss, err)
	}
}

func TestParseProcCosts(t *testing.T) {
	t.Parallel()
	io := []byte("rchar: 100\nwchar: 200\nsyscr: 7\nsyscw: 5\nread_bytes: 0\n")
	if n, err := parseProcIO(io); err != nil || n != 12 {
		t.Errorf("parseProcIO = %d, %v; want 12", n, err)
	}
	if _, err := parseProcIO([]byte("rchar: 1\nsyscr: 2\n")); err == nil {
		t.Error("an io file without syscw was accepted")
	}
	status := []byte("Name:\tmanager\nvoluntary_ctxt_switches:\t40\nnonvoluntary_ctxt_switches:\t2\n")
	if n, err := parseSwitches(status); err != nil || n != 42 {
		t.Errorf("parseSwitches = %d, %v; want 42", n, err)
	}
	if _, err := parseSwitches([]byte("Name:\tx\n")); err == nil {
		t.Error("a status without context switch counts was accepted")
	}
	// This process's own counters read and grow with what it does.
	s0, err1 := procIO(0)
	w0, err2 := procSwitches(0)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := os.ReadFile("/proc/self/stat"); err != nil {
			t.Fatal(err)
		}
	}
	if s1, err := procIO(0); err != nil || s1 < s0+3 {
		t.Errorf("procIO(self) went from %d to %d (%v) over three reads", s0, s1, err)
	}
	if w1, err := procSwitches(0); err != nil || w1 < w0 {
		t.Errorf("procSwitches(self) went from %d to %d (%v)", w0, w1, err)
	}
}

func TestParseSystemStat(t *testing.T) {
	t.Parallel()
	b := []byte("cpu  100 5 50 1000 20 1 2 3 7 0\ncpu0 1 2 3 4\n")
	busy, total, err := parseSystemStat(b)
	// busy: user+nice+system+irq+softirq+steal = 100+5+50+1+2+3; total adds idle and iowait; guest is in user.
	if err != nil || busy != 161 || total != 1181 {
		t.Errorf("parseSystemStat = %d %d %v; want 161 1181", busy, total, err)
	}
	if _, _, err := parseSystemStat([]byte("intr 1 2 3\n")); err == nil {
		t.Error("a /proc/stat without a cpu line was accepted")
	}
}

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	text := `# HELP once_gate_cache_hits_total Hits.
# TYPE once_gate_cache_hits_total counter
once_gate_cache_hits_total{datacenter="dc1",node="gate1"} 12
once_gate_cache_hits_total{datacenter="dc1",node="gate}2"} 30
# TYPE once_gate_http_request_duration_seconds histogram
once_gate_http_request_duration_seconds_bucket{route="POST /v1/jobs",le="0.001"} 5
once_gate_http_request_duration_seconds_bucket{route="POST /v1/jobs",le="+Inf"} 40
once_gate_http_request_duration_seconds_sum{route="POST /v1/jobs"} 0.5
once_gate_http_request_duration_seconds_count{route="POST /v1/jobs"} 40 1700000000000
once_gate_http_request_duration_seconds_bucket{route="GET /v1/jobs/{id}",le="+Inf"} 2
once_gate_http_request_duration_seconds_sum{route="GET /v1/jobs/{id}"} 0.1
once_gate_http_request_duration_seconds_count{route="GET /v1/jobs/{id}"} 2
once_gate_replays_total 7
go_goroutines 26
`
	got := parseMetrics([]byte(text), gateCounter)
	want := map[string]float64{
		"once_gate_cache_hits_total":                    42,
		"once_gate_http_request_duration_seconds_count": 42,
		"once_gate_replays_total":                       7,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseMetrics = %v, want %v", got, want)
	}
}

func TestOutPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{
		"":                                  "",
		filepath.Join(dir, "a") + "/":       filepath.Join(dir, "a", "20261121T120000Z.json"),
		dir:                                 filepath.Join(dir, "20261121T120000Z.json"),
		filepath.Join(dir, "b", "run.json"): filepath.Join(dir, "b", "run.json"),
	} {
		got, err := outPath(in, now)
		if err != nil || got != want {
			t.Errorf("outPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "b")); err != nil || !fi.IsDir() {
		t.Errorf("outPath did not create the file's directory: %v", err)
	}
}

func TestWorkloadSpecsAreValid(t *testing.T) {
	t.Parallel()
	o := Options{}
	o.setDefaults()
	for _, name := range DefaultWorkloads {
		s, err := workloadSpec(name, o, 500)
		if err != nil {
			t.Fatal(err)
		}
		s.Gates = []string{"http://127.0.0.1:1"}
		n, err := s.Normalize()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if n.Name != name || n.Description == "" {
			t.Errorf("%s: name %q description %q", name, n.Name, n.Description)
		}
	}
	s, _ := workloadSpec(WStorm, o, 0)
	if s.Concurrency != 1000 || s.Requests != 1000 || s.Keys != loadgen.KeysStorm {
		t.Errorf("storm: %+v", s)
	}
	s, _ = workloadSpec(WFailover, o, 800)
	if s.Rate != 800 || s.DisruptAt != loadgen.Duration(5*time.Second) || s.Disrupt != loadgen.DisruptKillLeader || !s.Timeline {
		t.Errorf("failover: %+v", s)
	}
	if err := checkWorkloads([]string{WStorm, "nope"}); err == nil {
		t.Error("an unknown workload was accepted")
	}
}

func TestFailoverRate(t *testing.T) {
	t.Parallel()
	done := []WorkloadResult{
		{Load: loadgen.Result{Name: WUniqueC1, DurationSec: 2, Status: map[int]int64{201: 1000}}},
		{Load: loadgen.Result{Name: WUniqueC64, DurationSec: 2, Status: map[int]int64{201: 9000, 503: 500}}},
		{Load: loadgen.Result{Name: WCacheHits, DurationSec: 1, Status: map[int]int64{201: 90000}}},
	}
	if r, basis := failoverRate(0, done); r != 2250 || !strings.Contains(basis, WUniqueC64) {
		t.Errorf("failoverRate = %v (%s), want half of unique-c64's 4500 2xx/s", r, basis)
	}
	if r, _ := failoverRate(123, done); r != 123 {
		t.Errorf("a given rate was not used: %v", r)
	}
	if r, _ := failoverRate(0, nil); r != fallbackFailoverRate {
		t.Errorf("fallback %v", r)
	}
}

func TestElectionTimeout(t *testing.T) {
	t.Parallel()
	if d := electionTimeout(Options{}); d != time.Second {
		t.Errorf("default %v", d)
	}
	if d := electionTimeout(Options{Fast: true}); d != 500*time.Millisecond {
		t.Errorf("fast %v", d)
	}
	o := Options{Fast: true, Env: []string{"MANAGER_RAFT_ELECTION_TIMEOUT=2s"}, ManagerEnv: []string{"MANAGER_RAFT_ELECTION_TIMEOUT=300ms"}}
	if d := electionTimeout(o); d != 300*time.Millisecond {
		t.Errorf("manager env should win: %v", d)
	}
}

// report builds a report whose figures meet (or, with miss, miss) every target.
func report(miss bool) Report {
	lat := func(p50, p99, max float64) loadgen.Latency {
		return loadgen.Latency{Count: 1, P50US: int64(p50 * 1000), P99US: int64(p99 * 1000), MaxUS: int64(max * 1000)}
	}
	res := func(name string, ok int64, l loadgen.Latency) loadgen.Result {
		return loadgen.Result{Name: name, Requests: ok, DurationSec: 1, Status: map[int]int64{201: ok}, Latency: l}
	}
	// Met: unique 0.35 x, cache 0.95 x at 1.2 x the server's CPU, duplicates
	// 0.7 x, storm of 2 entries in 11 ms, gap 1.5 elections, 100 µs per
	// unique submission, load generator at 0.8 x the server.
	unique, cache, gateCPU, dups, gap, entries, stormMax, onceCPU, loadgenCPU := int64(3500), int64(9500), 12.0, int64(7000), 1500.0, uint64(2), 11.0, 100.0, 8.0
	if miss {
		unique, cache, gateCPU, dups, gap, entries, stormMax, onceCPU, loadgenCPU = 2000, 9500, 20, 5000, 2500, 3, 30, 500, 15
	}
	ceilingW := WorkloadResult{Load: res(WCeiling, 10000, lat(1, 2, 3)),
		Cluster: ClusterStats{CPUPerRequest: CPUPerRequest{Loadgen: loadgenCPU, Ceiling: 10}}}
	return Report{Workloads: []WorkloadResult{
		ceilingW,
		{Load: res(WUniqueC1, 500, lat(2, 5, 8)), Cluster: ClusterStats{EntriesPerNewKey: 2}},
		{Load: res(WUniqueC64, unique, lat(10, 40, 60)), Cluster: ClusterStats{CPUPerRequest: CPUPerRequest{Once: onceCPU, Gates: onceCPU / 2}}},
		{Load: res(WCacheHits, cache, lat(0.5, 3, 9)), Cluster: ClusterStats{CPUPerRequest: CPUPerRequest{Gates: gateCPU}}},
		{Load: res(WDuplicates, dups, lat(1, 4, 9))},
		{Load: loadgen.Result{Name: WStorm, Requests: 1000, DurationSec: 0.1, Status: map[int]int64{201: 1000}, MaxJobIDsPerKey: 1, Latency: lat(4, 6, stormMax)},
			Cluster: ClusterStats{RaftEntries: entries}},
		{Load: res(WFailover, 1000, lat(1, 2, 3)),
			Cluster: ClusterStats{Failover: &FailoverStats{GapMS: gap, ElectionTimeoutMS: 1000, GapElections: gap / 1000}}},
	}}
}

func TestEvaluate(t *testing.T) {
	t.Parallel()
	const targets = 7
	for _, miss := range []bool{false, true} {
		ts := Evaluate(report(miss))
		if len(ts) != targets {
			t.Fatalf("%d targets, want %d", len(ts), targets)
		}
		for _, tg := range ts {
			if tg.Met == nil {
				t.Errorf("%s: not evaluated (%s)", tg.Name, tg.Measured)
				continue
			}
			// The cache-hit rate is met in both; its CPU bound is not.
			if *tg.Met == miss {
				t.Errorf("miss=%v: %s met=%v (%s)", miss, tg.Name, *tg.Met, tg.Measured)
			}
			if want := map[bool]string{true: "met", false: "missed"}[*tg.Met]; tg.Verdict != want {
				t.Errorf("%s: verdict %q with met=%v", tg.Name, tg.Verdict, *tg.Met)
			}
		}
	}
	byName := func(ts []Target, name string) Target {
		for _, tg := range ts {
			if tg.Name == name {
				return tg
			}
		}
		t.Fatalf("no target %q", name)
		return Target{}
	}
	// A fast unique rate with a p99 over the bound is missed.
	rep := report(false)
	rep.Workloads[2].Load.Latency.P99US = 51_000
	if tg := byName(Evaluate(rep), "unique keys, 64 clients"); *tg.Met {
		t.Errorf("p99 51 ms met: %s", tg.Measured)
	}
	// Cache hits at the rate but with a gate costlier than 1.5 x the server.
	rep = report(false)
	rep.Workloads[3].Cluster.CPUPerRequest.Gates = 15.1
	if tg := byName(Evaluate(rep), "cache hits, 64 clients"); *tg.Met || tg.Value != 0.95 {
		t.Errorf("gate at 1.51 x the server met: %+v", tg)
	}
	// A design that spends one entry per submission must spend one on the storm.
	rep = report(false)
	rep.Workloads[1].Cluster.EntriesPerNewKey = 1
	if tg := byName(Evaluate(rep), "storm of 1000 on one key"); *tg.Met {
		t.Errorf("storm of 2 entries met a 1-entry-per-submission bound: %s", tg.Measured)
	}
	// The storm's bound is unique-c1's p50 + 10 ms: 12 ms here.
	rep = report(false)
	rep.Workloads[5].Load.Latency.MaxUS = 12_100
	if tg := byName(Evaluate(rep), "storm of 1000 on one key"); *tg.Met || tg.Bound != 12 {
		t.Errorf("storm slowest 12.1 ms met a 12 ms bound: %+v", tg)
	}
	// More jobs than keys is a duplicate even if no client saw two job ids.
	rep = report(false)
	rep.Workloads[6].Load.Keys = 1000
	rep.Workloads[6].Cluster.JobsCreated = 1001
	if tg := byName(Evaluate(rep), "leader failover"); *tg.Met {
		t.Errorf("failover with 1001 jobs for 1000 keys met: %s", tg.Measured)
	}
	// Without a ceiling nothing that is a ratio to it can be judged.
	rep = report(false)
	rep.Workloads = rep.Workloads[1:]
	for _, tg := range Evaluate(rep) {
		if tg.Unit == "× ceiling" && tg.Met != nil {
			t.Errorf("%s judged without a ceiling", tg.Name)
		}
	}
	for _, tg := range Evaluate(Report{}) {
		if tg.Met != nil || tg.Verdict != "not run" {
			t.Errorf("%s evaluated without its workload", tg.Name)
		}
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	rep := report(true)
	rep.Workloads[6].Cluster.Failover.Killed = "manager1"
	rep.Workloads[6].Load.Timeline = []loadgen.Bucket{{Second: 0, OK: 10}, {Second: 1}}
	rep.Workloads[1].Cluster.Nodes = []NodeStats{{Name: "gate1", Role: "gate", PeakRSSBytes: 30 << 20}, {Name: "manager1", Role: "manager", PeakRSSBytes: 90 << 20}}
	rep.Targets = Evaluate(rep)
	rep.Machine = Machine{NumCPU: 2, CPUModel: "test CPU", Shared: true, OtherCPUCores: 0.9}
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{"unique-c64", "entries/sub", "CPU µs/req", "ceiling server", "gate RSS MB", "  30  ", "MISSED", "killed manager1",
		"failover second", "SHARED: other processes used 0.90 cores"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	t.Parallel()
	rep := report(false)
	rep.Targets = Evaluate(rep)
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep, back) {
		t.Errorf("round trip changed the report:\n%+v\n%+v", rep, back)
	}
}

func TestMainUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-workloads", "nope"},
		{"-duration", "0s"},
		{"-env", "novalue"},
		{"extra"},
	} {
		var out, errb bytes.Buffer
		if code := Main(t.Context(), args, &out, &errb); code != ExitUsage {
			t.Errorf("Main(%q) = %d, want %d (stderr %s)", args, code, ExitUsage, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"-bin", t.TempDir(), "-dir", t.TempDir()}, &out, &errb); code != ExitFailed ||
		!strings.Contains(errb.String(), "binary missing") {
		t.Errorf("missing binaries: code %d, stderr %s", code, errb.String())
	}
}

// TestRunCluster runs a short benchmark against real processes: every
// workload, the leader killed in the failover, the report written.
func TestRunCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes (-short)")
	}
	bin := t.TempDir()
	if err := localcluster.Build(t.Context(), bin, false); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "results") + "/"
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	code := Main(ctx, []string{"-bin", bin, "-dir", filepath.Join(dir, "cluster"), "-out", out, "-fast",
		"-duration", "700ms", "-failover-duration", "4s", "-storm", "100", "-warmup", "300ms"}, &stdout, &stderr)
	t.Logf("stderr:\n%s\nstdout:\n%s", stderr.String(), stdout.String())
	if code != ExitOK {
		t.Fatalf("exit code %d", code)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "results", "*.json"))
	if len(files) != 1 {
		t.Fatalf("report files %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Workloads) != len(DefaultWorkloads) || rep.Error != "" {
		t.Fatalf("%d workloads, error %q", len(rep.Workloads), rep.Error)
	}
	for _, w := range rep.Workloads {
		if w.Load.OK() == 0 || w.Load.MaxJobIDsPerKey != 1 {
			t.Errorf("%s: %d 2xx, %d job ids per key", w.Load.Name, w.Load.OK(), w.Load.MaxJobIDsPerKey)
		}
		if len(w.Cluster.Nodes) != 5 || w.Cluster.CPUCores.Machine <= 0 {
			t.Errorf("%s: nodes %d, cpu %+v", w.Load.Name, len(w.Cluster.Nodes), w.Cluster.CPUCores)
		}
		for _, n := range w.Cluster.Nodes {
			if n.PeakRSSBytes <= 0 {
				t.Errorf("%s: %s has no RSS", w.Load.Name, n.Name)
			}
		}
	}
	if rep.CeilingReqPerSec <= 0 || find(rep, WUniqueC64).CeilingRatio <= 0 || !strings.Contains(stdout.String(), "vs the ceiling") {
		t.Errorf("ceiling %.0f req/s, unique-c64 ratio %v", rep.CeilingReqPerSec, find(rep, WUniqueC64).CeilingRatio)
	}
	u := find(rep, WUniqueC1).Cluster
	if u.EntriesPerNewKey < 1 || u.RaftEntries == 0 || u.AllFsyncsPerSec <= 0 || u.LeaderBefore == "" {
		t.Errorf("unique-c1 cluster stats %+v", u)
	}
	// Every role allocates, calls read/write and switches threads for a
	// unique submission: the gate reads the request and forwards it, the
	// leader writes its log and replicates, the followers append.
	for role, c := range map[string]Cost{"gates": u.CostPerRequest.Gates, "leader": u.CostPerRequest.Leader, "followers": u.CostPerRequest.Followers} {
		if c.Allocs <= 0 || c.Syscalls <= 0 || c.Switches <= 0 {
			t.Errorf("unique-c1: %s cost per request %+v", role, c)
		}
	}
	f := rep.Workloads[len(rep.Workloads)-1].Cluster.Failover
	if f == nil || f.Killed == "" || f.NewLeader == "" || f.Killed == f.NewLeader || f.Error != "" || f.DuplicateKeys != 0 {
		t.Errorf("failover %+v", f)
	}
	if !strings.Contains(stdout.String(), "verdict") || !strings.Contains(stdout.String(), "CPU µs/req") {
		t.Error("no targets table or no CPU per request table")
	}
	if c := find(rep, WCeiling).Cluster.CPUPerRequest; c.Ceiling <= 0 || c.Loadgen <= 0 {
		t.Errorf("ceiling CPU per request %+v: the ceiling server's or the generator's is missing", c)
	}
	if c := find(rep, WUniqueC64).Cluster.CPUPerRequest; c.Once <= 0 || c.Gates <= 0 || c.Leader <= 0 || c.Followers <= 0 {
		t.Errorf("unique-c64 CPU per request %+v", c)
	}
	if len(rep.Targets) != 7 {
		t.Errorf("%d targets in the JSON", len(rep.Targets))
	}
	for _, tg := range rep.Targets {
		if tg.Met == nil || tg.Verdict == "not run" || tg.Measured == "-" {
			t.Errorf("target %q not judged in a full run: %+v", tg.Name, tg)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster", "data")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory left behind: %v", err)
	}
}

// The ceiling handler answers the load generator like a gate (201, a job
// body with a job_id, Idempotent-Replayed), so the same generator measures it;
// the other workloads get their rate as a fraction of its rate.
func TestCeiling(t *testing.T) {
	t.Parallel()
	c, err := startCeiling()
	if err != nil {
		t.Fatal(err)
	}
	if c.pid() == os.Getpid() {
		t.Fatal("the ceiling server runs in the load generator's process")
	}
	cpu0, err := procCPU(c.pid())
	if err != nil {
		t.Fatal(err)
	}
	res, err := loadgen.Run(t.Context(), loadgen.Spec{Name: WCeiling, Gates: []string{c.url}, Keys: loadgen.KeysUnique,
		Concurrency: 4, Duration: loadgen.Duration(300 * time.Millisecond)})
	cpu1, perr := procCPU(c.pid())
	if cerr := c.close(); cerr != nil {
		t.Error(cerr)
	}
	if perr != nil || cpu1 <= cpu0 {
		t.Errorf("the ceiling server's CPU did not grow under load: %d -> %d ticks (%v)", cpu0, cpu1, perr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() == 0 || res.OK() != res.Requests || res.MaxJobIDsPerKey != 1 || res.RequestsPerSec <= 0 {
		t.Fatalf("against the bare handler: %d 2xx of %d, %d job ids per key, %.0f req/s", res.OK(), res.Requests, res.MaxJobIDsPerKey, res.RequestsPerSec)
	}
	if n := len(ceilingBody); n < 250 || n > 350 {
		t.Errorf("the ceiling body is %d bytes, want a job-sized ~300", n)
	}

	rep := Report{Workloads: []WorkloadResult{
		{Load: loadgen.Result{Name: WCeiling, RequestsPerSec: 10000}},
		{Load: loadgen.Result{Name: WUniqueC64, RequestsPerSec: 2500}},
	}}
	setCeilingRatios(&rep)
	if rep.CeilingReqPerSec != 10000 || rep.Workloads[1].CeilingRatio != 0.25 || rep.Workloads[0].CeilingRatio != 0 {
		t.Fatalf("ratios: ceiling %v, %v", rep.CeilingReqPerSec, rep.Workloads)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "unique-c64 0.250") {
		t.Errorf("the table lacks the ratio:\n%s", b.String())
	}
}
