package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/pkg/api"
)

// stubWorkers answers Complete with the result it was given, and
// budget_exceeded for a result over budget bytes.
type stubWorkers struct{ budget int }

func (stubWorkers) Lease(context.Context, *LeaseRequest) (*LeaseResponse, error) {
	return &LeaseResponse{}, nil
}
func (stubWorkers) Heartbeat(context.Context, *HeartbeatRequest) (*api.HeartbeatResponse, error) {
	return &api.HeartbeatResponse{}, nil
}
func (s stubWorkers) Complete(_ context.Context, r *CompleteRequest) (*api.Job, error) {
	if s.budget > 0 && len(r.Result) > s.budget {
		return nil, Errorf(CodeBudgetExceeded, "over budget")
	}
	return &api.Job{JobID: r.JobID, Result: r.Result}, nil
}
func (stubWorkers) Fail(context.Context, *FailRequest) (*api.Job, error) { return &api.Job{}, nil }

func workersClient(t *testing.T, w Workers) *Client {
	mux := http.NewServeMux()
	MountWorkers(mux, w, nil)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := NewClient(ClientConfig{Resolver: StaticResolver{strings.TrimPrefix(srv.URL, "http://")}, AttemptTimeout: time.Minute})
	t.Cleanup(c.Close)
	return c
}

// A completion whose result is the largest body a gate accepts reaches the
// manager with the call's other members (at their bounds), not refused as
// an oversized body.
func TestWorkerBodyLimitAdmitsTheGatesLargest(t *testing.T) {
	c := workersClient(t, stubWorkers{})
	result := json.RawMessage(`"` + strings.Repeat("r", MaxBodyBytes-2) + `"`)
	long := strings.Repeat("x", api.MaxTypeLen)
	job, err := c.Complete(context.Background(), &CompleteRequest{Tenant: long, JobID: long, LeaseID: long, Result: result})
	if err != nil || len(job.Result) != len(result) {
		t.Fatalf("complete with a %d-byte result: %v", len(result), err)
	}
}

// budget_exceeded keeps its identity across the wire.
func TestBudgetExceededCrossesTheWire(t *testing.T) {
	c := workersClient(t, stubWorkers{budget: 10})
	_, err := c.Complete(context.Background(), &CompleteRequest{Tenant: "t", JobID: "j", LeaseID: "l", Result: json.RawMessage(`"0123456789"`)})
	if !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("want %v, got %v", ErrBudgetExceeded, err)
	}
}
