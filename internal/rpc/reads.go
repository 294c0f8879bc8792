package rpc

import (
	"context"

	"google.golang.org/grpc"

	"github.com/once-dev/once/internal/rpc/rpcpb"
	"github.com/once-dev/once/pkg/api"
)

// The reads of the Manager service: GetJob, ListJobs, GetKey, answered by
// the leader (Service). An answer over MaxResponseBytes is refused by the
// client as CodeTooLarge, never decoded cut.

// readLimit bounds a read's answer at the client.
var readLimit = grpc.MaxCallRecvMsgSize(MaxResponseBytes)

// GetJob serves Service.GetJob.
func (sv *service) GetJob(ctx context.Context, p *rpcpb.GetJobRequest) (*rpcpb.Job, error) {
	job, err := sv.s.svc.GetJob(ctx, p.GetTenant(), p.GetJobId())
	if err != nil {
		return nil, sv.s.callStatus("get job", err)
	}
	return toPBJob(job), nil
}

// ListJobs serves Service.ListJobs.
func (sv *service) ListJobs(ctx context.Context, p *rpcpb.ListJobsRequest) (*rpcpb.ListJobsResponse, error) {
	return serveCall(sv.s, ctx, "list jobs", p, func(p *rpcpb.ListJobsRequest) *ListJobsRequest {
		return &ListJobsRequest{Tenant: p.GetTenant(), Type: p.GetType(), Status: p.GetStatus(), Limit: int(p.GetLimit()), After: p.GetAfter(), Desc: p.GetDesc()}
	}, sv.s.svc.ListJobs, func(r *ListJobsResponse) *rpcpb.ListJobsResponse {
		out := &rpcpb.ListJobsResponse{Next: r.Next, Jobs: make([]*rpcpb.Job, len(r.Jobs))}
		for i := range r.Jobs {
			out.Jobs[i] = toPBJob(&r.Jobs[i])
		}
		return out
	})
}

// GetKey serves Service.GetKey.
func (sv *service) GetKey(ctx context.Context, p *rpcpb.GetKeyRequest) (*rpcpb.KeyInfo, error) {
	info, err := sv.s.svc.GetKey(ctx, p.GetTenant(), p.GetKey())
	if err != nil {
		return nil, sv.s.callStatus("get key", err)
	}
	return &rpcpb.KeyInfo{Key: info.Key, State: info.State, JobId: info.JobID, ExpiresAt: info.ExpiresAt,
		ClientId: info.ClientID, Sequence: info.Sequence, Nonce: info.Nonce, Home: info.Home}, nil
}

// GetJob reads a job at the leader.
func (c *Client) GetJob(ctx context.Context, tenant, id string) (*api.Job, error) {
	var job *api.Job
	err := c.call(ctx, "get job", 0, func(ctx context.Context, mc rpcpb.ManagerClient) error {
		p, err := mc.GetJob(ctx, &rpcpb.GetJobRequest{Tenant: tenant, JobId: id}, readLimit)
		if err == nil {
			job = fromPBJob(p)
		}
		return err
	})
	return job, err
}

// ListJobs reads a page of jobs at the leader.
func (c *Client) ListJobs(ctx context.Context, req *ListJobsRequest) (*ListJobsResponse, error) {
	var resp *ListJobsResponse
	err := c.call(ctx, "list jobs", 0, func(ctx context.Context, mc rpcpb.ManagerClient) error {
		p, err := mc.ListJobs(ctx, &rpcpb.ListJobsRequest{Tenant: req.Tenant, Type: req.Type, Status: req.Status,
			Limit: int64(req.Limit), After: req.After, Desc: req.Desc}, readLimit)
		if err == nil {
			resp = &ListJobsResponse{Next: p.GetNext(), Jobs: make([]api.Job, len(p.GetJobs()))}
			for i, j := range p.GetJobs() {
				resp.Jobs[i] = *fromPBJob(j)
			}
		}
		return err
	})
	return resp, err
}

// GetKey reads an idempotency key's entry at the leader.
func (c *Client) GetKey(ctx context.Context, tenant, key string) (*api.KeyInfo, error) {
	var info *api.KeyInfo
	err := c.call(ctx, "get key", 0, func(ctx context.Context, mc rpcpb.ManagerClient) error {
		p, err := mc.GetKey(ctx, &rpcpb.GetKeyRequest{Tenant: tenant, Key: key}, readLimit)
		if err == nil {
			info = &api.KeyInfo{Key: p.GetKey(), State: p.GetState(), JobID: p.JobId, ExpiresAt: p.GetExpiresAt(),
				ClientID: p.GetClientId(), Sequence: p.Sequence, Nonce: p.GetNonce(), Home: p.GetHome()}
		}
		return err
	})
	return info, err
}
