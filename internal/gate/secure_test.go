package gate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/once-dev/once/internal/certs"
	"github.com/once-dev/once/internal/certs/certstest"
)

// A gate given only GATE_CLUSTER_SECRET_FILE reaches managers over TLS with
// the CA derived from the secret: it accepts a manager of that secret and
// refuses one of another secret.
func TestGateVerifiesManagersWithTheDerivedCA(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ClusterSecretFile = file
	g, err := New(cfg, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	client := g.rpcTLSConfig()
	if client == nil {
		t.Fatal("a gate with the cluster secret reaches managers without TLS")
	}
	ours, err := certs.ClusterFromSecret(secret, certs.RoleManager)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := certs.ClusterFromSecret(secret+"-other", certs.RoleManager)
	if err != nil {
		t.Fatal(err)
	}
	if err := certstest.Call(certstest.Serve(t, ours.ServerConfig()), client); err != nil {
		t.Fatalf("a manager of the secret: %v", err)
	}
	if err := certstest.Call(certstest.Serve(t, theirs.ServerConfig()), client); err == nil {
		t.Fatal("a manager of another secret was accepted")
	}
}
