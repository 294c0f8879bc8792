package e2e

import (
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/rpc"
	"github.com/once-dev/once/tests/localcluster"
)

// With a cluster secret, real managers serve gates and oncectl that present
// it, and refuse a caller that does not: 401 on the reads, the status and
// the metrics, unauthenticated on the Operator service.
func TestClusterSecretOnRealProcesses(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	c := startCluster(t, 3, 1, func(o *localcluster.Options) { o.ClusterSecret = secret })
	if _, err := c.WaitLeader(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.Gates[0].HTTPAddr+"/v1/jobs", strings.NewReader(`{"type":"demo"}`))
	req.Header.Set("Idempotency-Key", "host1.dc1:5:1:0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("a submission through a gate holding the secret: %d %s", resp.StatusCode, b)
	}
	m := c.Managers[0].HTTPAddr
	// The managers serve TLS with the CA derived from the secret: a caller
	// with a certificate of that CA but without the secret in its header is
	// still refused.
	noSecret := c.HTTPClientWithoutSecret()
	for _, path := range []string{"/rpc/v1/status", "/metrics"} {
		for _, auth := range []string{"", "Bearer wrong-secret-wrong-secret"} {
			req, _ := http.NewRequest(http.MethodGet, c.ManagerURL(c.Managers[0], path), nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := noSecret.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s with %q: %d, want 401", path, auth, resp.StatusCode)
			}
		}
	}
	// The Operator service (gRPC) too, even to a caller with the operator
	// secret.
	for _, wrong := range []string{"", "wrong-secret-wrong-secret"} {
		cl := c.RPCClientWithSecret(rpc.ClientConfig{Resolver: rpc.StaticResolver{m}, OperatorSecret: c.OperatorSecret(), MaxAttempts: 1}, wrong)
		_, err := cl.Members(t.Context())
		cl.Close()
		var e *rpc.Error
		if !errors.As(err, &e) || e.Code != rpc.CodeUnauthenticated {
			t.Errorf("the members with the cluster secret %q: %v, want %s", wrong, err, rpc.CodeUnauthenticated)
		}
	}
	// oncectl with the secret file reads the managers; without it, it is refused.
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ONCE_MANAGERS", m)
	if out, code := oncectl(t, "--cluster-secret-file", file, "--operator-secret-file", c.OperatorSecretFile(), "cluster", "members"); code != 0 || !strings.Contains(out, "manager1") {
		t.Errorf("oncectl with the secret: exit %d\n%s", code, out)
	}
	// Without it, oncectl refuses to start (exit 2) unless --insecure, with
	// which it speaks plain HTTP to a TLS listener and fails (exit 1).
	t.Setenv("ONCE_CLUSTER_SECRET_FILE", "")
	if _, code := oncectl(t, "cluster", "members"); code != 2 {
		t.Errorf("oncectl without the secret: exit %d, want 2", code)
	}
	if _, code := oncectl(t, "--insecure", "cluster", "members"); code != 1 {
		t.Errorf("oncectl --insecure against a secured cluster: exit %d, want 1", code)
	}
}
