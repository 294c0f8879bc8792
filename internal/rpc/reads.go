package rpc

import (
	"context"

	"google.golang.org/grpc"

	"github.com/once-dev/once/internal/rpc/rpcpb"
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
	return job, nil
}

// ListJobs serves Service.ListJobs.
func (sv *service) ListJobs(ctx context.Context, p *rpcpb.ListJobsRequest) (*rpcpb.ListJobsResponse, error) {
	return serveCall(sv.s, ctx, "list jobs", p, sv.s.svc.ListJobs)
}

// GetKey serves Service.GetKey.
func (sv *service) GetKey(ctx context.Context, p *rpcpb.GetKeyRequest) (*rpcpb.KeyInfo, error) {
	info, err := sv.s.svc.GetKey(ctx, p.GetTenant(), p.GetKey())
	if err != nil {
		return nil, sv.s.callStatus("get key", err)
	}
	return info, nil
}

// GetJob reads a job at the leader.
func (c *Client) GetJob(ctx context.Context, tenant, id string) (*rpcpb.Job, error) {
	var job *rpcpb.Job
	err := c.call(ctx, "get job", 0, func(ctx context.Context, mc rpcpb.ManagerClient) (err error) {
		job, err = mc.GetJob(ctx, &rpcpb.GetJobRequest{Tenant: tenant, JobId: id}, readLimit)
		return err
	})
	return job, err
}

// ListJobs reads a page of jobs at the leader.
func (c *Client) ListJobs(ctx context.Context, req *rpcpb.ListJobsRequest) (*rpcpb.ListJobsResponse, error) {
	var resp *rpcpb.ListJobsResponse
	err := c.call(ctx, "list jobs", 0, func(ctx context.Context, mc rpcpb.ManagerClient) (err error) {
		resp, err = mc.ListJobs(ctx, req, readLimit)
		return err
	})
	return resp, err
}

// GetKey reads an idempotency key's entry at the leader.
func (c *Client) GetKey(ctx context.Context, tenant, key string) (*rpcpb.KeyInfo, error) {
	var info *rpcpb.KeyInfo
	err := c.call(ctx, "get key", 0, func(ctx context.Context, mc rpcpb.ManagerClient) (err error) {
		info, err = mc.GetKey(ctx, &rpcpb.GetKeyRequest{Tenant: tenant, Key: key}, readLimit)
		return err
	})
	return info, err
}
