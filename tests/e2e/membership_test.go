package e2e

// Membership with real manager processes (the manager side): managers
// given one seed each bootstrap exactly one Raft group; a fourth joins as a
// voter; a manager that stops with MANAGER_LEAVE_ON_TERMINATE is removed at
// once and one killed with kill -9 after MANAGER_DEAD_SERVER_GRACE_SECONDS,
// while submissions go on; restarting every manager does not bootstrap a
// second group; a manager with the wrong gossip key (or none) is refused.
// Two more tests cover managers that restart with only each other as seeds
// (the gossip pool must heal), and removed managers that come back.
//
// Everything is observed from outside, as an operator would: each manager's
// GET /rpc/v1/status (leader, term, the voters of its Raft configuration) and
// its log file.

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/autopilot"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/tests/localcluster"
)

// Log lines the tests look for (autopilot and membership messages).
const (
	logBootstrapping = `msg="bootstrapping the raft cluster"`
	logJoinFailed    = `msg="join failed, retrying"`
)

// submitBudget is the client's retry budget for one submission: it retries
// NotLeader, Unavailable and transport failures until this much time is up.
const submitBudget = 10 * time.Second

// labeled prefixes what cond says with what is waited for (for
// testutil.WaitFor's failure message).
func labeled(what string, cond func() (bool, string)) func() (bool, string) {
	return func() (bool, string) {
		ok, state := cond()
		return ok, what + ": " + state
	}
}

func names(nodes []*localcluster.Node) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	slices.Sort(out)
	return out
}

// agreement is one look at a set of managers: it holds when every one of them
// answers, exactly one is the serving leader, all name it and share its term,
// and all list exactly the voters want.
type agreement struct {
	leader *localcluster.Node
	term   uint64
	status map[string]rpc.Status
}

func lookAgreement(ctx context.Context, c *localcluster.Cluster, nodes []*localcluster.Node, want []string) (agreement, bool, string) {
	a := agreement{status: map[string]rpc.Status{}}
	var leaders []string
	for _, n := range nodes {
		// Not bounded by ctx: the look at the deadline is the one reported.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		st, err := c.Status(sctx, n)
		cancel()
		if err != nil {
			return a, false, fmt.Sprintf("%s: %v", n.Name, err)
		}
		a.status[n.Name] = st
		if st.IsLeader {
			leaders = append(leaders, n.Name)
			a.leader, a.term = n, st.Term
		}
	}
	if len(leaders) != 1 {
		return a, false, fmt.Sprintf("serving leaders %v; %s", leaders, describe(a.status))
	}
	for _, n := range nodes {
		st := a.status[n.Name]
		voters := slices.Sorted(slices.Values(st.Voters))
		switch {
		case st.LeaderID != a.leader.Name:
			return a, false, fmt.Sprintf("%s follows %q, not %s; %s", n.Name, st.LeaderID, a.leader.Name, describe(a.status))
		case st.Term != a.term:
			return a, false, fmt.Sprintf("%s is in term %d, the leader in %d; %s", n.Name, st.Term, a.term, describe(a.status))
		case !slices.Equal(voters, want):
			return a, false, fmt.Sprintf("%s lists voters %v, want %v; %s", n.Name, voters, want, describe(a.status))
		}
	}
	return a, true, ""
}

func describe(sts map[string]rpc.Status) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(sts)) {
		st := sts[name]
		parts = append(parts, fmt.Sprintf("%s{%s leader=%q term=%d commit=%d voters=%v}", name, st.RaftState, st.LeaderID, st.Term, st.CommitIndex, st.Voters))
	}
	return strings.Join(parts, " ")
}

// waitAgreement polls until nodes agree on one leader and on exactly themselves
// as the voters, and returns that look.
func waitAgreement(t *testing.T, ctx context.Context, c *localcluster.Cluster, nodes []*localcluster.Node) agreement {
	t.Helper()
	want := names(nodes)
	var a agreement
	d := testutil.WaitFor(t, left(ctx), labeled(fmt.Sprintf("managers %v agree on one leader and voters", want), func() (bool, string) {
		var ok bool
		var why string
		a, ok, why = lookAgreement(ctx, c, nodes, want)
		return ok, why
	}))
	t.Logf("%v agree: leader %s, term %d, voters %v (after %v)", want, a.leader.Name, a.term, want, d.Round(time.Millisecond))
	return a
}

