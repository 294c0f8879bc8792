package gate

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A gate refuses to start (exit 2, naming the variables to set) without a
// credential unless GATE_INSECURE=true, and refuses insecure mode together
// with a credential or a gossip key.
func TestMainRefusesWithoutCredential(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		want []string
	}{
		{"no credential", nil, []string{EnvClusterSecretFile, EnvRPCTLSCAFile, EnvInsecure}},
		{"insecure with a secret", []string{EnvInsecure + "=true", EnvClusterSecretFile + "=" + secret}, []string{EnvInsecure, EnvClusterSecretFile}},
		{"insecure with a gossip key", []string{EnvInsecure + "=true", EnvGossipKey + "=AAAAAAAAAAAAAAAAAAAAAA==", EnvJoin + "=127.0.0.1:1"}, []string{EnvInsecure, EnvGossipKey}},
		{"half TLS", []string{EnvRPCTLSCAFile + "=ca.pem"}, []string{EnvRPCTLSCertFile}},
	} {
		var stderr bytes.Buffer
		// A refusal returns at once; a process that started instead serves
		// until ctx ends and then exits 0.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		env := append([]string{EnvListenAddr + "=127.0.0.1:0"}, tc.env...)
		if code := Main(ctx, nil, env, io.Discard, &stderr); code != ExitConfig {
			t.Fatalf("%s: exit %d, want %d; stderr %s", tc.name, code, ExitConfig, stderr.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: stderr %q does not name %s", tc.name, stderr.String(), w)
			}
		}
	}
}
