// Package nemesis injects faults into a real multi-process once cluster
// (tests/localcluster) while the chaos workload runs: kill -9 of the Raft
// leader, of a follower, of any process followed by a quick restart, of every
// manager at once; SIGSTOP of the leader for several election timeouts; a
// partition that cuts the leader or a follower off from the other managers;
// and a manager whose clock is minutes off made leader. Partitions, clock skew
// and leadership transfers go through the failpoints of the fault-injection
// manager (tests/faultnet, tests/cmd/oncemanager-faults).
//
// Faults follow a seeded Schedule, one at a time: inject, hold, remove, then
// wait until the cluster is whole again (every process running, one leader
// that every manager follows, every manager a voter and caught up, every gate
// ready) before the quiet time that precedes the next fault. So every killed
// node is back before the next fault, and quorum is never lost except by
// KillAll, on purpose.
//
// Every step is written into the history (kind "nemesis", with a note) with the
// recorder's monotonic clock, so a violation can be correlated with the faults
// around it, and is kept as an Event. Run always leaves the cluster healed
// (nothing paused, no partition, every process running) when it returns, also
// when its context ends in the middle of a fault.
package nemesis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/tests/chaos/history"
	"github.com/once-dev/once/tests/localcluster"
)

// DefaultRecoveryTimeout bounds the wait for a healed cluster to be whole.
const DefaultRecoveryTimeout = time.Minute

// maxPortClashes bounds the restarts after port clashes in one wait.
const maxPortClashes = 5

// pollInterval is how often the health of the cluster is observed.
const pollInterval = 100 * time.Millisecond

// ErrUnhealthy marks a cluster that did not become whole again within the
// recovery timeout after a fault was removed, or a process that exited on its
// own: an availability finding, not a harness failure.
var ErrUnhealthy = errors.New("nemesis: cluster did not recover")

// Config configures a Nemesis. Zero values take the defaults.
type Config struct {
	// Seed selects the schedule (see Schedule).
	Seed uint64
	// Kinds are the faults to inject (default AllKinds).
	Kinds []Kind
	// Timings are the mean quiet and hold times (default DefaultTimings).
	Timings Timings
	// Rounds, when positive, stops Run after that many rounds (each round
	// injects every kind once). Zero: Run injects until its context ends.
	Rounds int
	// RecoveryTimeout bounds the wait for the cluster to be whole after a
	// fault is removed (default DefaultRecoveryTimeout).
	RecoveryTimeout time.Duration
	// Recorder, when set, receives every step as a history.KindNemesis op and
	// gives the clock of Event times.
	Recorder *history.Recorder
	// Logf, when set, receives one line per step (kill, start, SIGSTOP,
	// SIGCONT, partition, heal).
	Logf func(format string, args ...any)
	// OnEvent, when set, is called with each fault once the cluster has
	// recovered from it (or failed to).
	OnEvent func(Event)
}

// Event is one fault as it happened. Times are offsets on the Recorder's
// monotonic clock (or from New without a Recorder).
type Event struct {
	Seq   int  `json:"seq"`
	Round int  `json:"round"`
	Kind  Kind `json:"kind"`
	// Targets are the processes the fault hit, with their roles
	// ("manager2 (leader)").
	Targets []string `json:"targets"`
	// LeaderBefore and LeaderAfter are the leader before the fault and once
	// the cluster had recovered.
	LeaderBefore string `json:"leader_before,omitempty"`
	LeaderAfter  string `json:"leader_after,omitempty"`
	// Skew is a clock-skew fault's offset (forward when positive).
	Skew time.Duration `json:"skew_ns,omitempty"`
	// Injected, Removed and Recovered are when the fault began, when it was
	// taken away (restart, SIGCONT, heal) and when the cluster was whole
	// again.
	Injected  time.Duration `json:"injected_ns"`
	Removed   time.Duration `json:"removed_ns,omitempty"`
	Recovered time.Duration `json:"recovered_ns,omitempty"`
	// Err says what went wrong, if anything.
	Err string `json:"error,omitempty"`
}