// countInLogs counts the lines containing s in each node's log.
func countInLogs(t *testing.T, nodes []*localcluster.Node, s string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range nodes {
		b, err := os.ReadFile(n.LogPath)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, s) {
				out[n.Name]++
			}
		}
	}
	return out
}

// linesInLog returns node's log lines containing every one of subs.
func linesInLog(t *testing.T, n *localcluster.Node, subs ...string) []string {
	t.Helper()
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// assertOneBootstrap checks that, over every log of the cluster (logs are
// appended to across restarts), exactly one manager bootstrapped, once.
func assertOneBootstrap(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	counts := countInLogs(t, c.Managers, logBootstrapping)
	total := 0
	for _, n := range counts {
		total += n
	}
	if total != 1 {
		t.Fatalf("bootstrap calls per manager %v: want exactly one in all", counts)
	}
}

// submitter submits new keys one after another, each with the client's retry
// budget, until stopped: "the cluster keeps serving" is that every one of
// them is acknowledged.
type submitter struct {
	cl     *rpc.Client
	prefix string
	stop   chan struct{}
	done   chan struct{}

	mu    sync.Mutex
	acked map[string]string
	fails []string
	worst time.Duration
}

func startSubmitter(ctx context.Context, c *localcluster.Cluster, addrs []string, prefix string) *submitter {
	s := &submitter{
		cl:     c.RPCClient(rpc.ClientConfig{Resolver: rpc.StaticResolver(addrs), AttemptTimeout: 2 * time.Second}),
		prefix: prefix,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		acked:  map[string]string{},
	}
	go s.run(ctx)
	return s
}

func (s *submitter) run(ctx context.Context) {
	defer close(s.done)
	defer s.cl.CloseIdleConnections()
	// Paced, not flat out: the point is availability, and the machine is shared.
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		key := fmt.Sprintf("%s:%d:0123456789abcdef", s.prefix, i)
		start := time.Now()
		sctx, cancel := context.WithTimeout(ctx, submitBudget)
		r, err := submitKey(sctx, s.cl, key)
		cancel()
		took := time.Since(start)
		s.mu.Lock()
		s.worst = max(s.worst, took)
		switch {
		case err != nil:
			s.fails = append(s.fails, fmt.Sprintf("%s %s after %v: %v", start.Format("15:04:05.000"), key, took.Round(time.Millisecond), err))
		case r.Outcome != rpc.OutcomeCommitted:
			s.fails = append(s.fails, fmt.Sprintf("%s %s: outcome %s", start.Format("15:04:05.000"), key, r.Outcome))
		default:
			s.acked[key] = r.JobId
		}
		s.mu.Unlock()
	}
}

func (s *submitter) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

// progress waits until n more submissions than now are acknowledged.
func (s *submitter) progress(t *testing.T, ctx context.Context, n int, when string) {
	t.Helper()
	from := s.count()
	testutil.WaitFor(t, left(ctx), labeled(fmt.Sprintf("%d more submissions acknowledged %s", n, when), func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.acked) >= from+n, fmt.Sprintf("%d acknowledged, %d failed", len(s.acked)-from, len(s.fails))
	}))
}

// finish stops the submitter, fails the test if any submission failed, and
// checks that every acknowledged key still answers with its job id.
func (s *submitter) finish(t *testing.T, ctx context.Context, verify *rpc.Client) {
	t.Helper()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("submitter %s: %d acknowledged, %d failed, slowest %v", s.prefix, len(s.acked), len(s.fails), s.worst.Round(time.Millisecond))
	if len(s.fails) > 0 {
		t.Errorf("%d submissions failed within the %v retry budget:\n%s", len(s.fails), submitBudget, strings.Join(s.fails, "\n"))
	}
	if len(s.acked) == 0 {
		t.Fatal("no submission was acknowledged")
	}
	for key, id := range s.acked {
		sctx, cancel := context.WithTimeout(ctx, submitBudget)
		r, err := submitKey(sctx, verify, key)
		cancel()
		if err != nil {
			t.Fatalf("resubmit %s: %v", key, err)
		}
		if r.JobId != id || !r.Replayed || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("key %s: now %s (%s, replayed=%v), acknowledged as %s", key, r.JobId, r.Outcome, r.Replayed, id)
		}
	}
}

