package managerd

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// A snapshot archive (oncectl snapshot save|restore) is a tar file, as
// Consul's are: meta.json (the Raft snapshot's metadata and the datacenter
// whose ledger it holds), state.bin (the ledger's snapshot, docs/ledger.md's
// versioned format) and SHA256SUMS (the digests of both, checked before
// anything is restored).

// ErrBadArchive is matched by every error about an archive's content.
var ErrBadArchive = errors.New("not a valid once snapshot archive")

// maxArchiveMeta bounds meta.json and SHA256SUMS.
const maxArchiveMeta = 1 << 20

// archiveMeta is meta.json: the Raft snapshot's metadata, with the
// datacenter of the ledger beside its fields (empty in an archive written
// before it was recorded).
type archiveMeta struct {
	raft.SnapshotMeta
	Datacenter string `json:",omitempty"`
}

func writeArchive(w io.Writer, meta *archiveMeta, state io.Reader) error {
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	// The state is buffered to know its size for the tar header.
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, state); err != nil {
		return fmt.Errorf("reading the snapshot: %w", err)
	}
	sumMeta, sumState := sha256.Sum256(metaJSON), sha256.Sum256(buf.Bytes())
	sums := fmt.Sprintf("%s  meta.json\n%s  state.bin\n", hex.EncodeToString(sumMeta[:]), hex.EncodeToString(sumState[:]))
	tw := tar.NewWriter(w)
	now := time.Now()
	for _, f := range []struct {
		name string
		data []byte
	}{{"meta.json", metaJSON}, {"state.bin", buf.Bytes()}, {"SHA256SUMS", []byte(sums)}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o600, Size: int64(len(f.data)), ModTime: now}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// readArchive reads and checks an archive; maxState bounds state.bin.
func readArchive(r io.Reader, maxState int64) (*archiveMeta, []byte, error) {
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrBadArchive, err)
		}
		limit := int64(maxArchiveMeta)
		if h.Name == "state.bin" {
			limit = maxState
		}
		if h.Size > limit {
			return nil, nil, fmt.Errorf("%w: %s is %d bytes (limit %d)", ErrBadArchive, h.Name, h.Size, limit)
		}
		b, err := io.ReadAll(io.LimitReader(tr, limit+1))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %w", ErrBadArchive, h.Name, err)
		}
		files[h.Name] = b
	}
	for _, name := range []string{"meta.json", "state.bin", "SHA256SUMS"} {
		if _, ok := files[name]; !ok {
			return nil, nil, fmt.Errorf("%w: no %s", ErrBadArchive, name)
		}
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(files["SHA256SUMS"])), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if ok {
			want[name] = sum
		}
	}
	for _, name := range []string{"meta.json", "state.bin"} {
		got := sha256.Sum256(files[name])
		if hex.EncodeToString(got[:]) != want[name] {
			return nil, nil, fmt.Errorf("%w: %s does not match its SHA-256 in SHA256SUMS", ErrBadArchive, name)
		}
	}
	var meta archiveMeta
	if err := json.Unmarshal(files["meta.json"], &meta); err != nil {
		return nil, nil, fmt.Errorf("%w: meta.json: %w", ErrBadArchive, err)
	}
	meta.Size = int64(len(files["state.bin"]))
	return &meta, files["state.bin"], nil
}