func (e Event) String() string {
	s := fmt.Sprintf("#%d %-18s %-30s at %8.3fs removed %8.3fs recovered %8.3fs leader %s -> %s",
		e.Seq, e.Kind, strings.Join(e.Targets, ","), e.Injected.Seconds(), e.Removed.Seconds(),
		e.Recovered.Seconds(), orDash(e.LeaderBefore), orDash(e.LeaderAfter))
	if e.Err != "" {
		s += " ERROR: " + e.Err
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Nemesis injects faults into one cluster. Run it once.
type Nemesis struct {
	c     *localcluster.Cluster
	cfg   Config
	sched *Schedule
	start time.Time

	// State of the faults in place, so that heal undoes exactly them.
	stateMu     sync.Mutex
	paused      map[*localcluster.Node]bool
	down        map[*localcluster.Node]bool
	skewed      map[*localcluster.Node]bool
	partitioned bool

	mu          sync.Mutex
	events      []Event
	portClashes atomic.Int64
}

// New prepares a nemesis for c, which must have been started with
// Options.Failpoints when a partition or clock-skew kind is scheduled.
func New(c *localcluster.Cluster, cfg Config) (*Nemesis, error) {
	if c == nil || len(c.Managers) == 0 {
		return nil, errors.New("nemesis: a cluster with managers is required")
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = slices.Clone(AllKinds)
	}
	for _, k := range cfg.Kinds {
		if !slices.Contains(AllKinds, k) {
			return nil, fmt.Errorf("nemesis: unknown fault kind %q", k)
		}
	}
	if len(c.Managers) < 3 {
		for _, k := range cfg.Kinds {
			if k != Restart && k != KillAll {
				return nil, fmt.Errorf("nemesis: %s needs at least three managers (have %d)", k, len(c.Managers))
			}
		}
	}
	if cfg.Rounds < 0 {
		return nil, fmt.Errorf("nemesis: Rounds %d is negative", cfg.Rounds)
	}
	if cfg.RecoveryTimeout <= 0 {
		cfg.RecoveryTimeout = DefaultRecoveryTimeout
	}
	cfg.Timings = cfg.Timings.withDefaults()
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.OnEvent == nil {
		cfg.OnEvent = func(Event) {}
	}
	return &Nemesis{
		c: c, cfg: cfg, sched: NewSchedule(cfg.Seed, cfg.Kinds, cfg.Timings), start: time.Now(),
		paused: map[*localcluster.Node]bool{}, down: map[*localcluster.Node]bool{}, skewed: map[*localcluster.Node]bool{},
	}, nil
}

// now is the offset on the history's clock.
func (n *Nemesis) now() time.Duration {
	if n.cfg.Recorder != nil {
		return n.cfg.Recorder.Now()
	}
	return time.Since(n.start)
}

// PortClashes counts the processes started again because their port had been
// taken while they were down (see portClash).
func (n *Nemesis) PortClashes() int { return int(n.portClashes.Load()) }

// Events returns the faults injected so far.
func (n *Nemesis) Events() []Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.events)
}

// Counts returns how many faults of each kind were injected.
func (n *Nemesis) Counts() map[Kind]int {
	m := map[Kind]int{}
	for _, e := range n.Events() {
		m[e.Kind]++
	}
	return m
}

