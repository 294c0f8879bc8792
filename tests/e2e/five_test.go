package e2e

// Five real manager processes (every other membership test runs three or
// four): two killed at once, a paused one, a wiped data directory, while
// submissions go on. What docs/operations.md promises for 5 voters: 3 of 5
// keep serving, the dead are removed after the grace period (and never a
// majority), and those that come back are voters again, in the one group
// bootstrapped at the start.

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/tests/localcluster"
)

func TestMembershipFiveManagers(t *testing.T) {
	const grace = 2 * time.Second
	c := startCluster(t, 5, 0, func(o *localcluster.Options) {
		o.ManagerEnv = append(o.ManagerEnv, fmt.Sprintf("MANAGER_DEAD_SERVER_GRACE_SECONDS=%d", int(grace/time.Second)))
	})
	ctx := ctxFor(t, 2*time.Minute)
	a := waitAgreement(t, ctx, c, c.Managers)
	assertOneBootstrap(t, c)
	sub := startSubmitter(ctx, c, rpcAddrs(c.Managers...), "member-five")
	sub.progress(t, ctx, 5, "with five voters")

	others := func(leader *localcluster.Node, out ...*localcluster.Node) []*localcluster.Node {
		var rest []*localcluster.Node
		for _, n := range c.Managers {
			if n != leader && !slices.Contains(out, n) {
				rest = append(rest, n)
			}
		}
		return rest
	}
	except := func(out ...*localcluster.Node) []*localcluster.Node {
		return slices.DeleteFunc(slices.Clone(c.Managers), func(n *localcluster.Node) bool { return slices.Contains(out, n) })
	}

	// Two followers killed together: the three left serve, and remove both
	// after the grace period.
	dead := others(a.leader)[:2]
	for _, n := range dead {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	t.Logf("killed -9 %v; leader %s", names(dead), a.leader.Name)
	sub.progress(t, ctx, 5, "with two of five killed")
	b := waitAgreement(t, ctx, c, except(dead...))
	if took := time.Since(killed); took < grace {
		t.Errorf("%v removed %v after kill -9, before the %v grace period", names(dead), took, grace)
	}
	for _, n := range dead {
		if got := removalLines(t, c, n); len(got) == 0 || !strings.Contains(got[0], "reason=failed") {
			t.Errorf("%s was not removed as a failed manager: %q", n.Name, got)
		}
	}

	// They come back on their data: voters again.
	for _, n := range dead {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	b = waitAgreement(t, ctx, c, c.Managers)
	sub.progress(t, ctx, 5, "after the two came back")

	// A follower paused past failure detection and the grace period is
	// removed; continued, it is a voter again.
	paused := others(b.leader)[0]
	if err := paused.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Logf("paused %s; leader %s", paused.Name, b.leader.Name)
	waitAgreement(t, ctx, c, except(paused))
	if err := paused.Resume(); err != nil {
		t.Fatal(err)
	}
	b = waitAgreement(t, ctx, c, c.Managers)
	sub.progress(t, ctx, 5, "after the paused manager continued")

	// A follower whose data directory is wiped comes back as the one server
	// of its ID, in the same group.
	wiped := others(b.leader)[0]
	if err := wiped.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(wiped.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := wiped.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s restarted with its data directory wiped", wiped.Name)
	waitAgreement(t, ctx, c, c.Managers)
	sub.progress(t, ctx, 5, "after the wiped manager came back")
	assertOneBootstrap(t, c)
	sub.finish(t, ctx, c.RPCClient(rpc.ClientConfig{Resolver: rpc.StaticResolver(rpcAddrs(c.Managers...))}))
}
