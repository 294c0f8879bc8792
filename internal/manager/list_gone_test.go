package manager

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// TestListAgreesWithReadAtRetentionsEnd: a job past its retention, not yet
// removed by an Expire (none runs here), is neither read nor listed at the
// instant its retention ends, and both read and listed one nanosecond
// before: a user who lists then reads never gets a job then a 404. Pages of
// two, in either order, still hold two jobs while two follow.
func TestListAgreesWithReadAtRetentionsEnd(t *testing.T) {
	clock := newManualClock()
	tc := newTestCluster(t, 1, func(c *Config) {
		retainFor(time.Hour)(c)
		c.QueueJobs = false
		c.Idempotency.CleanupInterval = time.Hour // no Expire sweeps the job
	})
	tc.setNow(clock.Now)
	m := tc.mgrs[tc.leader()]
	ctx := ctxT(t)

	var ids []string
	for _, key := range []string{"k1", "k2", "k3"} {
		r, err := m.Submit(ctx, &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp-" + key,
			Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`1`), Datacenters: []string{"dc1"}}})
		if err != nil || r.Outcome != rpc.OutcomeCommitted {
			t.Fatalf("%s: %+v %v", key, r, err)
		}
		ids = append(ids, r.JobId)
		clock.Advance(time.Second) // k1's job expires before the others
	}
	first, ok := m.FSM().Job("t", ids[0])
	if !ok || first.ExpiresAt == 0 {
		t.Fatalf("the first job: %+v %v, want one that expires", first, ok)
	}
	list := func(desc bool) (listed []string, pages int) {
		t.Helper()
		req := &rpcpb.ListJobsRequest{Tenant: "t", Limit: 2, Desc: desc}
		for {
			page, err := m.ListJobs(ctx, req)
			if err != nil {
				t.Fatalf("list (desc %v): %v", desc, err)
			}
			pages++
			for _, j := range page.Jobs {
				listed = append(listed, j.JobId)
			}
			if page.Next == "" {
				return listed, pages
			}
			req.After = page.Next
		}
	}
	check := func(when string, want []string) {
		t.Helper()
		for _, id := range ids {
			_, err := m.GetJob(ctx, "t", id)
			if read := err == nil; read != slices.Contains(want, id) {
				t.Fatalf("%s: job %s read %v (%v), want %v", when, id, read, err, !read)
			} else if err != nil && !errors.Is(err, rpc.ErrNotFound) {
				t.Fatalf("%s: job %s: %v, want not found", when, id, err)
			}
		}
		wantPages := (len(want) + 1) / 2
		if listed, pages := list(false); !reflect.DeepEqual(listed, want) || pages != wantPages {
			t.Fatalf("%s: listed %v in %d pages, want %v in %d", when, listed, pages, want, wantPages)
		}
		if listed, pages := list(true); !reflect.DeepEqual(listed, reversedIDs(want)) || pages != wantPages {
			t.Fatalf("%s newest first: listed %v in %d pages, want %v in %d", when, listed, pages, reversedIDs(want), wantPages)
		}
	}
	clock.Advance(time.Duration(first.ExpiresAt - clock.Now().UnixNano() - 1))
	check("one nanosecond before the first job's retention ends", ids)
	clock.Advance(time.Nanosecond)
	check("at the instant the first job's retention ends", ids[1:])
	if _, ok := m.FSM().Job("t", ids[0]); !ok {
		t.Fatal("the first job was swept: the test no longer looks at a job past its retention yet in the ledger")
	}
}

func reversedIDs(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}