// Run injects faults from the schedule until ctx ends (or Config.Rounds are
// done), then heals the cluster and waits until it is whole. It returns nil
// when it stopped for one of those reasons; an error when a fault could not be
// injected or removed, or the cluster did not recover (errors.Is
// ErrUnhealthy) — the cluster is healed as far as possible even then.
func (n *Nemesis) Run(ctx context.Context) (err error) {
	defer func() {
		// Whatever happened, leave nothing broken behind: the checker runs next.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.RecoveryTimeout)
		defer cancel()
		if herr := n.Heal(hctx); herr != nil && err == nil {
			err = herr
		}
	}()
	for {
		f := n.sched.Next()
		if n.cfg.Rounds > 0 && f.Round > n.cfg.Rounds {
			return nil
		}
		if !sleep(ctx, f.Quiet) {
			return nil
		}
		if err := n.inject(ctx, f); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// Heal removes every fault the nemesis put in place (resumes paused
// processes, heals partitions, starts every process that is not running)
// and waits until the cluster is whole. It is idempotent; Run calls it last.
func (n *Nemesis) Heal(ctx context.Context) error {
	_, herr := n.heal(ctx, "final heal")
	_, _, werr := n.waitHealthy(ctx, "final heal")
	return errors.Join(herr, werr)
}

// inject runs one fault: pick its targets, inject, hold, remove, recover.
func (n *Nemesis) inject(ctx context.Context, f Fault) error {
	ev := Event{Seq: f.Seq, Round: f.Round, Kind: f.Kind, Skew: f.Skew}
	leader, err := n.leader(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ev.LeaderBefore = leader.Name
	label := fmt.Sprintf("%s#%d", f.Kind, f.Seq)
	// Inject and remove the fault even when ctx ends meanwhile: a fault half
	// put in place must still be taken away before the checker runs.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.Hold+2*n.cfg.RecoveryTimeout)
	defer cancel()

	var targets []*localcluster.Node
	var apply func() error
	switch f.Kind {
	case KillLeader:
		targets = []*localcluster.Node{leader}
		apply = func() error { return n.kill(label, leader, "leader") }
	case KillFollower:
		t := pick(followers(n.c, leader), f.Pick)
		targets = []*localcluster.Node{t}
		apply = func() error { return n.kill(label, t, "follower") }
	case Restart:
		t := pick(sortedNodes(n.c.All()), f.Pick)
		targets = []*localcluster.Node{t}
		apply = func() error { return n.kill(label, t, role(t, leader)) }
	case KillAll:
		targets = sortedNodes(n.c.Managers)
		apply = func() error {
			var wg sync.WaitGroup
			errs := make([]error, len(targets))
			for i, t := range targets {
				wg.Go(func() { errs[i] = n.kill(label, t, role(t, leader)) })
			}
			wg.Wait()
			return errors.Join(errs...)
		}
	case PauseLeader:
		targets = []*localcluster.Node{leader}
		apply = func() error {
			return n.step(label, fmt.Sprintf("SIGSTOP %s (leader, pid %d)", leader.Name, leader.PID()), func() error {
				n.stateMu.Lock()
				defer n.stateMu.Unlock()
				if err := leader.Pause(); err != nil {
					return err
				}
				n.paused[leader] = true
				return nil
			})
		}
	case PartitionLeader, PartitionFollower:
		t, r := leader, "leader"
		if f.Kind == PartitionFollower {
			t, r = pick(followers(n.c, leader), f.Pick), "follower"
		}
		targets = []*localcluster.Node{t}
		apply = func() error {
			return n.step(label, fmt.Sprintf("partition %s (%s) from the other managers", t.Name, r), func() error {
				n.stateMu.Lock()
				n.partitioned = true
				n.stateMu.Unlock()
				return n.c.Partition(hctx, t)
			})
		}
	case ClockSkew:
		t := pick(sortedNodes(n.c.Managers), f.Pick)
		targets = []*localcluster.Node{t}
		apply = func() error {
			err := n.step(label, fmt.Sprintf("shift %s's clock by %v (%s)", t.Name, f.Skew, role(t, leader)), func() error {
				n.stateMu.Lock()
				n.skewed[t] = true
				n.stateMu.Unlock()
				return n.c.SetClockOffset(hctx, t, f.Skew)
			})
			if err != nil {
				return err
			}
			return n.step(label, fmt.Sprintf("make %s the leader", t.Name), func() error { return n.transfer(hctx, t) })
		}
	default:
		return fmt.Errorf("nemesis: unknown fault kind %q", f.Kind)
	}
	for _, t := range targets {
		ev.Targets = append(ev.Targets, fmt.Sprintf("%s (%s)", t.Name, role(t, leader)))
	}

	ev.Injected = n.now()
	injectErr := apply()
	if injectErr == nil {
		sleep(ctx, f.Hold)
	}
	_, healErr := n.heal(hctx, label)
	ev.Removed = n.now()
	newLeader, recovered, waitErr := n.waitHealthy(hctx, label)
	if newLeader != nil {
		ev.LeaderAfter = newLeader.Name
	}
	ev.Recovered = recovered
	err = errors.Join(injectErr, healErr, waitErr)
	if err != nil {
		ev.Err = err.Error()
	}
	n.mu.Lock()
	n.events = append(n.events, ev)
	n.mu.Unlock()
	n.cfg.OnEvent(ev)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	return nil
}

// transfer makes t the leader, retrying while raft refuses (a transfer fails
// when the target is not caught up in time, or an election is under way),
// within the recovery timeout.
func (n *Nemesis) transfer(ctx context.Context, t *localcluster.Node) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RecoveryTimeout)
	defer cancel()
	for {
		err := n.c.TransferLeadership(ctx, t)
		if err == nil {
			if l, lerr := n.c.Leader(ctx); lerr == nil && l == t {
				return nil
			}
		}
		if !sleep(ctx, pollInterval) {
			return fmt.Errorf("%w: %s did not become the leader: %v", ErrUnhealthy, t.Name, err)
		}
	}
}

// kill sends SIGKILL to t and marks it down until heal starts it again.
func (n *Nemesis) kill(label string, t *localcluster.Node, role string) error {
	return n.step(label, fmt.Sprintf("SIGKILL %s (%s, pid %d)", t.Name, role, t.PID()), func() error {
		n.stateMu.Lock()
		n.down[t] = true
		n.stateMu.Unlock()
		return t.Kill()
	})
}

// heal undoes every fault in place, each as a step, and reports what it did.
// A process that is not running though the nemesis did not kill it exited on
// its own: it is started too, and reported as an error.
func (n *Nemesis) heal(ctx context.Context, label string) (bool, error) {
	n.stateMu.Lock()
	defer n.stateMu.Unlock()
	var errs []error
	did := false
	for _, p := range sortedNodes(keys(n.paused)) {
		did = true
		if err := n.step(label, fmt.Sprintf("SIGCONT %s (pid %d)", p.Name, p.PID()), p.Resume); err != nil {
			errs = append(errs, err)
		}
		delete(n.paused, p)
	}
	for _, p := range sortedNodes(keys(n.skewed)) {
		did = true
		// A process killed meanwhile starts again with a true clock.
		if err := n.step(label, "set "+p.Name+"'s clock right", func() error { return n.c.SetClockOffset(ctx, p, 0) }); err != nil && p.Running() {
			errs = append(errs, err)
			continue
		}
		delete(n.skewed, p)
	}
	if n.partitioned {
		did = true
		if err := n.step(label, "heal every partition", func() error { return n.c.Heal(ctx) }); err != nil {
			errs = append(errs, err)
		} else {
			n.partitioned = false
		}
	}
	for _, p := range n.c.All() {
		if p.Running() {
			continue
		}
		did = true
		if !n.down[p] {
			errs = append(errs, fmt.Errorf("%w: %s exited on its own (exit code %d; log %s)", ErrUnhealthy, p.Name, p.ExitCode(), p.LogPath))
		}
		if err := n.step(label, "start "+p.Name, p.Start); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(n.down, p)
	}
	return did, errors.Join(errs...)
}

// step runs one action, records it in the history and logs it.
func (n *Nemesis) step(label, note string, fn func() error) error {
	rec := n.cfg.Recorder
	h := -1
	if rec != nil {
		h = rec.Invoke(history.Op{Kind: history.KindNemesis, Client: "nemesis", Note: label + ": " + note})
	}
	at := n.now()
	err := fn()
	if rec != nil {
		var out history.Outcome
		if err != nil {
			out.Err = err.Error()
		}
		rec.Complete(h, out)
	}
	if err != nil {
		n.cfg.Logf("%s %s: %s: FAILED: %v", stamp(at), label, note, err)
		return fmt.Errorf("%s: %w", note, err)
	}
	n.cfg.Logf("%s %s: %s", stamp(at), label, note)
	return nil
}

// leader returns the current leader, waiting for one (a healthy cluster has
// one; between two observations an election may be under way).
func (n *Nemesis) leader(ctx context.Context) (*localcluster.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RecoveryTimeout)
	defer cancel()
	l, err := n.c.WaitLeader(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnhealthy, err)
	}
	return l, nil
}