// removalLines returns the "removing server" lines about n in every log.
func removalLines(t *testing.T, c *localcluster.Cluster, n *localcluster.Node) []string {
	t.Helper()
	var out []string
	for _, m := range c.Managers {
		out = append(out, linesInLog(t, m, "removing server", "peer="+n.Name)...)
	}
	return out
}

func rpcAddrs(nodes ...*localcluster.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.HTTPAddr)
	}
	return out
}

// submitOnce submits one new key through a client that knows only addrs (it
// follows "not leader" answers to the leader they name).
func submitOnce(t *testing.T, ctx context.Context, c *localcluster.Cluster, key string, addrs ...string) string {
	t.Helper()
	cl := c.RPCClient(rpc.ClientConfig{Resolver: rpc.StaticResolver(addrs), AttemptTimeout: 2 * time.Second})
	defer cl.CloseIdleConnections()
	sctx, cancel := context.WithTimeout(ctx, submitBudget)
	defer cancel()
	r, err := submitKey(sctx, cl, key)
	if err != nil {
		t.Fatalf("submit %s through %v: %v", key, addrs, err)
	}
	if r.Outcome != rpc.OutcomeCommitted {
		t.Fatalf("submit %s through %v: outcome %s", key, addrs, r.Outcome)
	}
	return r.JobId
}

// Three managers, each given one seed, bootstrap exactly one Raft group: they
// all report the same leader, term and three voters; exactly one of them
// bootstrapped; the group serves, also through a follower's address (the
// follower names the leader's RPC address, learnt from gossip).
func TestMembershipBootstrapsOneGroup(t *testing.T) {
	c := startCluster(t, 3, 0, nil)
	ctx := ctxFor(t, time.Minute)
	a := waitAgreement(t, ctx, c, c.Managers)
	assertOneBootstrap(t, c)
	for _, n := range c.Managers {
		if n == a.leader {
			continue
		}
		submitOnce(t, ctx, c, "member-boot-"+n.Name+":1:0123456789abcdef", n.HTTPAddr)
	}
	// Still one group, same leader, same term after serving.
	if b, ok, why := lookAgreement(ctx, c, c.Managers, names(c.Managers)); !ok || b.leader != a.leader || b.term != a.term {
		t.Fatalf("after serving: %s (leader %v term %d, before %s term %d)", why, b.leader, b.term, a.leader.Name, a.term)
	}
}

// A fourth manager, given one seed and the same bootstrap_expect, joins the
// running group as a voter without bootstrapping anything, while submissions
// go on; it then serves (through its own address) and holds the data.
func TestMembershipFourthManagerBecomesVoter(t *testing.T) {
	c := startCluster(t, 3, 0, nil)
	ctx := ctxFor(t, time.Minute)
	first := slices.Clone(c.Managers)
	waitAgreement(t, ctx, c, first)

	sub := startSubmitter(ctx, c, rpcAddrs(first...), "member-join")
	sub.progress(t, ctx, 5, "before the fourth manager starts")

	m4, err := c.AddManager()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := m4.Start(); err != nil {
		t.Fatal(err)
	}
	a := waitAgreement(t, ctx, c, c.Managers)
	t.Logf("%s is a voter %v after its start", m4.Name, time.Since(start).Round(time.Millisecond))
	sub.progress(t, ctx, 5, "with four voters")

	// It holds the log: its applied index reaches the leader's commit index.
	commit := a.status[a.leader.Name].CommitIndex
	testutil.WaitFor(t, left(ctx), labeled(m4.Name+" applies the log", func() (bool, string) {
		st, err := c.Status(ctx, m4)
		return err == nil && st.AppliedIndex >= commit, fmt.Sprintf("applied %d of %d (%v)", st.AppliedIndex, commit, err)
	}))
	submitOnce(t, ctx, c, "member-join-m4:1:0123456789abcdef", m4.HTTPAddr)

	sub.finish(t, ctx, managerClient(c))
	if n := countInLogs(t, []*localcluster.Node{m4}, logBootstrapping)[m4.Name]; n != 0 {
		t.Fatalf("%s bootstrapped (%d times) instead of joining", m4.Name, n)
	}
	assertOneBootstrap(t, c)
	// The manager that added it led then; on a loaded machine an election
	// since may have moved leadership to another (a.leader), so every log is
	// searched.
	var added []string
	for _, n := range first {
		added = append(added, linesInLog(t, n, "adding voter", "peer="+m4.Name)...)
	}
	if len(added) == 0 {
		t.Errorf("no manager logged adding %s as a voter (leader now %s)", m4.Name, a.leader.Name)
	}
}

