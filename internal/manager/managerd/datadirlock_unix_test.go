//go:build unix

// The Raft log's lock is an flock, which walstore takes on unix only (the
// manager runs on Linux): this file is built where the lock exists.

package managerd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/once-dev/once/internal/config"
	"github.com/once-dev/once/internal/manager"
	"github.com/once-dev/once/internal/testutil"
	"github.com/once-dev/once/internal/walstore"
)

// listTree is every path under dir with its size and modification time.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size := info.Size()
		if d.IsDir() {
			size = 0
		}
		fmt.Fprintf(&b, "%s %d %d\n", path, size, info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestMainRefusesADataDirWhoseRaftLogIsOpen: a manager started on a data
// directory whose Raft log another store holds open (a manager process
// still running there) exits 1 with the message of docs/operations.md and
// changes nothing in the directory: it does not get as far as the ledger
// or the federation's files.
func TestMainRefusesADataDirWhoseRaftLogIsOpen(t *testing.T) {
	dataDir := t.TempDir()
	ws, err := walstore.Open(filepath.Join(dataDir, "raft", "wal"), walstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	before := listTree(t, dataDir)

	ports, err := testutil.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		manager.EnvNodeID + "=m1",
		manager.EnvDataDir + "=" + dataDir,
		manager.EnvRaftAddr + fmt.Sprintf("=127.0.0.1:%d", ports[0]),
		manager.EnvRPCAddr + fmt.Sprintf("=127.0.0.1:%d", ports[1]),
		manager.EnvGossipAddr + fmt.Sprintf("=127.0.0.1:%d", ports[2]),
		manager.EnvWANGossipAddr + fmt.Sprintf("=127.0.0.1:%d", ports[3]),
		manager.EnvBootstrapExpect + "=1",
		manager.EnvInsecure + "=true",
	}
	var stderr bytes.Buffer
	if code := Main(context.Background(), nil, env, io.Discard, &stderr); code != config.ExitFailure {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, config.ExitFailure, stderr.String())
	}
	want := "manager: open raft log: walstore: lock " + filepath.Join(dataDir, "raft", "wal") + ": walstore: locked by another open store"
	if !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr lacks %q:\n%s", want, stderr.String())
	}
	if after := listTree(t, dataDir); after != before {
		t.Fatalf("the refused start changed the data directory:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
