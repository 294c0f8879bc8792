package manager

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/testutil"
)

// wireCluster is one manager served by rpc.NewServer on 127.0.0.1, and a
// client of it that makes one attempt per call (an answer that is not
// definite fails at once instead of being retried to the deadline).
func wireCluster(t *testing.T) (*testCluster, *rpc.Client) {
	t.Helper()
	tc := newTestCluster(t, 1, func(c *Config) {
		c.RPCAddr = fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
		c.RPCAdvertise = c.RPCAddr
	})
	serveRPC(t, tc)
	c := rpc.NewClient(rpc.ClientConfig{Resolver: rpc.StaticResolver{tc.cfgs[0].RPCAdvertise}, MaxAttempts: 1,
		AttemptTimeout: time.Minute})
	t.Cleanup(func() { c.Close() })
	return tc, c
}

// wireSubmission is a valid submission; each case of the tests below breaks
// one of its members.
func wireSubmission(key string) *rpcpb.SubmitRequest {
	return &rpcpb.SubmitRequest{Tenant: "t", Key: key, Fingerprint: "fp", WaitMillis: 1000,
		Job: &rpcpb.JobRequest{Type: "demo", Payload: []byte(`{"a":1}`), Datacenters: []string{"dc1"}}}
}

// TestBadWireInputsAreInvalidAndRecordNothing: every member of a request a
// manager takes from the wire that is out of its bounds (docs/rpc.md) is
// answered invalid, through the real RPC server, and nothing reaches the
// ledger: no command is proposed for it.
func TestBadWireInputsAreInvalidAndRecordNothing(t *testing.T) {
	tc, c := wireCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	submit := func(edit func(r *rpcpb.SubmitRequest)) func() error {
		return func() error {
			r := wireSubmission("k1")
			edit(r)
			_, err := c.Submit(ctx, r)
			return err
		}
	}
	lease := func(edit func(r *rpcpb.LeaseRequest)) func() error {
		return func() error {
			r := &rpcpb.LeaseRequest{Tenant: "t", Worker: "w", MaxJobs: 1}
			edit(r)
			_, err := c.Lease(ctx, r)
			return err
		}
	}
	huge := strings.Repeat("x", 100<<10)
	cases := []struct {
		name string
		call func() error
	}{
		{"result_ttl_nanos max int64", submit(func(r *rpcpb.SubmitRequest) { r.ResultTtlNanos = math.MaxInt64 })},
		{"result_ttl_nanos 250 years", submit(func(r *rpcpb.SubmitRequest) { r.ResultTtlNanos = int64(250 * 365 * 24 * time.Hour) })},
		{"result_ttl_nanos negative", submit(func(r *rpcpb.SubmitRequest) { r.ResultTtlNanos = -1 })},
		{"wait_millis negative", submit(func(r *rpcpb.SubmitRequest) { r.WaitMillis = -1 })},
		{"job type not a name", submit(func(r *rpcpb.SubmitRequest) { r.Job.Type = "a b" })},
		{"job type too long", submit(func(r *rpcpb.SubmitRequest) { r.Job.Type = strings.Repeat("a", 129) })},
		{"payload not JSON", submit(func(r *rpcpb.SubmitRequest) { r.Job.Payload = []byte(`{"a":`) })},
		{"payload over the body bound", submit(func(r *rpcpb.SubmitRequest) {
			r.Job.Payload = []byte(`"` + strings.Repeat("x", rpc.MaxBodyBytes) + `"`)
		})},
		{"tenant huge", submit(func(r *rpcpb.SubmitRequest) { r.Tenant = huge })},
		{"fingerprint huge", submit(func(r *rpcpb.SubmitRequest) { r.Fingerprint = huge })},
		{"empty datacenter", submit(func(r *rpcpb.SubmitRequest) { r.Job.Datacenters = []string{"", "dc1"} })},
		{"datacenter not a name", submit(func(r *rpcpb.SubmitRequest) { r.Job.Datacenters = []string{"dc 2", "dc1"} })},
		{"too many datacenters", submit(func(r *rpcpb.SubmitRequest) {
			r.Job.Datacenters = nil
			for i := range 17 {
				r.Job.Datacenters = append(r.Job.Datacenters, fmt.Sprintf("dc%02d", i))
			}
			r.Job.Datacenters[1] = "dc1"
			slices.Sort(r.Job.Datacenters)
		})},
		{"home not a name", submit(func(r *rpcpb.SubmitRequest) { r.Job.Datacenters, r.Home = []string{"d c"}, "d c" })},
		{"carrier not a name", submit(func(r *rpcpb.SubmitRequest) { r.Carried, r.Carrier = true, "d c" })},
		{"lease worker too long", lease(func(r *rpcpb.LeaseRequest) { r.Worker = strings.Repeat("w", 129) })},
		{"lease type not a name", lease(func(r *rpcpb.LeaseRequest) { r.Types = []string{"a b"} })},
		{"lease wait negative", lease(func(r *rpcpb.LeaseRequest) { r.WaitNanos = -1 })},
		{"lease wait over a minute", lease(func(r *rpcpb.LeaseRequest) { r.WaitNanos = int64(61 * time.Second) })},
		{"lease_for negative", lease(func(r *rpcpb.LeaseRequest) { r.LeaseForNanos = -1 })},
		{"lease_for max int64", lease(func(r *rpcpb.LeaseRequest) { r.LeaseForNanos = math.MaxInt64 })},
		{"lease request huge", lease(func(r *rpcpb.LeaseRequest) { r.Request = huge })},
		{"lease request longer than a key", lease(func(r *rpcpb.LeaseRequest) { r.Request = strings.Repeat("k", 256) })},
		{"lease fingerprint longer than a key", lease(func(r *rpcpb.LeaseRequest) { r.Request, r.Fingerprint = "k", strings.Repeat("f", 256) })},
		{"heartbeat huge", func() error {
			_, err := c.Heartbeat(ctx, &rpcpb.HeartbeatRequest{Tenant: "t", JobId: "j", LeaseId: huge})
			return err
		}},
		{"heartbeat lease_for max int64", func() error {
			_, err := c.Heartbeat(ctx, &rpcpb.HeartbeatRequest{Tenant: "t", JobId: "j", LeaseId: "l", LeaseForNanos: math.MaxInt64})
			return err
		}},
		{"cancel key huge", func() error {
			_, err := c.Cancel(ctx, &rpcpb.JobActionRequest{Tenant: "t", JobId: "j", Key: huge, Fingerprint: "fp"})
			return err
		}},
		{"cancel key quoted", func() error {
			_, err := c.Cancel(ctx, &rpcpb.JobActionRequest{Tenant: "t", JobId: "j", Key: `"k"`, Fingerprint: "fp"})
			return err
		}},
		{"retry key longer than a key", func() error {
			_, err := c.Retry(ctx, &rpcpb.JobActionRequest{Tenant: "t", JobId: "j", Key: strings.Repeat("k", 256), Fingerprint: "fp"})
			return err
		}},
		{"list status unknown", func() error {
			_, err := c.ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "t", Status: "bogus"})
			return err
		}},
		{"list cursor garbage", func() error {
			_, err := c.ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: "t", After: "%%%"})
			return err
		}},
	}
	l := tc.leader()
	for _, tt := range cases {
		last := tc.mgrs[l].Raft().LastIndex()
		if err := tt.call(); !errors.Is(err, rpc.ErrInvalid) {
			t.Errorf("%s: %v; want invalid", tt.name, err)
		}
		if cmds := tc.commandsSince(l, last); len(cmds) > 0 {
			t.Errorf("%s: proposed %v; want nothing", tt.name, cmds)
		}
	}
	if st := tc.mgrs[l].FSM().Stats(); st.Entries != 0 || st.Jobs != 0 {
		t.Fatalf("refused requests left %d entries and %d jobs", st.Entries, st.Jobs)
	}
}