// Of four voters, the leader stops with SIGTERM and MANAGER_LEAVE_ON_TERMINATE:
// it hands leadership over and is removed from the configuration before it
// exits. Then the new leader is killed with kill -9: the survivors remove it
// once MANAGER_DEAD_SERVER_GRACE_SECONDS have passed, not before. Submissions
// go on throughout and every one is acknowledged within the retry budget.
func TestMembershipRemovesLeftAndDeadManagers(t *testing.T) {
	const grace = 2 * time.Second
	c := startCluster(t, 4, 0, func(o *localcluster.Options) {
		o.ManagerEnv = append(o.ManagerEnv, "MANAGER_LEAVE_ON_TERMINATE=true",
			fmt.Sprintf("MANAGER_DEAD_SERVER_GRACE_SECONDS=%d", int(grace/time.Second)))
	})
	ctx := ctxFor(t, time.Minute)
	a := waitAgreement(t, ctx, c, c.Managers)
	sub := startSubmitter(ctx, c, rpcAddrs(c.Managers...), "member-remove")
	sub.progress(t, ctx, 5, "with four voters")

	running := func() []*localcluster.Node {
		var out []*localcluster.Node
		for _, n := range c.Managers {
			if n.Running() {
				out = append(out, n)
			}
		}
		return out
	}

	// Graceful: the leader leaves.
	left := a.leader
	start := time.Now()
	left.Stop(15 * time.Second)
	took := time.Since(start)
	t.Logf("%s (leader) stopped with SIGTERM in %v, exit code %d", left.Name, took.Round(time.Millisecond), left.ExitCode())
	if code := left.ExitCode(); code != 0 {
		t.Errorf("%s exited with %d after SIGTERM", left.Name, code)
	}
	if got := linesInLog(t, left, `msg="removed from the raft configuration"`); len(got) == 0 {
		t.Errorf("%s exited without seeing its removal from the configuration (took %v)", left.Name, took.Round(time.Millisecond))
	}
	b := waitAgreement(t, ctx, c, running())
	removedBy := removalLines(t, c, left)
	t.Logf("removal of %s: %q", left.Name, removedBy)
	if len(removedBy) == 0 || !strings.Contains(removedBy[0], "reason=left") {
		t.Errorf("%s was not removed as a manager that left: %q", left.Name, removedBy)
	}
	sub.progress(t, ctx, 5, "after the graceful leave")

	// kill -9: the new leader dies.
	dead := b.leader
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	t.Logf("%s killed -9 (leader)", dead.Name)
	waitAgreement(t, ctx, c, running())
	removedAfter := time.Since(killed)
	t.Logf("%s removed %v after kill -9 (grace %v)", dead.Name, removedAfter.Round(time.Millisecond), grace)
	if removedAfter < grace {
		t.Errorf("%s removed %v after it died, before the %v grace period", dead.Name, removedAfter, grace)
	}
	removedBy = removalLines(t, c, dead)
	t.Logf("removal of %s: %q", dead.Name, removedBy)
	if len(removedBy) == 0 || strings.Contains(removedBy[0], "reason=left") {
		t.Errorf("%s was not removed as a failed manager: %q", dead.Name, removedBy)
	}
	sub.progress(t, ctx, 5, "after the removal of the killed manager")
	sub.finish(t, ctx, c.RPCClient(rpc.ClientConfig{Resolver: rpc.StaticResolver(rpcAddrs(running()...))}))
	killLeaving(t, c)
}

// killLeaving ends a test whose managers run with MANAGER_LEAVE_ON_TERMINATE:
// stopped together they would each wait (up to their shutdown timeout) for a
// removal that the others, leaving too, cannot make.
func killLeaving(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	if t.Failed() {
		return // let the cleanup stop them and show their logs as they are
	}
	for _, n := range c.Managers {
		if n.Running() {
			if err := n.Kill(); err != nil {
				t.Error(err)
			}
		}
	}
}

