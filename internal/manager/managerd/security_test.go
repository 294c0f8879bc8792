package managerd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/testutil"
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
		{"insecure with a WAN gossip key", []string{manager.EnvInsecure + "=true", manager.EnvWANGossipAddr + "=127.0.0.1:0",
			manager.EnvWANGossipKey + "=AAAAAAAAAAAAAAAAAAAAAA=="}, []string{manager.EnvInsecure, manager.EnvWANGossipKey}},
		{"insecure with TLS files", []string{manager.EnvInsecure + "=true", manager.EnvTLSCAFile + "=ca.pem", manager.EnvTLSCertFile + "=c.pem",
			manager.EnvTLSKeyFile + "=k.pem"}, []string{manager.EnvInsecure, manager.EnvTLSCAFile}},
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

// A gossip key that cannot be used stops the manager at start (exit 2,
// before it listens: the LAN key was read only when the pool started, after
// the RPC listener, and failed with exit 1), and the message does not show
// the key. A blank key, with the cluster secret, would have turned the
// pool's encryption off instead of leaving the key derived from the secret.
func TestMainRefusesABadGossipKey(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, env, key string
		flag           bool // given as the variable's flag, not in the environment
	}{
		{"LAN, not base64", manager.EnvGossipKey, "s3cr3t-but-not-base64!", false},
		{"LAN, not base64, as a flag", manager.EnvGossipKey, "s3cr3t-but-not-base64!", true},
		{"WAN, not base64, as a flag", manager.EnvWANGossipKey, "s3cr3t-but-not-base64!", true},
		{"LAN, 15 bytes", manager.EnvGossipKey, "AAAAAAAAAAAAAAAAAAAA", false},
		{"LAN, blank", manager.EnvGossipKey, " ", false},
		{"WAN, not base64", manager.EnvWANGossipKey, "s3cr3t-but-not-base64!", false},
		{"WAN, blank", manager.EnvWANGossipKey, "\t", false},
	} {
		var stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Free ports: a manager that started instead would listen there.
		ports, err := testutil.FreePorts(4)
		if err != nil {
			t.Fatal(err)
		}
		env := []string{manager.EnvDataDir + "=" + filepath.Join(t.TempDir(), "data"), manager.EnvClusterSecretFile + "=" + secret,
			manager.EnvNodeID + "=m1", manager.EnvBootstrapExpect + "=1",
			manager.EnvRPCAddr + fmt.Sprintf("=127.0.0.1:%d", ports[0]), manager.EnvRaftAddr + fmt.Sprintf("=127.0.0.1:%d", ports[1]),
			manager.EnvGossipAddr + fmt.Sprintf("=127.0.0.1:%d", ports[2]), manager.EnvWANGossipAddr + fmt.Sprintf("=127.0.0.1:%d", ports[3])}
		var args []string
		if tc.flag {
			args = []string{"-" + config.FlagName(tc.env) + "=" + tc.key}
		} else {
			env = append(env, tc.env+"="+tc.key)
		}
		if code := Main(ctx, args, env, io.Discard, &stderr); code != config.ExitConfig {
			t.Fatalf("%s: exit %d, want %d; stderr %s", tc.name, code, config.ExitConfig, stderr.String())
		}
		if !strings.Contains(stderr.String(), tc.env) {
			t.Errorf("%s: stderr %q does not name %s", tc.name, stderr.String(), tc.env)
		}
		if strings.TrimSpace(tc.key) != "" && strings.Contains(stderr.String(), tc.key) {
			t.Errorf("%s: stderr shows the key: %s", tc.name, stderr.String())
		}
	}
}
