package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/tests/localcluster"
)

// The fault-injection manager (tests/cmd/oncemanager-faults, run for managers
// with Options.Failpoints) is the real manager plus its failpoints: a
// follower's clock can be shifted, leadership moved to it, and its clock set
// right again; the product's manager binary serves none of these endpoints.
func TestFaultManagerClockSkewAndLeadershipTransfer(t *testing.T) {
	c := startCluster(t, 3, 0, func(o *localcluster.Options) { o.Failpoints = true })
	ctx := ctxFor(t, 2*time.Minute)
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var target *localcluster.Node
	for _, m := range c.Managers {
		if m != leader {
			target = m
			break
		}
	}
	clockOf := func(n *localcluster.Node) string {
		t.Helper()
		resp, err := c.HTTPClient().Get(c.ManagerURL(n, "/debug/failpoints/clock"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Offset string `json:"offset"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET clock of %s: HTTP %d %v", n.Name, resp.StatusCode, err)
		}
		return body.Offset
	}
	if err := c.SetClockOffset(ctx, target, -7*time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := clockOf(target); got != "-7m0s" {
		t.Fatalf("%s's clock offset is %s, want -7m0s", target.Name, got)
	}
	if err := c.TransferLeadership(ctx, target); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		l, err := c.Leader(ctx)
		return err == nil && l == target, "the skewed " + target.Name + " to lead"
	})
	if err := c.SetClockOffset(ctx, target, 0); err != nil {
		t.Fatal(err)
	}
	if got := clockOf(target); got != "0s" {
		t.Fatalf("%s's clock offset is %s after the heal, want 0s", target.Name, got)
	}
}

// The product's manager has no failpoints.
func TestProductManagerHasNoFailpoints(t *testing.T) {
	c := startCluster(t, 1, 0, nil)
	ctx := ctxFor(t, time.Minute)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	err := c.SetClockOffset(ctx, c.Managers[0], time.Minute)
	if err == nil {
		t.Fatal("the product manager accepted a clock failpoint")
	}
	resp, gerr := c.HTTPClient().Get(c.ManagerURL(c.Managers[0], "/debug/failpoints/partition"))
	if gerr != nil {
		t.Fatal(gerr)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /debug/failpoints/partition on the product manager: HTTP %d, want 404", resp.StatusCode)
	}
}