// Stopping every manager of a bootstrapped group and starting them all again
// does not bootstrap a new group: the same three voters, a term that goes on
// from the old one, one leader, and every acknowledged key answers with its
// job id.
func TestMembershipRestartAllDoesNotBootstrapAgain(t *testing.T) {
	c := startCluster(t, 3, 0, nil)
	ctx := ctxFor(t, time.Minute)
	before := waitAgreement(t, ctx, c, c.Managers)
	cl := managerClient(c)
	defer cl.CloseIdleConnections()
	acked := map[string]string{}
	for i := range 20 {
		key := fmt.Sprintf("member-restart:%d:0123456789abcdef", i)
		acked[key] = submitOnce(t, ctx, c, key, rpcAddrs(c.Managers...)...)
	}
	st, err := c.Status(ctx, before.leader)
	if err != nil {
		t.Fatal(err)
	}

	c.Stop()
	for _, n := range c.Managers {
		if n.ExitCode() != 0 {
			t.Errorf("%s exited with %d after SIGTERM", n.Name, n.ExitCode())
		}
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	after := waitAgreement(t, ctx, c, c.Managers)
	if after.term <= st.Term {
		t.Fatalf("term after the restart %d, before %d: the group's term did not go on", after.term, st.Term)
	}
	// Every manager applies its log again, up to where the group was.
	for _, n := range c.Managers {
		testutil.WaitFor(t, left(ctx), labeled(n.Name+" applies the log again", func() (bool, string) {
			s, err := c.Status(ctx, n)
			return err == nil && s.AppliedIndex >= st.CommitIndex, fmt.Sprintf("applied %d, commit index before the restart %d (%v)", s.AppliedIndex, st.CommitIndex, err)
		}))
	}
	assertOneBootstrap(t, c)
	for key, id := range acked {
		sctx, cancel := context.WithTimeout(ctx, submitBudget)
		r, err := submitKey(sctx, cl, key)
		cancel()
		if err != nil {
			t.Fatalf("resubmit %s: %v", key, err)
		}
		if r.JobId != id || !r.Replayed {
			t.Fatalf("key %s after the restart: job %s (replayed=%v), acknowledged as %s", key, r.JobId, r.Replayed, id)
		}
	}
	t.Logf("term %d -> %d, commit index %d -> %d", st.Term, after.term, st.CommitIndex, after.status[after.leader.Name].CommitIndex)
}

// With gossip encryption, a manager with another key, and one with no key
// (which, in a cluster secured by the secret, gossips with the key derived
// from it: another key all the same), never get in: no manager lists them, they never learn of a leader or a
// voter, and their logs say their joins fail and why. A manager with the
// right key started at the same moment joins as a voter (so the others had
// their chance).
func TestMembershipGossipWrongKeyRefused(t *testing.T) {
	keyOf := func(b byte) string {
		return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune(b)), 32)))
	}
	right, wrong := keyOf('a'), keyOf('b')
	c := startCluster(t, 3, 0, func(o *localcluster.Options) {
		o.ManagerEnv = append(o.ManagerEnv, "MANAGER_GOSSIP_KEY="+right)
	})
	ctx := ctxFor(t, time.Minute)
	first := slices.Clone(c.Managers)
	waitAgreement(t, ctx, c, first)
	submitOnce(t, ctx, c, "member-gossip:1:0123456789abcdef", rpcAddrs(first...)...)

	wrongKey, err := c.AddManager("MANAGER_GOSSIP_KEY=" + wrong)
	if err != nil {
		t.Fatal(err)
	}
	noKey, err := c.AddManager("MANAGER_GOSSIP_KEY=")
	if err != nil {
		t.Fatal(err)
	}
	rightKey, err := c.AddManager()
	if err != nil {
		t.Fatal(err)
	}
	refused := []*localcluster.Node{wrongKey, noKey}
	for _, n := range []*localcluster.Node{wrongKey, noKey, rightKey} {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	members := append(slices.Clone(first), rightKey)

	// checkRefused fails the test if anyone lets a refused manager in.
	checkRefused := func() {
		t.Helper()
		for _, n := range members {
			st, err := c.Status(ctx, n)
			if err != nil {
				continue // a status may time out on a loaded machine; the next look counts
			}
			for _, r := range refused {
				if slices.Contains(st.Voters, r.Name) {
					t.Fatalf("%s lists %s as a voter: %v", n.Name, r.Name, st.Voters)
				}
			}
		}
		for _, r := range refused {
			st, err := c.Status(ctx, r)
			if err != nil {
				continue
			}
			if st.LeaderID != "" || len(st.Voters) > 0 || st.Term != 0 {
				t.Fatalf("%s got in: leader %q, voters %v, term %d", r.Name, st.LeaderID, st.Voters, st.Term)
			}
		}
	}
	testutil.WaitFor(t, left(ctx), labeled(rightKey.Name+" (right key) becomes a voter", func() (bool, string) {
		checkRefused()
		_, ok, why := lookAgreement(ctx, c, members, names(members))
		return ok, why
	}))
	// A few more seconds: more join attempts of the refused managers, more
	// reconcile rounds of the leader.
	until := time.Now().Add(4 * time.Second)
	testutil.WaitFor(t, left(ctx), labeled("a few more seconds without the refused managers", func() (bool, string) {
		checkRefused()
		return time.Now().After(until), ""
	}))
	for _, r := range refused {
		if !r.Running() {
			t.Errorf("%s exited (code %d); it should keep trying to join", r.Name, r.ExitCode())
		}
		for _, n := range members {
			if got := linesInLog(t, n, "peer="+r.Name); len(got) > 0 {
				t.Errorf("%s acted on %s: %q", n.Name, r.Name, got)
			}
		}
	}
	// Their logs say why.
	for _, tc := range []struct {
		n   *localcluster.Node
		why string
	}{{wrongKey, "no installed keys could decrypt"}, {noKey, "no installed keys could decrypt"}} {
		lines := linesInLog(t, tc.n, logJoinFailed)
		if len(lines) == 0 {
			t.Errorf("%s's log has no %s", tc.n.Name, logJoinFailed)
			continue
		}
		t.Logf("%s: %s", tc.n.Name, lines[0])
		if !strings.Contains(lines[0], tc.why) {
			t.Errorf("%s's join failure does not say %q: %s", tc.n.Name, tc.why, lines[0])
		}
	}
	for _, why := range []string{"no installed keys could decrypt", "not encrypted"} {
		if got := linesInLog(t, first[0], why); len(got) > 0 {
			t.Logf("%s (seed): %s", first[0].Name, got[0])
		}
	}
	submitOnce(t, ctx, c, "member-gossip:2:0123456789abcdef", rightKey.HTTPAddr)
}

