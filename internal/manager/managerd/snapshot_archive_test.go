package managerd

import (
	"archive/tar"
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func TestSnapshotArchiveRoundTripAndChecks(t *testing.T) {
	meta := &archiveMeta{SnapshotMeta: raft.SnapshotMeta{ID: "2-10-1", Index: 10, Term: 2, Version: raft.SnapshotVersionMax}, Datacenter: "dc2"}
	var buf bytes.Buffer
	if err := writeArchive(&buf, meta, strings.NewReader("the ledger's state")); err != nil {
		t.Fatal(err)
	}
	got, state, err := readArchive(bytes.NewReader(buf.Bytes()), 1<<20)
	if err != nil || got.Index != 10 || got.Term != 2 || got.Datacenter != "dc2" || string(state) != "the ledger's state" || got.Size != int64(len(state)) {
		t.Fatalf("round trip: %+v %q %v", got, state, err)
	}
	if _, _, err := readArchive(bytes.NewReader(buf.Bytes()), 4); !errors.Is(err, ErrBadArchive) {
		t.Errorf("state over the bound: %v", err)
	}
	if _, _, err := readArchive(bytes.NewReader(buf.Bytes()[:600]), 1<<20); !errors.Is(err, ErrBadArchive) {
		t.Errorf("a truncated archive: %v", err)
	}
	if _, _, err := readArchive(strings.NewReader("not a tar file at all, not at all"), 1<<20); !errors.Is(err, ErrBadArchive) {
		t.Errorf("not a tar: %v", err)
	}
	// An archive without SHA256SUMS.
	var partial bytes.Buffer
	tw := tar.NewWriter(&partial)
	for _, name := range []string{"meta.json", "state.bin"} {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: 2})
		_, _ = tw.Write([]byte("{}"))
	}
	_ = tw.Close()
	if _, _, err := readArchive(&partial, 1<<20); !errors.Is(err, ErrBadArchive) || !strings.Contains(err.Error(), "SHA256SUMS") {
		t.Errorf("no SHA256SUMS: %v", err)
	}
}
