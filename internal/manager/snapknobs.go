package manager

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/once-dev/once/internal/logging"
)

// removePartialSnapshots removes the snapshots a stopped process left
// unfinished in dir (raft's FileSnapshotStore writes a snapshot in
// "<name>.tmp" and renames it when complete): a manager killed while it
// persisted a snapshot of its own, or while a leader's was copied to it,
// leaves one behind, which the store skips but never removes, so every such
// kill would leak a snapshot's worth of disk. No process writes there: the
// caller holds the data directory's lock (walstore.ErrLocked).
func (m *Manager) removePartialSnapshots(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("manager: snapshot store: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("manager: remove a partial snapshot: %w", err)
		}
		m.log.Warn("removed a snapshot left unfinished by a stop", logging.KeyDir, p)
	}
	return nil
}

// knobbedSnapshots is snaps calling the knobs' SnapshotWritten and
// SnapshotRead (snaps itself when neither is set).
func knobbedSnapshots(snaps raft.SnapshotStore, k TestingKnobs) raft.SnapshotStore {
	if k.SnapshotWritten == nil && k.SnapshotRead == nil {
		return snaps
	}
	return &knobSnapshots{SnapshotStore: snaps, k: k}
}

type knobSnapshots struct {
	raft.SnapshotStore
	k TestingKnobs
}

func (s *knobSnapshots) Create(version raft.SnapshotVersion, index, term uint64, c raft.Configuration,
	cIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, c, cIndex, trans)
	if err != nil || s.k.SnapshotWritten == nil {
		return sink, err
	}
	return &knobSink{SnapshotSink: sink, f: s.k.SnapshotWritten}, nil
}

func (s *knobSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil || s.k.SnapshotRead == nil {
		return meta, rc, err
	}
	return meta, &knobReader{ReadCloser: rc, hook: eofHook{r: rc, f: s.k.SnapshotRead}}, nil
}

// knobSink calls f after its first Write.
type knobSink struct {
	raft.SnapshotSink
	f    func()
	once sync.Once
}

func (s *knobSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	s.once.Do(s.f)
	return n, err
}

// knobReader is a snapshot's reader calling SnapshotRead at its end.
type knobReader struct {
	io.ReadCloser
	hook eofHook
}

func (r *knobReader) Read(p []byte) (int, error) { return r.hook.Read(p) }
