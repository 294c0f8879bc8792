package jobid

import (
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