// waitHealthy waits, within ctx and the recovery timeout, until the cluster is
// whole: every process running; every manager answering its status, with one
// leader that all of them follow; the leader's configuration holding every
// manager as a voter; every manager's applied index at or past the commit
// index the leader had when the wait found it; every gate ready. It returns
// the leader and the time it was whole.
//
// A process that exited because its port was taken (see portClash) is started
// again, at most maxPortClashes times per wait.
func (n *Nemesis) waitHealthy(ctx context.Context, label string) (*localcluster.Node, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RecoveryTimeout)
	defer cancel()
	started := time.Now()
	var target uint64
	why := "not observed yet"
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	clashes := 0
	for {
		for _, p := range n.c.All() {
			if p.Running() {
				continue
			}
			if clash := portClash(p); clash != "" && clashes < maxPortClashes {
				clashes++
				n.portClashes.Add(1)
				note := fmt.Sprintf("start %s again: it could not listen (%s), a port clash of the harness, not a fault of once", p.Name, clash)
				if err := n.step(label, note, p.Start); err != nil {
					return nil, 0, err
				}
				continue
			}
			return nil, 0, fmt.Errorf("%w: %s is not running (exit code %d; log %s)", ErrUnhealthy, p.Name, p.ExitCode(), p.LogPath)
		}
		leader, reason := n.whole(ctx, &target)
		if leader != nil {
			if err := n.c.WaitReady(ctx); err != nil {
				return nil, 0, fmt.Errorf("%w after %v: %w", ErrUnhealthy, time.Since(started).Round(time.Millisecond), err)
			}
			return leader, n.now(), nil
		}
		why = reason
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("%w within %v: %s", ErrUnhealthy, time.Since(started).Round(time.Millisecond), why)
		case <-tick.C:
		}
	}
}

