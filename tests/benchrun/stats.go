package benchrun

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/tests/localcluster"
)

// ClusterStats is what the cluster did during one workload, measured outside
// the load generator: from the managers' /rpc/v1/status, the gates' /metrics
// and /proc.
type ClusterStats struct {
	// WindowSec is the time between the two snapshots the deltas come from
	// (it contains the load run plus the connection warm-up before it).
	WindowSec float64 `json:"window_s"`

	// RaftEntries is the growth of the highest commit index any manager
	// reports; per submission it is divided by the answered requests, per new
	// key by the distinct keys sent. A submission of a new key costs two
	// entries (Reserve, then Commit or Reject); a replay costs none.
	RaftEntries          uint64  `json:"raft_entries"`
	EntriesPerSubmission float64 `json:"raft_entries_per_submission"`
	EntriesPerNewKey     float64 `json:"raft_entries_per_new_key"`
	// JobsCreated is the growth of the leader's job count (after the
	// workload, from the leader then); with unique keys it must not exceed
	// the keys sent.
	JobsCreated int64 `json:"jobs_created"`

	// Fsyncs: every Raft log write batch (walstore StoreLogs) is one fsync,
	// counted by each manager (status log_batches). The leader's rate, all
	// managers' together, and how many entries the leader wrote per fsync.
	LeaderFsyncsPerSec float64 `json:"leader_fsyncs_per_s"`
	AllFsyncsPerSec    float64 `json:"all_fsyncs_per_s"`
	EntriesPerFsync    float64 `json:"raft_entries_per_leader_fsync"`

	LeaderBefore string `json:"leader_before"`
	LeaderAfter  string `json:"leader_after"`
	TermBefore   uint64 `json:"term_before"`
	TermAfter    uint64 `json:"term_after"`

	Nodes []NodeStats `json:"nodes"`

	// CPU in cores (CPU seconds per second of the window): the cluster's
	// processes by role, this process (the load generator), the ceiling
	// server (ceiling workload only), and everything else on the machine.
	// Other > 0 means the machine was shared.
	CPUCores CPUCores `json:"cpu_cores"`
	// CPUPerRequest is the same CPU in microseconds per answered request.
	CPUPerRequest CPUPerRequest `json:"cpu_us_per_request"`
	// CostPerRequest counts what each role's processes did per answered
	// request: heap allocations, read/write system calls and context
	// switches.
	CostPerRequest CostPerRequest `json:"cost_per_request"`

	// GateCounters are the growth of the gates' counters (summed over the
	// gates), e.g. once_gate_cache_hits_total.
	GateCounters map[string]float64 `json:"gate_counters,omitempty"`

	Failover *FailoverStats `json:"failover,omitempty"`
	// Profiles are the CPU profiles taken during the workload (-profile).
	Profiles []string `json:"profiles,omitempty"`
	// Problems are measurements that could not be taken.
	Problems []string `json:"problems,omitempty"`
}

// CPUCores splits the machine's CPU use during a workload.
type CPUCores struct {
	Gates     float64 `json:"gates"`
	Leader    float64 `json:"leader"`
	Followers float64 `json:"followers"`
	Loadgen   float64 `json:"loadgen"`
	Ceiling   float64 `json:"ceiling_server,omitempty"`
	Other     float64 `json:"other"`
	Machine   float64 `json:"machine"` // all of the above: busy CPUs
	NumCPU    int     `json:"num_cpu"`
}

// CPUPerRequest is CPU time per answered request, in microseconds, by role.
// Once is the gates, the leader and the followers together: what once itself
// spends on a request, without the load generator.
type CPUPerRequest struct {
	Gates     float64 `json:"gates"`
	Leader    float64 `json:"leader"`
	Followers float64 `json:"followers"`
	Once      float64 `json:"once"`
	Loadgen   float64 `json:"loadgen"`
	Ceiling   float64 `json:"ceiling_server,omitempty"`
}

// CostPerRequest is, per answered request, what the gates, the leader and
// the followers did (each role's processes together).
type CostPerRequest struct {
	Gates     Cost `json:"gates"`
	Leader    Cost `json:"leader"`
	Followers Cost `json:"followers"`
}

// Cost is a process's work counted in events: heap allocations (the Go
// runtime's go_memstats_mallocs_total on its /metrics), read- and
// write-class system calls (/proc/<pid>/io) and context switches of its
// threads (/proc/<pid>/task/*/status: a thread that blocks and is woken
// again, or is preempted).
type Cost struct {
	Allocs   float64 `json:"allocs"`
	Syscalls float64 `json:"rw_syscalls"`
	Switches float64 `json:"context_switches"`
}

