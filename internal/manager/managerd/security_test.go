package managerd

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
)

// A manager refuses to start (exit 2, naming the variables to set) without a
// credential unless MANAGER_INSECURE=true, and refuses a half-secured
// configuration; nothing is bound or written.
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
		{"no credential", nil, []string{manager.EnvClusterSecretFile, manager.EnvTLSCAFile, manager.EnvInsecure}},
		{"insecure with a secret", []string{manager.EnvInsecure + "=true", manager.EnvClusterSecretFile + "=" + secret}, []string{manager.EnvInsecure, manager.EnvClusterSecretFile}},
		{"insecure with an operator secret", []string{manager.EnvInsecure + "=true", manager.EnvOperatorSecretFile + "=" + secret}, []string{manager.EnvInsecure, manager.EnvOperatorSecretFile}},
		{"insecure with a gossip key", []string{manager.EnvInsecure + "=true", manager.EnvGossipKey + "=AAAAAAAAAAAAAAAAAAAAAA=="}, []string{manager.EnvInsecure, manager.EnvGossipKey}},
		{"half TLS", []string{manager.EnvTLSCAFile + "=ca.pem", manager.EnvTLSCertFile + "=c.pem"}, []string{manager.EnvTLSKeyFile}},
		{"TLS without a gossip key", []string{manager.EnvTLSCAFile + "=ca.pem", manager.EnvTLSCertFile + "=c.pem", manager.EnvTLSKeyFile + "=k.pem"}, []string{manager.EnvGossipKey}},
	} {
		var stderr bytes.Buffer
		// A refusal returns at once; a process that started instead serves
		// until ctx ends and then exits 0.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		env := append([]string{manager.EnvDataDir + "=" + filepath.Join(t.TempDir(), "never")}, tc.env...)
		if code := Main(ctx, nil, env, io.Discard, &stderr); code != config.ExitConfig {
			t.Fatalf("%s: exit %d, want %d; stderr %s", tc.name, code, config.ExitConfig, stderr.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%s: stderr %q does not name %s", tc.name, stderr.String(), w)
			}
		}
	}
}
