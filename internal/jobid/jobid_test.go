package jobid

import (
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestDeriveIsAValidVersion8UUID(t *testing.T) {
	id := Derive("default", "k1", "fp")
	u, err := uuid.Parse(id)
	if err != nil {
		t.Fatalf("Derive = %q: not a UUID: %v", id, err)
	}
	if u.Version() != 8 || u.Variant() != uuid.RFC4122 {
		t.Fatalf("Derive = %q: version %d variant %v, want 8 and RFC 4122/9562", id, u.Version(), u.Variant())
	}
	if u.String() != id {
		t.Fatalf("Derive = %q is not canonical (%q)", id, u.String())
	}
}

func TestDeriveIsDeterministicAndSeparatesInputs(t *testing.T) {
	a := Derive("t", "key", "fp")
	if b := Derive("t", "key", "fp"); a != b {
		t.Fatalf("same inputs gave %q and %q", a, b)
	}
	others := [][3]string{
		{"u", "key", "fp"},
		{"t", "kez", "fp"},
		{"t", "key", "fq"},
		{"tk", "ey", "fp"}, // the same concatenation, split differently
		{"t", "keyf", "p"},
	}
	seen := map[string][3]string{a: {"t", "key", "fp"}}
	for _, in := range others {
		id := Derive(in[0], in[1], in[2])
		if prev, ok := seen[id]; ok {
			t.Fatalf("Derive%v = Derive%v = %q", in, prev, id)
		}
		seen[id] = in
	}
}

// TestDeriveIsStable: the IDs are stored and compared across datacenters and
// builds, so the derivation never changes: these were derived by the first
// build that shipped it (a key longer than the stack buffer included).
func TestDeriveIsStable(t *testing.T) {
	for _, c := range []struct{ tenant, key, fp, want string }{
		{"default", "client-7:42:a1b2c3d4e5f6a7b8", "3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea",
			"19b94607-eaba-876e-b682-a82ab13f3d71"},
		{"acme", strings.Repeat("k", 300), "fp", "a1c3cb70-8e76-8545-bfda-7eeb4e27d94f"},
	} {
		if got := Derive(c.tenant, c.key, c.fp); got != c.want {
			t.Errorf("Derive(%q, %.20q…, %q) = %s, want %s", c.tenant, c.key, c.fp, got, c.want)
		}
	}
}

func TestDeriveAllocatesOnlyItsString(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = Derive("default", "client-7:42:a1b2c3d4e5f6a7b8", "fp") }); n > 1 {
		t.Fatalf("Derive allocates %v times, want 1 (the ID)", n)
	}
}
