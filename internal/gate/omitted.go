package gate

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/once-dev/once/internal/fingerprint"
	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/internal/tracing"
	"github.com/once-dev/once/pkg/api"
)

// An omitted datacenters list in a federation (docs/multidc.md, "An omitted
// list in a federation"). The job runs in one datacenter, its home: the
// gate's own, unless the key is already held for another. Before the home
// admits it, every other datacenter of the federation records a claim on the
// key for the home (same job ID, same expiry, no job), so that a retry
// through any gate of any datacenter finds the key and is answered by the
// home: the first answer, never a second job.

// maxHomeRounds bounds how many homes one submission tries (its own
// datacenter's, or the home of a claim its datacenter holds, and then the
// homes that claims it meets name) when its view knows fewer datacenters.
// Each next home sorts before the last (a claim gives way to one for a home
// that sorts first, ledger.Claim), so one round per datacenter is enough.
const maxHomeRounds = 3

// federated reports whether the gate knows a datacenter other than its own:
// otherDatacenters is not empty, without sorting or allocating (it runs on
// every submission).
func (g *Gate) federated() bool {
	if g.federation == nil {
		return false
	}
	for dc := range g.federation.Datacenters() {
		if dc != g.cfg.Datacenter {
			return true
		}
	}
	return false
}

// otherDatacenters is the federation's datacenters but the gate's own,
// sorted; none when the gate has read no view, or a view of its datacenter
// alone.
func (g *Gate) otherDatacenters() []string {
	if g.federation == nil {
		return nil
	}
	return slices.DeleteFunc(slices.Sorted(maps.Keys(g.federation.Datacenters())),
		func(dc string) bool { return dc == g.cfg.Datacenter })
}

// claimedError is the refusal of a submission whose key is held for a job of
// another home datacenter that this submission could not get an answer from
// (two first attempts raced through gates of different datacenters, and the
// other one wins the key): 422, never cached.
type claimedError struct{ home string }

func (e *claimedError) Error() string {
	return fmt.Sprintf("the key is held for a job of datacenter %s", e.home)
}

// submitOmitted runs an omitted-list submission in a federation: it finds the
// home (the gate's datacenter, or the home its datacenter's claim names),
// then runs the home's round (homeRound), and when a round meets a claim for
// another home, that home's round, at most maxHomeRounds in all.
//
// rest is the body's members but datacenters (restMembers): the home's
// copy carries the fingerprint of the list naming the home alone
// (AltFingerprint), the same request (docs/multidc.md).
func (g *Gate) submitOmitted(ctx context.Context, req *rpcpb.SubmitRequest, rest []byte) (*rpcpb.SubmitResponse, error) {
	home := g.cfg.Datacenter
	// A read, bounded as one forward: a datacenter that does not answer it
	// will not admit the job either, and the claims are tried anyway.
	pctx, cancel := context.WithTimeout(ctx, g.cfg.ForwardTimeout)
	info, err := g.client.GetKey(pctx, req.Tenant, req.Key)
	cancel()
	if err == nil && info.State == api.KeyStateClaimed && info.Home != "" {
		home = info.Home // an earlier attempt went through another datacenter's gate
	}
	if req.ExpiryBasisUnixNanos == 0 {
		req.ExpiryBasisUnixNanos = g.now().UnixNano()
	}
	for range max(maxHomeRounds, len(g.otherDatacenters())+1) {
		resp, next, err := g.homeRound(ctx, req, home, rest)
		if err != nil || next == "" {
			return resp, err
		}
		home = next
	}
	return nil, &claimedError{home: home}
}