func (c *Cost) add(o Cost) {
	c.Allocs += o.Allocs
	c.Syscalls += o.Syscalls
	c.Switches += o.Switches
}

func (c Cost) per(n int64) Cost {
	return Cost{Allocs: round(c.Allocs/float64(n), 1), Syscalls: round(c.Syscalls/float64(n), 2), Switches: round(c.Switches/float64(n), 2)}
}

// NodeStats is one process during a workload.
type NodeStats struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	PID    int    `json:"pid"`
	Leader bool   `json:"leader,omitempty"` // leader when the workload started
	Killed bool   `json:"killed,omitempty"`

	CPUSec     float64 `json:"cpu_s"`
	CPUCores   float64 `json:"cpu_cores"`
	CPUUSPerOp float64 `json:"cpu_us_per_request"`
	// RSS at the end (or at the kill) and the highest sampled (every 200 ms).
	RSSBytes     int64 `json:"rss_bytes"`
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// LogBatches is the manager's Raft log write batches (fsyncs) in the window.
	LogBatches uint64 `json:"log_batches,omitempty"`
	// Cost is what the process did in the window, counted (not for a
	// process killed during it).
	Cost *Cost `json:"cost,omitempty"`
}

// FailoverStats describes the kill of the failover workload.
type FailoverStats struct {
	Killed            string  `json:"killed"`
	KilledAtMS        float64 `json:"killed_at_ms"`
	NewLeader         string  `json:"new_leader"`
	NewLeaderAfterMS  float64 `json:"new_leader_after_ms"` // kill to a serving leader seen in /rpc/v1/status
	ElectionTimeoutMS float64 `json:"election_timeout_ms"`
	GapMS             float64 `json:"gap_ms"` // longest time without a 2xx answer (load generator)
	GapElections      float64 `json:"gap_election_timeouts"`
	DuplicateKeys     int64   `json:"duplicate_keys"` // keys answered with more than one job_id
	Error             string  `json:"error,omitempty"`
}

// nodeSnap is one process at one instant.
type nodeSnap struct {
	pid    int
	cpu    int64 // ticks
	rss    int64
	status *rpc.Status // managers; nil if unreachable
	// cost holds the counters read at this instant (not deltas); ok when
	// all three were read.
	cost   Cost
	costOK bool
}

// snapshot is the cluster at one instant.
type snapshot struct {
	at                time.Time
	sysBusy, sysTotal int64
	self              int64
	ceiling           int64 // the ceiling server's CPU ticks, when it runs
	nodes             map[string]nodeSnap
	gates             map[string]float64
}

// prober reads the cluster's processes and endpoints.
type prober struct {
	c      *localcluster.Cluster
	client *http.Client
	// ceilingPID is the ceiling server's process during the ceiling
	// workload, 0 otherwise.
	ceilingPID int
}

func newProber(c *localcluster.Cluster) *prober {
	// The cluster's transport: the managers' TLS and secret.
	return &prober{c: c, client: &http.Client{Timeout: 3 * time.Second, Transport: c.HTTPClient().Transport}}
}

func (p *prober) close() { p.client.CloseIdleConnections() }

// status reads a manager's full status.
func (p *prober) status(ctx context.Context, n *localcluster.Node) (*rpc.Status, error) {
	st, err := p.c.Status(ctx, n)
	if err != nil {
		return nil, err
	}
	return &st, nil
}

func (p *prober) get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %.200s", url, resp.StatusCode, b)
	}
	return b, nil
}

