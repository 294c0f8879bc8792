package ctl

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// oncectl refuses to call managers without a credential unless --insecure
// is given, and refuses --insecure together with a credential; nothing is
// sent (the managers' address is not listening).
func TestMainRefusesWithoutCredential(t *testing.T) {
	t.Setenv(EnvClusterSecretFile, "")
	t.Setenv(EnvCACert, "")
	t.Setenv(EnvInsecure, "")
	t.Setenv(EnvOperatorSecretFile, "")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no credential", nil, []string{"--cluster-secret-file", "--cacert", "--insecure"}},
		{"insecure with a secret", []string{"--insecure", "--cluster-secret-file", secret}, []string{"--insecure", "--cluster-secret-file"}},
		{"insecure with an operator secret", []string{"--insecure", "--operator-secret-file", secret}, []string{"--insecure", "--operator-secret-file"}},
		{"half TLS", []string{"--cacert", "ca.pem"}, []string{"--cert"}},
	} {
		var stderr bytes.Buffer
		args := append([]string{"--managers", "127.0.0.1:1", "raft", "peers"}, tc.args...)
		if code := Main(context.Background(), args, io.Discard, &stderr); code != ExitUsage {
			t.Fatalf("%s: exit %d, want %d; stderr %s", tc.name, code, ExitUsage, stderr.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: stderr %q does not name %s", tc.name, stderr.String(), w)
			}
		}
	}
	// With --insecure alone it goes on and fails to reach the manager.
	var stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--managers", "127.0.0.1:1", "--insecure", "raft", "peers"}, io.Discard, &stderr); code != ExitFailure {
		t.Fatalf("--insecure: exit %d, want %d; stderr %s", code, ExitFailure, stderr.String())
	}
}