// Two managers that are each other's only seed (localcluster gives manager1
// the second manager as its seed, every other manager the first) restart at
// the same time, as in a power cycle of their rack: each can reach only the
// other when it starts. Raft heals by itself (the peers' addresses are in its
// configuration), but gossip must heal too: the leader must see all three
// managers alive, so that it neither removes a healthy voter nor holds a dead
// one back, through the grace period and a reconcile round.
//
// manager3 is paused (SIGSTOP) while the two restart, so that the leader is
// one of them: the case where the leader's own pool is the fragment.
func TestMembershipSeedsRestartedTogetherRejoin(t *testing.T) {
	const grace = 2 * time.Second
	c := startCluster(t, 3, 0, func(o *localcluster.Options) {
		o.ManagerEnv = append(o.ManagerEnv, fmt.Sprintf("MANAGER_DEAD_SERVER_GRACE_SECONDS=%d", int(grace/time.Second)))
	})
	ctx := ctxFor(t, time.Minute)
	waitAgreement(t, ctx, c, c.Managers)
	submitOnce(t, ctx, c, "member-seeds:1:0123456789abcdef", rpcAddrs(c.Managers...)...)
	pair, other := c.Managers[:2], c.Managers[2]

	var wg sync.WaitGroup
	for _, n := range pair {
		wg.Add(1)
		go func() { defer wg.Done(); n.Stop(15 * time.Second) }()
	}
	wg.Wait()
	const removing, atRisk = `msg="removing server"`, `msg="not removing server: quorum would be at risk"`
	removalsBefore, risksBefore := countInLogs(t, c.Managers, removing), countInLogs(t, c.Managers, atRisk)
	if err := other.Pause(); err != nil {
		t.Fatal(err)
	}
	for _, n := range pair {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, left(ctx), labeled("one of "+strings.Join(names(pair), ", ")+" leads", func() (bool, string) {
		_, err := c.Leader(ctx)
		return err == nil, fmt.Sprint(err)
	}))
	if err := other.Resume(); err != nil {
		t.Fatal(err)
	}
	a := waitAgreement(t, ctx, c, c.Managers)
	submitOnce(t, ctx, c, "member-seeds:2:0123456789abcdef", rpcAddrs(c.Managers...)...)

	window := grace + autopilot.DefaultReconcileInterval + 2*time.Second
	until := time.Now().Add(window)
	testutil.WaitFor(t, left(ctx), labeled(fmt.Sprintf("%v of one leader and three voters", window), func() (bool, string) {
		if _, ok, why := lookAgreement(ctx, c, c.Managers, names(c.Managers)); !ok {
			t.Fatalf("leader %s: the three managers stopped agreeing: %s", a.leader.Name, why)
		}
		return time.Now().After(until), ""
	}))
	removals, risks := countInLogs(t, c.Managers, removing), countInLogs(t, c.Managers, atRisk)
	for _, n := range c.Managers {
		if removals[n.Name] > removalsBefore[n.Name] || risks[n.Name] > risksBefore[n.Name] {
			t.Errorf("%s tried to remove a manager after the restart (it does not see all three alive): %q",
				n.Name, append(linesInLog(t, n, removing), linesInLog(t, n, atRisk)...))
		}
	}
}