// whole makes one observation of the managers; it returns the leader when they
// are whole, else why not.
func (n *Nemesis) whole(ctx context.Context, target *uint64) (*localcluster.Node, string) {
	sts := make([]rpc.Status, len(n.c.Managers))
	var leader *localcluster.Node
	var lst rpc.Status
	for i, m := range n.c.Managers {
		st, err := n.c.Status(ctx, m)
		if err != nil {
			return nil, fmt.Sprintf("%s: status: %v", m.Name, err)
		}
		sts[i] = st
		if st.IsLeader {
			if leader != nil {
				return nil, fmt.Sprintf("both %s and %s claim leadership", leader.Name, m.Name)
			}
			leader, lst = m, st
		}
	}
	if leader == nil {
		return nil, "no leader"
	}
	for i, m := range n.c.Managers {
		if sts[i].LeaderID != lst.NodeID {
			return nil, fmt.Sprintf("%s follows %q, not the leader %s", m.Name, sts[i].LeaderID, lst.NodeID)
		}
		if !slices.Contains(lst.Voters, sts[i].NodeID) {
			return nil, fmt.Sprintf("%s is not a voter of the leader's configuration %v", m.Name, lst.Voters)
		}
	}
	if *target == 0 {
		*target = lst.CommitIndex
	}
	for i, m := range n.c.Managers {
		if sts[i].AppliedIndex < *target {
			return nil, fmt.Sprintf("%s has applied %d of %d", m.Name, sts[i].AppliedIndex, *target)
		}
	}
	return leader, ""
}

func followers(c *localcluster.Cluster, leader *localcluster.Node) []*localcluster.Node {
	var out []*localcluster.Node
	for _, m := range c.Managers {
		if m != leader {
			out = append(out, m)
		}
	}
	return sortedNodes(out)
}

func role(n, leader *localcluster.Node) string {
	switch {
	case n == leader:
		return "leader"
	case n.Role == localcluster.RoleGate:
		return "gate"
	}
	return "follower"
}

func pick(nodes []*localcluster.Node, p uint64) *localcluster.Node {
	return nodes[p%uint64(len(nodes))]
}

func sortedNodes(nodes []*localcluster.Node) []*localcluster.Node {
	out := slices.Clone(nodes)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func keys(m map[*localcluster.Node]bool) []*localcluster.Node {
	var out []*localcluster.Node
	for k := range m {
		out = append(out, k)
	}
	return out
}

// sleep waits d; it reports false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func stamp(d time.Duration) string { return fmt.Sprintf("[%9.3fs]", d.Seconds()) }

// portClash returns the log line of a process that exited because it could not
// listen on its port ("address already in use"), or "".
//
// localcluster picks free ports from the kernel's ephemeral range, so while a
// process is down any outgoing connection on the machine (a gate dialing a
// manager, a client dialing a gate) may be given its port as a source port, and
// the restarted process cannot bind it until that connection closes. A real
// deployment listens on fixed ports outside that range; a supervisor would
// start the process again, and so does the nemesis. Any other exit is a
// finding.
func portClash(p *localcluster.Node) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 4096
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		_, _ = f.Seek(st.Size()-tail, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	for i := len(lines) - 1; i >= 0 && i >= len(lines)-3; i-- {
		if l := lines[i]; bytes.Contains(l, []byte("address already in use")) {
			if j := bytes.Index(l, []byte("err=")); j >= 0 {
				l = l[j+len("err="):]
			}
			return string(bytes.Trim(bytes.TrimSpace(l), `"`))
		}
	}
	return ""
}
