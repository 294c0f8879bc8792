package gate

import (
	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// A manager answers in the wire's messages (rpcpb); a client is answered in
// pkg/api's JSON. These are the one place a job, a lease, a heartbeat's
// answer and a key's entry turn from the one into the other.

// apiJob is pj as the API shows it: every member; an empty payload, result
// or named datacenters as none; no datacenters member unless the manager
// set one (datacenters_set), an empty one then too.
func apiJob(pj *rpcpb.Job) api.Job {
	j := api.Job{
		JobID:          pj.GetJobId(),
		Type:           pj.GetType(),
		Status:         pj.GetStatus(),
		IdempotencyKey: pj.GetIdempotencyKey(),
		CreatedAt:      pj.GetCreatedAt(),
		State:          pj.GetState(),
		Attempts:       int(pj.GetAttempts()),
		Error:          pj.GetError(),
	}
	if len(pj.GetPayload()) > 0 {
		j.Payload = pj.GetPayload()
	}
	if len(pj.GetResult()) > 0 {
		j.Result = pj.GetResult()
	}
	if len(pj.GetNamedDatacenters()) > 0 {
		j.NamedDatacenters = pj.GetNamedDatacenters()
	}
	if pj.GetDatacentersSet() {
		j.Datacenters = make(map[string]api.DatacenterStatus, len(pj.GetDatacenters()))
		for dc, st := range pj.GetDatacenters() {
			j.Datacenters[dc] = api.DatacenterStatus{Status: st.GetStatus(), Reason: st.GetReason()}
		}
	}
	return j
}

// jobBody renders j as an answer's body: the bytes json.Marshal gives (an
// error where it would fail: a payload or result that is not valid JSON),
// then a newline, written without reflection into one buffer sized for it.
func jobBody(j api.Job) ([]byte, error) {
	// The members' names and punctuation take under 200 bytes; a
	// value that needs escaping makes append grow the buffer.
	n := 200 + len(j.JobID) + len(j.Type) + len(j.Status) + len(j.IdempotencyKey) + len(j.CreatedAt) +
		len(j.Payload) + len(j.State) + len(j.Result) + len(j.Error)
	for dc, st := range j.Datacenters {
		n += 32 + len(dc) + len(st.Status) + len(st.Reason)
	}
	for _, dc := range j.NamedDatacenters {
		n += 3 + len(dc)
	}
	b, err := j.AppendJSON(make([]byte, 0, n))
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// apiJobs is a page of jobs as the API shows it (never nil).
func apiJobs(pjs []*rpcpb.Job) []api.Job {
	out := make([]api.Job, len(pjs))
	for i, pj := range pjs {
		out[i] = apiJob(pj)
	}
	return out
}

// apiLeases is a lease's answer as the API shows it (never nil).
func apiLeases(ls []*rpcpb.Lease) []api.Lease {
	out := make([]api.Lease, len(ls))
	for i, l := range ls {
		out[i] = api.Lease{LeaseID: l.GetLeaseId(), Attempt: int(l.GetAttempt()), ExpiresAt: l.GetExpiresAt()}
		if j := l.GetJob(); j != nil {
			out[i].Job = apiJob(j)
		}
	}
	return out
}

// apiKeyInfo is an idempotency key's entry as the API shows it.
func apiKeyInfo(p *rpcpb.KeyInfo) *api.KeyInfo {
	return &api.KeyInfo{Key: p.GetKey(), State: p.GetState(), JobID: p.JobId, ExpiresAt: p.GetExpiresAt(),
		ClientID: p.GetClientId(), Sequence: p.Sequence, Nonce: p.GetNonce(), Home: p.GetHome()}
}

// apiHeartbeat is a heartbeat's answer as the API shows it.
func apiHeartbeat(h *rpcpb.HeartbeatResponse) *api.HeartbeatResponse {
	return &api.HeartbeatResponse{LeaseID: h.GetLeaseId(), ExpiresAt: h.GetExpiresAt()}
}