// Managers that were removed — one left with MANAGER_LEAVE_ON_TERMINATE, one
// was killed and removed after the grace period — and start again on their
// data directories are voters again ("one that comes back after it was
// removed is added again as a voter", docs/operations.md). They happen to be
// each other's seeds, so when they start each can reach only the other, and
// the survivors know them only as departed.
func TestMembershipRemovedManagersComeBack(t *testing.T) {
	const grace = 2 * time.Second
	c := startCluster(t, 4, 0, func(o *localcluster.Options) {
		o.ManagerEnv = append(o.ManagerEnv, "MANAGER_LEAVE_ON_TERMINATE=true",
			fmt.Sprintf("MANAGER_DEAD_SERVER_GRACE_SECONDS=%d", int(grace/time.Second)))
	})
	ctx := ctxFor(t, 4*time.Minute)
	deadline, _ := ctx.Deadline() // left(ctx) is hidden by the manager named left
	waitAgreement(t, ctx, c, c.Managers)
	left, dead, rest := c.Managers[0], c.Managers[1], c.Managers[2:]
	left.Stop(15 * time.Second)
	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	waitAgreement(t, ctx, c, rest)
	for _, n := range []*localcluster.Node{left, dead} {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	// The two restarted managers are each other's seed: they find the
	// other two when a survivor's reconnect round (every 5 s with the local
	// gossip profile) reaches the one that failed, and are then added back
	// as voters (well under a second: see the fourth-manager test). 3-13 s
	// in eight runs on a loaded 2-core machine (one or more rounds), once
	// more than 20 s, and once more than 45 s with other test binaries
	// compiling beside it; 90 s leaves room for many missed rounds.
	a := waitAgreement(t, ctxFor(t, 90*time.Second), c, c.Managers)
	// Through the manager that left: it forwards to the leader once its
	// gossip has brought the leader's RPC address (the manager re-reads its
	// peers on every membership event and every 5 s). The agreement above
	// can come first: Raft reached the manager before gossip did. Once it
	// took longer than one submission's 10 s budget; the gossip rounds that
	// bring the leader's address are the ones the agreement above may wait
	// for well beyond 45 s, so the wait has the rest of the test's deadline.
	cl := c.RPCClient(rpc.ClientConfig{Resolver: rpc.StaticResolver([]string{left.HTTPAddr}), AttemptTimeout: 2 * time.Second})
	defer cl.CloseIdleConnections()
	took := testutil.WaitFor(t, time.Until(deadline), func() (bool, string) {
		sctx, cancel := context.WithTimeout(ctx, submitBudget)
		defer cancel()
		r, err := submitKey(sctx, cl, "member-comeback:1:0123456789abcdef")
		return err == nil && r.Outcome == rpc.OutcomeCommitted, fmt.Sprintf("a submission through %s to commit (%+v, %v)", left.Name, r, err)
	})
	t.Logf("leader %s; served through %s after %s", a.leader.Name, left.Name, took)
	killLeaving(t, c)
}
