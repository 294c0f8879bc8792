package gate

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/once-dev/once/internal/certs"
)

// serveTLS accepts one connection at a time with cfg and answers "ok" after
// a handshake; it returns the address.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if c.(*tls.Conn).Handshake() == nil {
				_, _ = c.Write([]byte("ok"))
			}
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

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
	call := func(addr string) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, client)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		b, err := io.ReadAll(c)
		if err == nil && string(b) != "ok" {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	ours, err := certs.ClusterFromSecret(secret, certs.RoleManager)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := certs.ClusterFromSecret(secret+"-other", certs.RoleManager)
	if err != nil {
		t.Fatal(err)
	}
	if err := call(serveTLS(t, ours.ServerConfig())); err != nil {
		t.Fatalf("a manager of the secret: %v", err)
	}
	if err := call(serveTLS(t, theirs.ServerConfig())); err == nil {
		t.Fatal("a manager of another secret was accepted")
	}
}
