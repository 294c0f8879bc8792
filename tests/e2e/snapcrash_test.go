package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/tests/localcluster"
)

// snapLoad submits keys with payloads big enough that a snapshot of the
// ledger takes a while to write and to restore, retrying each key until it
// is answered Committed, as a client does, and remembers every answer: a key
// answered with two job IDs fails the test.
type snapLoad struct {
	t   *testing.T
	cl  *rpc.Client
	pad string

	mu    sync.Mutex
	acked map[string]string
}

func newSnapLoad(t *testing.T, cl *rpc.Client) *snapLoad {
	return &snapLoad{t: t, cl: cl, pad: strings.Repeat("x", 24<<10), acked: map[string]string{}}
}

func (l *snapLoad) request(key string) *rpcpb.SubmitRequest {
	return &rpcpb.SubmitRequest{Tenant: "default", Key: key, Fingerprint: "fp-" + key, WaitMillis: 5000,
		Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`{"k":"` + key + `","pad":"` + l.pad + `"}`), Datacenters: []string{"dc1"}}}
}

// submit submits key until it is committed (or ctx ends: false) and records
// its job ID.
func (l *snapLoad) submit(ctx context.Context, key string) bool {
	for ctx.Err() == nil {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := l.cl.Submit(sctx, l.request(key))
		cancel()
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			continue // a leader killed, an election: the client asks again
		}
		l.mu.Lock()
		prev, ok := l.acked[key]
		l.acked[key] = r.JobId
		l.mu.Unlock()
		if ok && prev != r.JobId {
			l.t.Errorf("key %s answered with two job IDs: %s then %s", key, prev, r.JobId)
		}
		return true
	}
	return false
}

// fill submits n keys named prefix-i with 8 clients at once and returns
// when all are committed.
func (l *snapLoad) fill(ctx context.Context, prefix string, n int) {
	l.t.Helper()
	var wg sync.WaitGroup
	keys := make(chan string)
	for range 8 {
		wg.Go(func() {
			for k := range keys {
				l.submit(ctx, k)
			}
		})
	}
	for i := range n {
		keys <- fmt.Sprintf("%s-%d", prefix, i)
	}
	close(keys)
	wg.Wait()
	if ctx.Err() != nil {
		l.t.Fatalf("filling %s: %v", prefix, ctx.Err())
	}
}

