package rpc

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/once-dev/once/internal/rpc/rpcpb"
)

// With a cluster secret, the manager's RPC serves only callers that present
// it: the submit stream, the reads and every other HTTP route.
func TestClusterSecret(t *testing.T) {
	svc := &fakeManager{leader: true}
	addr, srv := serveConfig(t, svc, ServerConfig{Secret: "s3cret"})
	srv.Mux().HandleFunc("GET /extra", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	req := &rpcpb.SubmitRequest{Tenant: "t", Key: "k1", Job: &rpcpb.JobRequest{Type: "x"}}

	for name, secret := range map[string]string{"no secret": "", "a wrong secret": "s3cre7"} {
		c := NewClient(ClientConfig{Resolver: StaticResolver([]string{addr}), AttemptTimeout: 300 * time.Millisecond, Secret: secret})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Submit(ctx, req)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeUnauthenticated {
			t.Errorf("%s: a submission answered %v, want %s", name, err, CodeUnauthenticated)
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		_, err = c.GetJob(ctx, "t", "j-k1")
		if !errors.As(err, &e) || e.Code != CodeUnauthenticated {
			t.Errorf("%s: read answered %v, want %s", name, err, CodeUnauthenticated)
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		_, err = c.Heartbeat(ctx, &rpcpb.HeartbeatRequest{Tenant: "t", JobId: "j", LeaseId: "l"})
		if !errors.As(err, &e) || e.Code != CodeUnauthenticated {
			t.Errorf("%s: a worker call answered %v, want %s", name, err, CodeUnauthenticated)
		}
		cancel()
		c.Close()
		if code := getWithSecret(t, "http://"+addr+"/extra", secret); code != http.StatusUnauthorized {
			t.Errorf("%s: a route added to the mux answered %d, want 401", name, code)
		}
	}
	if n := svc.submits.Load(); n != 0 {
		t.Fatalf("the service saw %d submissions from callers without the secret", n)
	}

	c := NewClient(ClientConfig{Resolver: StaticResolver([]string{addr}), AttemptTimeout: time.Second, Secret: "s3cret"})
	defer c.Close()
	if _, err := c.Submit(context.Background(), req); err != nil {
		t.Fatalf("with the secret: %v", err)
	}
	// The HTTP side serves the status with the secret.
	if code := getWithSecret(t, "http://"+addr+"/rpc/v1/status", "s3cret"); code != http.StatusOK {
		t.Errorf("with the secret, GET /rpc/v1/status answered %d", code)
	}
	if _, err := c.GetJob(context.Background(), "t", "j-k1"); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == CodeUnauthenticated {
			t.Fatalf("with the secret, the read was refused: %v", err)
		}
	}
}

// getWithSecret GETs url presenting secret as the managers' HTTP routes read
// it (none when empty) and returns the status code.
func getWithSecret(t *testing.T, url, secret string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set(secretHeader, bearer(secret))
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