// homeRound submits the job with home as its home: first as a claim to
// every other datacenter of the federation, concurrently, then — once every
// one holds the claim for home — to home itself. It answers:
//
//   - the outcome of a datacenter that holds the job itself (committed or
//     rejected): the job's home answered, a replay; nothing else is asked;
//   - a datacenter's failure (unreachable, full): that error, nothing cached;
//     what was claimed stays, and a retry completes the rest;
//   - key_reused before in_progress, as for several datacenters;
//   - a claim for another home, in a datacenter or at home (which lost the
//     key to it): next is that home, for the caller to try;
//   - else home's outcome.
func (g *Gate) homeRound(ctx context.Context, req *rpcpb.SubmitRequest, home string, rest []byte) (resp *rpcpb.SubmitResponse, next string, err error) {
	// A claim records no job: it goes without the payload, which only the
	// home's copy carries.
	r := shallowCopy(req)
	r.Home = home
	r.Job = &rpcpb.JobRequest{Type: req.GetJob().GetType(), Datacenters: []string{home}}
	dcs := slices.DeleteFunc(append(g.otherDatacenters(), g.cfg.Datacenter), func(dc string) bool { return dc == home })
	slices.Sort(dcs)
	// Each datacenter is told the fingerprint of the list naming it alone:
	// one that holds the key for its own job of that list holds the job
	// (docs/multidc.md).
	alts := altFingerprints(req.Tenant, rest, append(dcs, home))
	alt := func(dc string) string { return alts[dc] }
	// A claim's answer is asked with the payload: a datacenter holding the
	// job itself answers with it, and that answer is the client's.
	results := g.submitEach(ctx, dcs, func(_ int, dc string) *rpcpb.SubmitRequest {
		c := shallowCopy(r)
		c.AltFingerprint = alt(dc)
		return c
	}, "gate.forward.claim")
	for _, res := range results { // a datacenter holding the job is its home
		if res.err == nil && (res.resp.Outcome == rpc.OutcomeCommitted || res.resp.Outcome == rpc.OutcomeRejected) {
			return res.resp, "", nil
		}
	}
	if err := firstFailure(results); err != nil {
		return nil, "", err
	}
	if resp := firstNonOutcome(results); resp != nil {
		return resp, "", nil
	}
	for _, res := range results {
		switch {
		case res.resp.Outcome != rpc.OutcomeClaimed:
			return nil, "", rpc.Errorf(rpc.CodeInternal, "datacenter %s answered an unknown outcome %q to a claim", res.dc, res.resp.Outcome)
		case res.resp.Home != home:
			return nil, res.resp.Home, nil
		}
	}
	at := shallowCopy(r)
	at.Job = &rpcpb.JobRequest{Type: r.Job.Type, Payload: req.GetJob().GetPayload(), Datacenters: r.Job.Datacenters}
	at.AltFingerprint = alt(home)
	res := g.submitTo(ctx, home, at, "gate.forward.home")
	switch {
	case res.err != nil:
		return nil, "", &datacenterError{dc: home, err: res.err}
	case res.resp.Outcome == rpc.OutcomeClaimed && res.resp.Home != home:
		return nil, res.resp.Home, nil
	case res.resp.Outcome == rpc.OutcomeClaimed:
		return nil, "", rpc.Errorf(rpc.CodeInternal, "datacenter %s answered its own claim", home)
	}
	return res.resp, "", nil
}

// altFingerprints maps each datacenter of dcs to the fingerprint of the
// list naming it alone, over the body withDatacenters(rest, []string{dc})
// makes. The bodies share one buffer, rest copied into it once whatever the
// number of datacenters, each one's first member written before it in turn.
func altFingerprints(tenant string, rest []byte, dcs []string) map[string]string {
	heads := make([][]byte, len(dcs))
	lead := 0
	for i, dc := range dcs {
		heads[i] = withDatacenters(nil, []string{dc})
		if len(rest) > 0 && rest[0] != '}' {
			heads[i] = append(heads[i], ',')
		}
		lead = max(lead, len(heads[i]))
	}
	buf := make([]byte, lead+len(rest))
	copy(buf[lead:], rest)
	alts := make(map[string]string, len(dcs))
	for i, dc := range dcs {
		body := buf[lead-len(heads[i]):]
		copy(body, heads[i])
		alts[dc] = fingerprint.Fingerprint(tenant, http.MethodPost, submitPath, body)
	}
	return alts
}

// submitTo sends a copy of req to dc's leader in a span of its own.
func (g *Gate) submitTo(ctx context.Context, dc string, req *rpcpb.SubmitRequest, span string) dcResult {
	if g.testHookSubmitTo != nil {
		g.testHookSubmitTo(dc)
	}
	dctx, sp := tracing.Span(ctx, span, trace.WithAttributes(attribute.String("once.datacenter", dc)))
	defer sp.End()
	r := shallowCopy(req)
	r.TraceParent = tracing.Inject(dctx)
	resp, err := g.clientFor(dc).Submit(dctx, r)
	if err != nil {
		sp.SetStatus(codes.Error, err.Error())
	}
	return dcResult{dc: dc, resp: resp, err: err}
}
