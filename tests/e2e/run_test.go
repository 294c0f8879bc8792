package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

// make run's status screen: a line when the cluster comes up, and a line for
// each change — the leader killed shows as down and a new leader in a new
// term — and nothing while nothing changes.
func TestRunStatusFollowsTheCluster(t *testing.T) {
	c := startCluster(t, 3, 1, nil)
	var out testutil.Buffer
	c.WriteSummary(&out, false)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.WatchStatus(ctx, &out, 100*time.Millisecond)
	}()
	defer func() { cancel(); <-done }()

	leader, err := c.WaitLeader(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		s := out.String()
		return strings.Contains(s, "leader "+leader.Name+" (term") && strings.Contains(s, "all processes up"), "a status line naming the leader:\n" + s
	})
	for _, want := range []string{"once is running", "curl -si -XPOST localhost:", leader.LogPath} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, out.String())
		}
	}
	lines := strings.Count(out.String(), "\n")
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, func() (bool, string) {
		s := out.String()
		for _, line := range strings.Split(s, "\n") {
			if strings.Contains(line, "down: "+leader.Name) && strings.Contains(line, "leader manager") && !strings.Contains(line, "leader "+leader.Name+" ") {
				return true, ""
			}
		}
		return false, "a status line with the old leader down and a new leader:\n" + s
	})
	if strings.Count(out.String(), "\n") <= lines {
		t.Fatalf("no new line after the kill:\n%s", out.String())
	}
	t.Logf("\n%s", out.String())
}
