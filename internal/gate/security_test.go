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
		// The key contradicts insecure mode whether or not the gate joins a
		// pool (docs/configuration.md).
		{"insecure with a gossip key, no pool", []string{EnvInsecure + "=true", EnvGossipKey + "=AAAAAAAAAAAAAAAAAAAAAA=="}, []string{EnvInsecure, EnvGossipKey}},
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

// A gossip key that cannot be used stops the gate at start (exit 2, before
// it listens), and the message does not show the key: a key that is not
// base64 or of the wrong length, and a blank one, which would otherwise have
// turned off the encryption the cluster secret gives the pool.
func TestMainRefusesABadGossipKey(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, key string }{
		{"not base64", "s3cr3t-but-not-base64!"},
		{"15 bytes", "AAAAAAAAAAAAAAAAAAAA"},
		{"blank", " "},
	} {
		var stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		env := []string{EnvListenAddr + "=127.0.0.1:0", EnvClusterSecretFile + "=" + secret, EnvGossipKey + "=" + tc.key, EnvJoin + "=127.0.0.1:1"}
		if code := Main(ctx, nil, env, io.Discard, &stderr); code != ExitConfig {
			t.Fatalf("%s: exit %d, want %d; stderr %s", tc.name, code, ExitConfig, stderr.String())
		}
		if !strings.Contains(stderr.String(), EnvGossipKey) {
			t.Errorf("%s: stderr %q does not name %s", tc.name, stderr.String(), EnvGossipKey)
		}
		if strings.TrimSpace(tc.key) != "" && strings.Contains(stderr.String(), tc.key) {
			t.Errorf("%s: stderr shows the key: %s", tc.name, stderr.String())
		}
	}
}
