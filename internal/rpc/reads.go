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
	return reply(sv.s, "get job", checkRequest(p, "body", 0), func() (*rpcpb.Job, error) {
		return sv.s.svc.GetJob(ctx, p.GetTenant(), p.GetJobId())
	})
}

// ListJobs serves Service.ListJobs.
func (sv *service) ListJobs(ctx context.Context, p *rpcpb.ListJobsRequest) (*rpcpb.ListJobsResponse, error) {
	return reply(sv.s, "list jobs", checkRequest(p, "body", 0), func() (*rpcpb.ListJobsResponse, error) {
		return sv.s.svc.ListJobs(ctx, p)
	})
}

// GetKey serves Service.GetKey.
func (sv *service) GetKey(ctx context.Context, p *rpcpb.GetKeyRequest) (*rpcpb.KeyInfo, error) {
	return reply(sv.s, "get key", checkRequest(p, "body", 0), func() (*rpcpb.KeyInfo, error) {
		return sv.s.svc.GetKey(ctx, p.GetTenant(), p.GetKey())
	})
}

// GetJob reads a job at the leader.
func (c *Client) GetJob(ctx context.Context, tenant, id string) (*rpcpb.Job, error) {
	return unary(c, ctx, "get job", 0, rpcpb.ManagerClient.GetJob, &rpcpb.GetJobRequest{Tenant: tenant, JobId: id}, readLimit)
}

// ListJobs reads a page of jobs at the leader.
func (c *Client) ListJobs(ctx context.Context, req *rpcpb.ListJobsRequest) (*rpcpb.ListJobsResponse, error) {
	return unary(c, ctx, "list jobs", 0, rpcpb.ManagerClient.ListJobs, req, readLimit)
}

// GetKey reads an idempotency key's entry at the leader.
func (c *Client) GetKey(ctx context.Context, tenant, key string) (*rpcpb.KeyInfo, error) {
	return unary(c, ctx, "get key", 0, rpcpb.ManagerClient.GetKey, &rpcpb.GetKeyRequest{Tenant: tenant, Key: key}, readLimit)
}