// background submits keys named prefix-i one after another until stop is
// called, which returns once the key in flight is answered.
func (l *snapLoad) background(ctx context.Context, prefix string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if !l.submit(ctx, fmt.Sprintf("%s-%d", prefix, i)) {
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// verify resubmits every acknowledged key: each is answered as a replay of
// the job it was acknowledged with.
func (l *snapLoad) verify(ctx context.Context, stage string) {
	l.t.Helper()
	l.mu.Lock()
	acked := make(map[string]string, len(l.acked))
	for k, v := range l.acked {
		acked[k] = v
	}
	l.mu.Unlock()
	for key, id := range acked {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		r, err := l.cl.Submit(sctx, l.request(key))
		cancel()
		if err != nil {
			l.t.Fatalf("%s: resubmit %s: %v", stage, key, err)
		}
		if r.JobId != id || r.Outcome != rpc.OutcomeCommitted || !r.Replayed {
			l.t.Fatalf("%s: key %s: got %s (%s, replayed=%v), acknowledged %s", stage, key, r.JobId, r.Outcome, r.Replayed, id)
		}
	}
	l.t.Logf("%s: %d acknowledged keys answered as replays of their jobs", stage, len(acked))
}

func globCount(t *testing.T, pattern string) int {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

func snapshotNames(t *testing.T, n *localcluster.Node) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(n.DataDir, "raft", "snapshots"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	return names
}

// killWhen kill -9s n as soon as cond holds, polling it every millisecond
// until ctx ends; the channel says whether it did.
func killWhen(ctx context.Context, t *testing.T, n *localcluster.Node, cond func() bool) <-chan bool {
	killed := make(chan bool, 1)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if cond() {
				if err := n.Kill(); err != nil {
					t.Errorf("kill %s: %v", n.Name, err)
				}
				killed <- true
				return
			}
			select {
			case <-ctx.Done():
				killed <- false
				return
			case <-tick.C:
			}
		}
	}()
	return killed
}

// TestKillNineMidSnapshotLosesNothing: real manager processes under load,
// on each ledger store. (a) The leader is killed (-9) while it persists a
// snapshot of its own (an operator's snapshot save: the kill comes as soon
// as its unfinished snapshot appears in raft/snapshots), restarted on its
// data directory, and the unfinished snapshot is gone. (b) A follower
// killed, left behind while the leader compacted its log past it, is
// restarted, receives the leader's snapshot, and is killed (-9) while its
// ledger restores it (on disk: as soon as the new generation of the ledger
// appears beside the current one; in memory: as soon as the received
// snapshot is complete in its store), then restarted on its data
// directory and made leader. After each, every key acknowledged before the
// kill is answered as a replay of its one job, and the cluster admits
// more.
func TestKillNineMidSnapshotLosesNothing(t *testing.T) {
	for _, store := range []string{"disk", "memory"} {
		t.Run(store, func(t *testing.T) { killNineMidSnapshot(t, store) })
	}
}

func killNineMidSnapshot(t *testing.T, store string) {
	c := startCluster(t, 3, 0, func(o *localcluster.Options) {
		o.Failpoints = true
		o.ManagerEnv = append(o.ManagerEnv, "MANAGER_LEDGER_STORE="+store, "MANAGER_RAFT_TRAILING_LOGS=16")
	})
	ctx := ctxFor(t, 6*time.Minute)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	cl := managerClient(c)
	defer cl.CloseIdleConnections()
	load := newSnapLoad(t, cl)
	load.fill(ctx, "fill", 800)

	// (a) The leader killed while it persists its snapshot.
	stop := load.background(ctx, "load-a")
	var victim *localcluster.Node
	for attempt := 1; victim == nil; attempt++ {
		if attempt > 5 {
			t.Fatal("five snapshots persisted before their unfinished directory was seen")
		}
		leader, err := c.WaitLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(leader.DataDir, "raft", "snapshots", "*.tmp")
		sctx, cancel := context.WithCancel(ctx)
		killed := killWhen(sctx, t, leader, func() bool { return globCount(t, tmp) > 0 })
		op := c.ManagerClient(leader, c.OperatorSecret())
		err = op.Snapshot(sctx, io.Discard)
		cancel()
		op.CloseIdleConnections()
		if <-killed {
			victim = leader
			t.Logf("killed leader %s while it persisted a snapshot (attempt %d; save: %v)", leader.Name, attempt, err)
			break
		}
		load.fill(ctx, fmt.Sprintf("more-%d", attempt), 20) // something new to snapshot
	}
	if n := globCount(t, filepath.Join(victim.DataDir, "raft", "snapshots", "*.tmp")); n == 0 {
		t.Fatal("no unfinished snapshot left by the kill")
	}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	// It serves its status once started: its snapshot store was opened
	// (and cleaned) before.
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		_, err := c.Status(ctx, victim)
		return err == nil, fmt.Sprintf("%s to answer its status after the restart", victim.Name)
	})
	if tmp := globCount(t, filepath.Join(victim.DataDir, "raft", "snapshots", "*.tmp")); tmp != 0 {
		t.Fatalf("%d unfinished snapshots left in %s after its restart", tmp, victim.Name)
	}
	stop()
	load.verify(ctx, "after the leader's kill mid-persist")
	load.fill(ctx, "after-a", 20)

	// (b) A follower far behind killed while it restores the leader's
	// snapshot.
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var f *localcluster.Node
	for _, m := range c.Managers {
		if m != leader {
			f = m
			break
		}
	}
	if err := f.Kill(); err != nil {
		t.Fatal(err)
	}
	load.fill(ctx, "behind", 200)
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		leader, err := c.WaitLeader(ctx)
		if err != nil {
			return false, err.Error()
		}
		op := c.ManagerClient(leader, c.OperatorSecret())
		defer op.CloseIdleConnections()
		if err := op.Snapshot(ctx, io.Discard); err != nil {
			return false, "a snapshot on the leader, which compacts its log past the follower: " + err.Error()
		}
		return true, ""
	})
	load.fill(ctx, "after-snapshot", 20)
	stop = load.background(ctx, "load-b")
	before := snapshotNames(t, f)
	restoring := func() bool {
		if store == "disk" {
			return globCount(t, filepath.Join(f.DataDir, "ledger", "gen-*")) >= 2
		}
		for name := range snapshotNames(t, f) {
			if !before[name] && !strings.HasSuffix(name, ".tmp") {
				return true
			}
		}
		return false
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	if !<-killWhen(ctx, t, f, restoring) {
		t.Fatalf("%s never began to restore the leader's snapshot", f.Name)
	}
	t.Logf("killed follower %s while it restored the leader's snapshot (ledger generations left: %d)",
		f.Name, globCount(t, filepath.Join(f.DataDir, "ledger", "gen-*")))
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, left(ctx), func() (bool, string) {
		if err := c.TransferLeadership(ctx, f); err != nil {
			return false, fmt.Sprintf("leadership to %s: %v", f.Name, err)
		}
		l, err := c.WaitLeader(ctx)
		return err == nil && l == f, fmt.Sprintf("%s to lead", f.Name)
	})
	stop()
	load.verify(ctx, fmt.Sprintf("after the follower's kill mid-restore, %s leading", f.Name))
	if l, err := c.WaitLeader(ctx); err != nil || l != f {
		t.Logf("leadership moved during the check (%v, %v): it checked the leader's answers all the same", l, err)
	}
	load.fill(ctx, "after-b", 20)
}
