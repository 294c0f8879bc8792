package membership

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/once-dev/once/internal/testutil"
)

func key(b byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = b
	}
	return k
}

func lists(p *Pool, name string) (bool, string) {
	_, ok := memberState(p, name)
	return ok, fmt.Sprintf("%s lists %s", p.cfg.NodeName, name)
}

func TestWrongGossipKeyIsRefused(t *testing.T) {
	a := startPool(t, "a", RoleManager, func(c *Config) { c.SecretKey = key(1) })
	wrong := startPool(t, "wrong", RoleManager, func(c *Config) { c.SecretKey = key(2) })
	plain := startPool(t, "plain", RoleGate, nil)

	for _, p := range []*Pool{wrong, plain} {
		n, err := p.Join(context.Background(), []string{a.Addr()})
		if n != 0 || !errors.Is(err, ErrJoin) {
			t.Fatalf("%s joined an encrypted pool with the wrong key: n=%d err=%v", p.cfg.NodeName, n, err)
		}
		var je *JoinError
		if !errors.As(err, &je) || len(je.Seeds) != 1 {
			t.Fatalf("error %v is not a JoinError", err)
		}
	}
	// And the encrypted node cannot join the plaintext one either.
	if n, err := a.Join(context.Background(), []string{plain.Addr()}); n != 0 || !errors.Is(err, ErrJoin) {
		t.Fatalf("encrypted joined plaintext: n=%d err=%v", n, err)
	}
	// Neither side lists the other, then or a few gossip rounds later.
	never(t, time.Second, func() (bool, string) {
		for _, pair := range [][2]*Pool{{a, wrong}, {wrong, a}, {a, plain}, {plain, a}} {
			if ok, what := lists(pair[0], pair[1].cfg.NodeName); ok {
				return true, what
			}
		}
		return false, ""
	})

	// The right key works.
	right := startPool(t, "right", RoleGate, func(c *Config) {
		c.SecretKey = key(1)
		c.Seeds = []string{a.Addr()}
	})
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, right}, "a", "right"))
}

func TestGossipKeyRotation(t *testing.T) {
	old, next := key(1), key(2)
	a := startPool(t, "a", RoleManager, func(c *Config) { c.SecretKey = old })
	b := startPool(t, "b", RoleManager, func(c *Config) { c.SecretKey = old; c.Seeds = []string{a.Addr()} })
	pools := []*Pool{a, b}
	testutil.WaitFor(t, waitTimeout, seesAlive(pools, "a", "b"))

	for _, p := range pools {
		if err := p.InstallKey(next); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pools {
		if err := p.UseKey(next); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RemoveKey(next); err == nil {
		t.Fatal("removed the primary key")
	}
	for _, p := range pools {
		if err := p.RemoveKey(old); err != nil {
			t.Fatal(err)
		}
	}
	if keys := a.Keys(); len(keys) != 1 || keys[0][0] != 2 {
		t.Fatalf("keys after rotation = %v", keys)
	}
	// The pool still gossips (meta updates get through) and a node with only
	// the new key joins, one with only the old key does not.
	waitGossipsUnderNewKey(t, b, a)
	c := startPool(t, "c", RoleGate, func(c *Config) { c.SecretKey = next; c.Seeds = []string{b.Addr()} })
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{a, b, c}, "a", "b", "c"))
	stale := startPool(t, "stale", RoleGate, func(c *Config) { c.SecretKey = old })
	if _, err := stale.Join(context.Background(), []string{a.Addr()}); !errors.Is(err, ErrJoin) {
		t.Fatalf("old key joined after rotation: %v", err)
	}
	plain := startPool(t, "plain2", RoleGate, nil)
	if err := plain.InstallKey(next); !errors.Is(err, ErrNoEncryption) {
		t.Fatalf("InstallKey on a plaintext pool: %v", err)
	}
}

// TestRollingKeyRotationByRestart: the restart-based rotation of
// docs/operations.md, where each node's key setting is a list (primary
// first). Nodes one step apart interoperate; two steps apart they do not,
// which is why each step must reach every node before the next.
func TestRollingKeyRotationByRestart(t *testing.T) {
	b64 := func(b byte) string { return base64.StdEncoding.EncodeToString(key(b)) }
	withKeys := func(list string) func(*Config) {
		return func(c *Config) {
			primary, extra, err := ParseSecretKeys(list)
			if err != nil {
				t.Fatal(err)
			}
			c.SecretKey, c.ExtraKeys = primary, extra
		}
	}
	step1 := startPool(t, "step1", RoleManager, withKeys(b64(1)+","+b64(2))) // old primary, new installed
	step2 := startPool(t, "step2", RoleManager, withKeys(b64(2)+","+b64(1))) // new primary, old kept
	if _, err := step2.Join(context.Background(), []string{step1.Addr()}); err != nil {
		t.Fatalf("adjacent steps do not interoperate: %v", err)
	}
	testutil.WaitFor(t, waitTimeout, seesAlive([]*Pool{step1, step2}, "step1", "step2"))
	step3 := startPool(t, "step3", RoleGate, withKeys(b64(2))) // old removed
	if _, err := step3.Join(context.Background(), []string{step1.Addr()}); !errors.Is(err, ErrJoin) {
		t.Fatalf("a node two steps ahead joined: %v", err)
	}

	if p, e, err := ParseSecretKeys(""); p != nil || e != nil || err != nil {
		t.Fatalf("empty list: %v %v %v", p, e, err)
	}
	if _, _, err := ParseSecretKeys(b64(1) + ",nope"); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("bad second key: %v", err)
	}
	bad := Config{NodeName: "x", ExtraKeys: [][]byte{key(1)}, Meta: Meta{Role: RoleGate, Datacenter: "d", NodeID: "x"}}
	if err := bad.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("extra keys without a primary: %v", err)
	}
}

// TestKeyringKeepsItsOwnCopyOfAKey: memberlist's keyring keeps the slice it
// is given as its primary key, so a caller that reuses its buffer after
// UseKey (or InstallKey) must not change the key the pool encrypts with.
func TestKeyringKeepsItsOwnCopyOfAKey(t *testing.T) {
	p := startPool(t, "a", RoleManager, func(c *Config) { c.SecretKey = key(1) })
	buf := key(2)
	if err := p.InstallKey(buf); err != nil {
		t.Fatal(err)
	}
	if err := p.UseKey(buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, key(9))
	keys := p.Keys()
	if len(keys) != 2 || !bytes.Equal(keys[0], key(2)) || !bytes.Equal(keys[1], key(1)) {
		t.Fatalf("keys after the caller reused its buffer = %x, want primary %x then %x", keys, key(2), key(1))
	}
}

// waitGossipsUnderNewKey changes from's metadata and waits until to sees
// the change: the two still gossip after a key rotation.
func waitGossipsUnderNewKey(t *testing.T, from, to *Pool) {
	t.Helper()
	if err := from.ModifyMeta(func(m *Meta) { m.Version = 7 }); err != nil {
		t.Fatal(err)
	}
	name := from.cfg.NodeName
	testutil.WaitFor(t, waitTimeout, func() (bool, string) {
		for _, m := range to.Members() {
			if m.Name == name && m.Meta.Version == 7 {
				return true, ""
			}
		}
		return false, to.cfg.NodeName + " to see " + name + "'s update under the new key"
	})
}