// gateCounter selects the gate metrics kept: once's own counters.
func gateCounter(name string) bool {
	return strings.HasPrefix(name, "once_") && (strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_count"))
}

// mallocsMetric is the Go runtime's count of heap allocations, which every
// process's /metrics carries (prometheus/client_golang's Go collector).
const mallocsMetric = "go_memstats_mallocs_total"

// snapshot reads every running process and endpoint. Unreachable pieces are
// left out (and show as problems in the stats).
func (p *prober) snapshot(ctx context.Context) snapshot {
	s := snapshot{at: time.Now(), nodes: map[string]nodeSnap{}, gates: map[string]float64{}}
	s.sysBusy, s.sysTotal, _ = systemCPU()
	s.self, _ = procCPU(0)
	if p.ceilingPID != 0 {
		s.ceiling, _ = procCPU(p.ceilingPID)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range p.c.All() {
		pid := n.PID()
		if pid == 0 || !n.Running() {
			continue
		}
		wg.Go(func() {
			ns := nodeSnap{pid: pid}
			ns.cpu, _ = procCPU(pid)
			ns.rss, _, _ = procMem(pid)
			sys, err1 := procIO(pid)
			sw, err2 := procSwitches(pid)
			var gm map[string]float64
			if n.Role == localcluster.RoleManager {
				ns.status, _ = p.status(ctx, n)
			}
			b, err3 := p.get(ctx, p.c.NodeURL(n, "/metrics"))
			if err3 == nil {
				gm = parseMetrics(b, func(name string) bool {
					return name == mallocsMetric || n.Role == localcluster.RoleGate && gateCounter(name)
				})
			}
			mallocs, ok := gm[mallocsMetric]
			delete(gm, mallocsMetric)
			ns.cost = Cost{Allocs: mallocs, Syscalls: float64(sys), Switches: float64(sw)}
			ns.costOK = ok && err1 == nil && err2 == nil
			mu.Lock()
			defer mu.Unlock()
			s.nodes[n.Name] = ns
			for k, v := range gm {
				s.gates[k] += v
			}
		})
	}
	wg.Wait()
	return s
}

// sampler follows the processes' RSS and CPU every interval during a
// workload, so a peak and a killed process's last figures are known.
type sampler struct {
	c    *localcluster.Cluster
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	peak map[int]int64    // pid -> highest RSS seen
	last map[int]nodeSnap // pid -> last reading
}

const sampleEvery = 200 * time.Millisecond

func startSampler(c *localcluster.Cluster) *sampler {
	s := &sampler{c: c, stop: make(chan struct{}), done: make(chan struct{}),
		peak: map[int]int64{}, last: map[int]nodeSnap{}}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

// sample reads every running process once.
func (s *sampler) sample() {
	for _, n := range s.c.All() {
		s.sampleNode(n)
	}
}

func (s *sampler) sampleNode(n *localcluster.Node) {
	pid := n.PID()
	if pid == 0 {
		return
	}
	cpu, err1 := procCPU(pid)
	rss, _, err2 := procMem(pid)
	if err1 != nil || err2 != nil {
		return // gone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last[pid] = nodeSnap{pid: pid, cpu: cpu, rss: rss}
	s.peak[pid] = max(s.peak[pid], rss)
}

func (s *sampler) finish() {
	close(s.stop)
	<-s.done
	s.sample()
}

func (s *sampler) lastOf(pid int) (nodeSnap, int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.last[pid]
	return l, s.peak[pid], ok
}

// compute derives the stats of a workload from the snapshots around it.
func compute(c *localcluster.Cluster, before, after snapshot, smp *sampler, requests, answered, keys int64, killed map[string]*rpc.Status) ClusterStats {
	var st ClusterStats
	win := after.at.Sub(before.at).Seconds()
	st.WindowSec = round(win, 3)
	if win <= 0 {
		return st
	}
	maxCommit := func(s snapshot) (idx uint64, leader string, term uint64, jobs int64) {
		for name, n := range s.nodes {
			if n.status == nil {
				continue
			}
			idx = max(idx, n.status.CommitIndex)
			if n.status.IsLeader {
				leader, term, jobs = name, n.status.Term, int64(n.status.Jobs)
			}
		}
		return
	}
	c0, l0, t0, j0 := maxCommit(before)
	c1, l1, t1, j1 := maxCommit(after)
	for name, ks := range killed {
		if ks != nil {
			c1 = max(c1, ks.CommitIndex)
			_ = name
		}
	}
	st.LeaderBefore, st.LeaderAfter, st.TermBefore, st.TermAfter = l0, l1, t0, t1
	if l0 == "" || l1 == "" {
		st.Problems = append(st.Problems, "no serving leader in a snapshot: leader-based figures are missing")
	}
	if c1 >= c0 {
		st.RaftEntries = c1 - c0
	}
	if answered > 0 {
		st.EntriesPerSubmission = round(float64(st.RaftEntries)/float64(answered), 3)
	}
	if keys > 0 {
		st.EntriesPerNewKey = round(float64(st.RaftEntries)/float64(keys), 3)
	}
	if l1 != "" && l0 != "" {
		st.JobsCreated = j1 - j0
	}

	var gates, leaderCPU, followers float64
	var gateCost, leaderCost, followerCost Cost
	var allBatches, leaderBatches uint64
	for _, n := range c.All() {
		b, ok := before.nodes[n.Name]
		if !ok {
			continue
		}
		ns := NodeStats{Name: n.Name, Role: string(n.Role), PID: b.pid, Leader: n.Name == l0}
		a, aok := after.nodes[n.Name]
		if !aok || a.pid != b.pid {
			// Killed (or restarted) during the workload: its last sample.
			ns.Killed = true
			a, _, aok = smp.lastOf(b.pid)
			if ks := killed[n.Name]; ks != nil {
				a.status = ks
			}
		}
		if aok {
			ns.CPUSec = round(float64(a.cpu-b.cpu)/clockTick, 3)
			ns.CPUCores = round(ns.CPUSec/win, 3)
			if requests > 0 {
				ns.CPUUSPerOp = round(ns.CPUSec*1e6/float64(requests), 1)
			}
			ns.RSSBytes = a.rss
		}
		_, peak, _ := smp.lastOf(b.pid)
		ns.PeakRSSBytes = max(peak, ns.RSSBytes, b.rss)
		if !ns.Killed && b.costOK && a.costOK {
			ns.Cost = &Cost{Allocs: a.cost.Allocs - b.cost.Allocs, Syscalls: a.cost.Syscalls - b.cost.Syscalls,
				Switches: a.cost.Switches - b.cost.Switches}
			switch {
			case n.Role == localcluster.RoleGate:
				gateCost.add(*ns.Cost)
			case ns.Leader:
				leaderCost.add(*ns.Cost)
			default:
				followerCost.add(*ns.Cost)
			}
		}
		if b.status != nil && a.status != nil && a.status.LogBatches >= b.status.LogBatches {
			ns.LogBatches = a.status.LogBatches - b.status.LogBatches
			allBatches += ns.LogBatches
			if ns.Leader {
				leaderBatches = ns.LogBatches
			}
		}
		switch {
		case n.Role == localcluster.RoleGate:
			gates += ns.CPUCores
		case ns.Leader:
			leaderCPU += ns.CPUCores
		default:
			followers += ns.CPUCores
		}
		st.Nodes = append(st.Nodes, ns)
	}
	st.LeaderFsyncsPerSec = round(float64(leaderBatches)/win, 1)
	st.AllFsyncsPerSec = round(float64(allBatches)/win, 1)
	if leaderBatches > 0 {
		st.EntriesPerFsync = round(float64(st.RaftEntries)/float64(leaderBatches), 2)
	}
	self := float64(after.self-before.self) / clockTick / win
	ceiling := float64(after.ceiling-before.ceiling) / clockTick / win
	machine := float64(after.sysBusy-before.sysBusy) / clockTick / win
	numCPU := 0
	if dt := after.sysTotal - before.sysTotal; dt > 0 {
		numCPU = int(float64(dt)/clockTick/win + 0.5)
	}
	st.CPUCores = CPUCores{
		Gates: round(gates, 2), Leader: round(leaderCPU, 2), Followers: round(followers, 2),
		Loadgen: round(self, 2), Ceiling: round(ceiling, 2), Machine: round(machine, 2), NumCPU: numCPU,
		Other: round(max(machine-gates-leaderCPU-followers-self-ceiling, 0), 2),
	}
	if answered > 0 {
		us := func(cores float64) float64 { return round(cores*win*1e6/float64(answered), 1) }
		st.CPUPerRequest = CPUPerRequest{Gates: us(gates), Leader: us(leaderCPU), Followers: us(followers),
			Once: us(gates + leaderCPU + followers), Loadgen: us(self), Ceiling: us(ceiling)}
		st.CostPerRequest = CostPerRequest{Gates: gateCost.per(answered), Leader: leaderCost.per(answered),
			Followers: followerCost.per(answered)}
	}
	st.GateCounters = map[string]float64{}
	for k, v := range after.gates {
		if d := v - before.gates[k]; d != 0 {
			st.GateCounters[k] = d
		}
	}
	if len(st.GateCounters) == 0 {
		st.GateCounters = nil
	}
	return st
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	if v < 0 {
		return -float64(int64(-v*p+0.5)) / p
	}
	return float64(int64(v*p+0.5)) / p
}