// A submission's wait_millis longer than a time.Duration holds waits that
// long (until its deadline), not the wrapped product: a wait of
// math.MaxInt64 milliseconds wrapped to -1ms, and such a submission
// answered in_progress at once instead of waiting for the admission in
// flight.
func TestTheLargestSubmitWaitIsNotWrapped(t *testing.T) {
	for _, ms := range []int64{math.MaxInt64, math.MaxInt64 / 1000, int64(math.MaxInt64/time.Millisecond) + 1} {
		if got := submitWait(&rpcpb.SubmitRequest{WaitMillis: ms}); got != math.MaxInt64 {
			t.Errorf("wait_millis %d: a wait of %s, want %s", ms, got, time.Duration(math.MaxInt64))
		}
	}
	if got := submitWait(&rpcpb.SubmitRequest{WaitMillis: 1500}); got != 1500*time.Millisecond {
		t.Errorf("wait_millis 1500: a wait of %s", got)
	}
}

// TestOmitPayloadAnswersTheJobWithoutItsPayload: a submission with
// omit_payload is answered with its job without the payload, first and on
// a replay, and otherwise the same answer; the job keeps its payload, which
// an answer without the flag carries.
func TestOmitPayloadAnswersTheJobWithoutItsPayload(t *testing.T) {
	_, c := wireCluster(t)
	ctx := ctxT(t)
	lean := wireSubmission("k1")
	lean.OmitPayload = true
	first, err := c.Submit(ctx, lean)
	if err != nil || first.Outcome != rpc.OutcomeCommitted || first.Job == nil {
		t.Fatalf("%+v %v", first, err)
	}
	if len(first.Job.Payload) != 0 {
		t.Fatalf("the answer carries a payload of %q", first.Job.Payload)
	}
	whole, err := c.Submit(ctx, wireSubmission("k1"))
	if err != nil || !whole.Replayed || string(whole.Job.GetPayload()) != `{"a":1}` {
		t.Fatalf("a replay without omit_payload: %+v %v, want the job with its payload", whole, err)
	}
	again, err := c.Submit(ctx, lean)
	if err != nil || !again.Replayed || len(again.Job.GetPayload()) != 0 {
		t.Fatalf("a replay with omit_payload: %+v %v, want the job without its payload", again, err)
	}
	again.Job.Payload = whole.Job.Payload
	again.RemainingNanos = whole.RemainingNanos // counts down between the answers
	if !proto.Equal(again, whole) {
		t.Fatalf("with omit_payload and its payload put back:\n%v\nwithout:\n%v", again, whole)
	}
}
