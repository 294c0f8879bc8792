package membership

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

// Without an explicit key, two managers of one cluster secret gossip with
// the key derived from it; a member of another secret, and a plaintext one,
// are refused.
func TestDerivedGossipKey(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	if bytes.Equal(KeyFromSecret(secret, KeyLAN), KeyFromSecret(secret, KeyWAN)) {
		t.Fatal("the LAN and WAN keys are the same")
	}
	if !bytes.Equal(KeyFromSecret(secret, KeyLAN), KeyFromSecret(secret, KeyLAN)) {
		t.Fatal("the derivation is not deterministic")
	}
	fromSettings := func(s Settings) func(*Config) {
		return func(c *Config) {
			sc, err := s.Config("MANAGER", c.NodeName, c.Meta, c.Logger)
			if err != nil {
				t.Fatal(err)
			}
			if sc.SecretKey == nil {
				t.Fatal("no key derived from the secret")
			}
			c.SecretKey = sc.SecretKey
		}
	}
	base := Settings{Addr: "127.0.0.1:0", Profile: ProfileTest, Label: KeyLAN}
	same, other := base, base
	same.Secret, other.Secret = secret, secret+"x"
	a := startPool(t, "a", RoleManager, fromSettings(same))
	b := startPool(t, "b", RoleManager, func(c *Config) { fromSettings(same)(c); c.Seeds = []string{a.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b}, "a", "b"))

	stranger := startPool(t, "stranger", RoleManager, fromSettings(other))
	plain := startPool(t, "plain", RoleManager, nil)
	for _, p := range []*Pool{stranger, plain} {
		if n, err := p.Join(context.Background(), []string{a.Addr()}); n != 0 || !errors.Is(err, ErrJoin) {
			t.Fatalf("%s joined the pool of another secret: n=%d err=%v", p.cfg.NodeName, n, err)
		}
	}
	never(t, time.Second, func() (bool, string) {
		for _, p := range []*Pool{stranger, plain} {
			if ok, what := lists(a, p.cfg.NodeName); ok {
				return true, what
			}
		}
		return false, ""
	})
}
